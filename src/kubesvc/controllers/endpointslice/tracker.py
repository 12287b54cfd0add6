"""Knowing our own writes: which EndpointSlice generations the controller has written, so a
stale informer cache is never mistaken for the truth (upstream
``staging/src/k8s.io/endpointslice/util/endpointslice_tracker.go``).

After the controller creates or updates a slice it records the slice's ``metadata.generation``
(the apiserver bumps it on every change of endpoints, ports or labels); after a delete it
records "deletion expected". Then:

* a slice event whose generation is not newer than the tracked one is our own write echoing
  back: no resync needed (``should_sync``);
* before reconciling a Service, if the cache still shows an older generation than we wrote, a
  slice we deleted, or lacks a slice we created, the cache is stale: reconciling now would
  create duplicates, so the sync is retried later (``stale_slices``);
* the deletion of a slice we did not expect to go triggers a resync (``handle_deletion``).
"""

from __future__ import annotations

from collections.abc import Iterable

from kubesvc.controllers.endpointslice.util import LABEL_SERVICE_NAME

DELETION_EXPECTED = -1


def _service_key(slice_: dict) -> str:
    meta = slice_["metadata"]
    return f"{meta.get('namespace', '')}/{(meta.get('labels') or {}).get(LABEL_SERVICE_NAME, '')}"


def _generation(slice_: dict) -> int:
    return int(slice_["metadata"].get("generation") or 0)


class EndpointSliceTracker:
    def __init__(self) -> None:
        self._by_service: dict[str, dict[str, int]] = {}
        self._service_uids: dict[str, str] = {}

    def has(self, slice_: dict) -> bool:
        return slice_["metadata"].get("uid") in self._by_service.get(_service_key(slice_), {})

    def should_sync(self, slice_: dict) -> bool:
        tracked = self._by_service.get(_service_key(slice_), {}).get(slice_["metadata"].get("uid"))
        return tracked is None or _generation(slice_) > tracked

    def stale_slices(self, service_key: str, slices: Iterable[dict], service_uid: str | None = None) -> bool:
        """``service_uid``: a Service recreated under the same name starts afresh (what we
        wrote for its predecessor says nothing about it; kubernetes/kubernetes#141593)."""
        if service_uid is not None and self._service_uids.get(service_key, service_uid) != service_uid:
            self.delete_service(service_key)
        if service_uid is not None:
            self._service_uids[service_key] = service_uid
        tracked = self._by_service.get(service_key)
        if not tracked:
            return False
        provided = set()
        for slice_ in slices:
            uid = slice_["metadata"].get("uid")
            provided.add(uid)
            generation = tracked.get(uid)
            if generation is not None and (generation == DELETION_EXPECTED or generation > _generation(slice_)):
                return True
        return any(generation != DELETION_EXPECTED and uid not in provided for uid, generation in tracked.items())

    def update(self, slice_: dict) -> None:
        self._by_service.setdefault(_service_key(slice_), {})[slice_["metadata"]["uid"]] = _generation(slice_)

    def expect_deletion(self, slice_: dict) -> None:
        self._by_service.setdefault(_service_key(slice_), {})[slice_["metadata"]["uid"]] = DELETION_EXPECTED

    def handle_deletion(self, slice_: dict) -> bool:
        """Forget the slice; True if its deletion was expected (or it was never tracked)."""
        tracked = self._by_service.get(_service_key(slice_))
        if tracked is None:
            return True
        generation = tracked.pop(slice_["metadata"].get("uid"), None)
        if not tracked:
            del self._by_service[_service_key(slice_)]
        return generation is None or generation == DELETION_EXPECTED

    def delete_service(self, service_key: str) -> None:
        self._by_service.pop(service_key, None)
        self._service_uids.pop(service_key, None)
