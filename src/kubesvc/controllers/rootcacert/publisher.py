"""kube-controller-manager's ``root-ca-certificate-publisher-controller``
(pkg/controller/certificates/rootcacertpublisher/publisher.go): every namespace holds the
ConfigMap ``kube-root-ca.crt`` whose ``ca.crt`` is the CA bundle that verifies the apiserver, so
a Pod (through its projected ServiceAccount volume) can trust ``https://kubernetes.default.svc``.

* The bundle is ``--root-ca-file`` when given, else the certificate authority of the
  controller-manager's own kubeconfig.
* Namespaces added, or updated while ``Active``, enqueue the namespace; so do a
  ``kube-root-ca.crt`` ConfigMap deleted or updated (someone edited it).
* A sync creates the ConfigMap when missing (a namespace gone or terminating is no error), and
  otherwise puts back ``data`` = ``{"ca.crt": bundle}`` and the ``kubernetes.io/description``
  annotation when either differs; other annotations and labels are kept.
"""

from __future__ import annotations

import logging

from kubesvc.client.informer import Informer
from kubesvc.client.rest import ApiError, Resource, RestClient, is_namespace_terminating, is_not_found
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.runtime import namespace_is_active, run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.rootcacert")

CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
CONFIG_MAP_NAME = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal "
               "service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.")


def desired_data(root_ca: str) -> dict[str, str]:
    return {"ca.crt": root_ca}


def needs_update(config_map: dict, root_ca: str) -> bool:
    annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    return (config_map.get("data") or {}) != desired_data(root_ca) or not annotations.get(DESCRIPTION_ANNOTATION)


def updated(config_map: dict, root_ca: str) -> dict:
    """A copy with upstream's data and description; everything else kept."""
    meta = dict(config_map.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), DESCRIPTION_ANNOTATION: DESCRIPTION}
    return {**config_map, "metadata": meta, "data": desired_data(root_ca)}


def new_config_map(root_ca: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP_NAME, "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}}, "data": desired_data(root_ca)}


class RootCACertPublisher:
    def __init__(self, client: RestClient, namespaces: Informer, config_maps: Informer, root_ca: str, *, clock: Clock | None = None):
        self.client = client
        self.root_ca = root_ca
        self.queue = WorkQueue(clock=clock or RealClock())
        self._namespaces = namespaces
        self._config_maps = config_maps
        namespaces.add_event_handler(self._enqueue_namespace, self._on_namespace_update, None)
        config_maps.add_event_handler(None, lambda old, new: self._on_config_map(new), self._on_config_map)

    def _enqueue_namespace(self, namespace: dict) -> None:
        self.queue.add(namespace["metadata"]["name"])

    def _on_namespace_update(self, old: dict, new: dict) -> None:
        if namespace_is_active(new):
            self._enqueue_namespace(new)

    def _on_config_map(self, config_map: dict) -> None:
        if config_map["metadata"].get("name") == CONFIG_MAP_NAME:
            self.queue.add(config_map["metadata"].get("namespace", ""))

    async def run(self) -> None:
        await self._namespaces.wait_for_sync()
        await self._config_maps.wait_for_sync()
        await run_workers("root-ca-certificate-publisher-controller", self.queue, self.sync, 1)

    async def sync(self, namespace: str) -> None:
        config_maps = self.client.resource(CONFIGMAPS)
        current = self._config_maps.indexer.get(CONFIG_MAP_NAME, namespace)
        if current is None:
            try:
                await config_maps.create(new_config_map(self.root_ca), namespace)
            except ApiError as exc:
                if is_not_found(exc) or is_namespace_terminating(exc):
                    return
                raise
            return
        if needs_update(current, self.root_ca):
            await config_maps.update(updated(current, self.root_ca), namespace)


def read_root_ca(path: str) -> str:
    """``--root-ca-file``: a PEM bundle of at least one certificate; ValueError worded as
    kube-controller-manager's otherwise."""
    from cryptography import x509

    try:
        data = open(path, "rb").read()
    except OSError as exc:
        raise ValueError(f"error parsing root-ca-file at {path}: {exc.strerror or exc}") from None
    try:
        if not x509.load_pem_x509_certificates(data):
            raise ValueError
    except ValueError:
        raise ValueError(f"error parsing root-ca-file at {path}: data does not contain any valid RSA or ECDSA certificates") from None
    return data.decode()
