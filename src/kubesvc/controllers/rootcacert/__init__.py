"""The root CA publisher: a ``kube-root-ca.crt`` ConfigMap in every namespace."""

from kubesvc.controllers.rootcacert.publisher import RootCACertPublisher

__all__ = ["RootCACertPublisher"]
