"""The legacy Endpoints controller: one ``Endpoints`` object per selector Service, listing its
Pods' addresses (``desired`` decides, ``controller`` reads caches and writes)."""

from kubesvc.controllers.endpoints.controller import EndpointsController

__all__ = ["EndpointsController"]
