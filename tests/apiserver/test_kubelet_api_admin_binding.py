"""The apiserver's binding of its kubelet-client user to ``system:kubelet-api-admin``
(kubeletclient.ensure_kubelet_api_admin_binding), made at every start: several apiservers
starting at once on one store (three machines restarted together, or a test starting three
on one etcd) may all find it missing; the one that loses the create must start all the same,
its own user bound too."""

from __future__ import annotations

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.kubeletclient import KUBELET_API_ADMIN_BINDING, RBAC_GROUP, ensure_kubelet_api_admin_binding
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock


async def test_an_apiserver_that_loses_the_race_to_create_the_binding_starts_and_is_bound(monkeypatch):
    backend = MemoryBackend()
    first, _ = await build_control_plane(backend, FakeClock(), ["10.96.0.0/16"])
    second, _ = await build_control_plane(backend, FakeClock(), ["10.96.0.0/16"])
    bindings = first.store(RBAC_GROUP, "clusterrolebindings")
    read = bindings.get

    async def missing_then_made_by_the_other(namespace, name, *args, **kwargs):
        """The first read finds no binding, and the other apiserver creates it right then."""
        monkeypatch.setattr(bindings, "get", read)
        try:
            return await read(namespace, name, *args, **kwargs)
        except StatusError as exc:
            if exc.code == 404:
                await ensure_kubelet_api_admin_binding(second, "kube-apiserver-kubelet-client-2")
            raise

    monkeypatch.setattr(bindings, "get", missing_then_made_by_the_other)
    await ensure_kubelet_api_admin_binding(first, "kube-apiserver-kubelet-client-1")
    binding = await second.store(RBAC_GROUP, "clusterrolebindings").get(None, KUBELET_API_ADMIN_BINDING)
    assert [subject["name"] for subject in binding["subjects"]] == ["kube-apiserver-kubelet-client-2", "kube-apiserver-kubelet-client-1"]
