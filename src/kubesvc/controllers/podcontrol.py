"""Pods made from a controller's template (pkg/controller/controller_utils.go ``PodControl``,
``GetPodFromTemplate``, ``slowStartBatch``).

* A Pod copies the template's labels, annotations, finalizers and spec, gets
  ``generateName: <owner>-`` (the apiserver appends 5 characters) and a controller reference to
  its owner; a template without labels is refused (``unable to create pods, no labels``).
* Many creates go in **slow-start batches** of 1, 2, 4, 8... run concurrently: a quota or
  admission error costs one failed call instead of hundreds; after a batch with any error the
  rest are skipped (the caller lowers its expectations by what was skipped).
* Events on the owner: ``SuccessfulCreate`` ``Created pod: <name>``, ``FailedCreate``
  ``Error creating: <err>`` (not while the namespace terminates), ``SuccessfulDelete``
  ``Deleted pod: <name>``, ``FailedDelete`` ``Error deleting: <err>``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable

from kubesvc.client.record import EventRecorder
from kubesvc.client.rest import PODS, ApiError, RestClient, is_namespace_terminating, is_not_found
from kubesvc.controllers.controllerref import new_controller_ref

SLOW_START_INITIAL_BATCH_SIZE = 1


def pod_from_template(template: dict, owner: dict, api_version: str, kind: str, *, generate_name: str | None = None,
                      extra_finalizers: tuple[str, ...] = ()) -> dict:
    """``GetPodFromTemplate``."""
    meta = template.get("metadata") or {}
    if not meta.get("labels"):
        raise ValueError("unable to create pods, no labels")
    pod_meta = {"generateName": generate_name or f"{owner['metadata']['name']}-", "namespace": owner["metadata"]["namespace"],
                "labels": dict(meta["labels"]), "ownerReferences": [new_controller_ref(owner, api_version, kind)]}
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    finalizers = list(meta.get("finalizers") or []) + [f for f in extra_finalizers if f not in (meta.get("finalizers") or [])]
    if finalizers:
        pod_meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(template.get("spec") or {})}


async def slow_start_batch(count: int, call: Callable[[], Awaitable[None]], initial: int = SLOW_START_INITIAL_BATCH_SIZE) -> tuple[int, Exception | None]:
    """``slowStartBatch``: (how many calls succeeded, the first error). Stops after a batch with
    an error; the calls never started are ``count - successes - failures``."""
    remaining, batch, successes = count, min(count, initial), 0
    while batch > 0:
        results = await asyncio.gather(*(call() for _ in range(batch)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, Exception)]
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r
        successes += batch - len(errors)
        if errors:
            return successes, errors[0]
        remaining -= batch
        batch = min(remaining, 2 * batch)
    return successes, None


class PodControl:
    def __init__(self, client: RestClient, recorder: EventRecorder):
        self._pods = client.resource(PODS)
        self._recorder = recorder

    async def create(self, owner: dict, pod: dict) -> dict:
        try:
            created = await self._pods.create(pod)
        except ApiError as exc:
            if not is_namespace_terminating(exc):
                self._recorder.event(owner, "Warning", "FailedCreate", f"Error creating: {exc}")
            raise
        self._recorder.event(owner, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return created

    async def delete(self, owner: dict, pod: dict) -> None:
        """A Pod already gone is no error (and no Event)."""
        meta = pod["metadata"]
        try:
            await self._pods.delete(meta["name"], meta["namespace"])
        except ApiError as exc:
            if is_not_found(exc):
                return
            self._recorder.event(owner, "Warning", "FailedDelete", f"Error deleting: {exc}")
            raise
        self._recorder.event(owner, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")
