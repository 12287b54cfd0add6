"""The eviction subresource (upstream pkg/registry/core/pod/storage/eviction.go ``EvictionREST``).

``POST pods/NAME/eviction`` with a policy/v1 ``Eviction`` asks the apiserver to delete the Pod
unless that would violate a PodDisruptionBudget. This server serves no PodDisruptionBudgets, so
no budget ever refuses (upstream with none matching the Pod behaves the same). What is kept:

* the Eviction's ``metadata.name`` must be the URL's: else 400 ``name in URL does not match name
  in Eviction object``; a missing Pod is 404 as for a GET;
* ``deleteOptions`` are the delete's options (grace period, preconditions); the request's
  ``dryRun`` and the options' must agree (400 otherwise), and a dry run changes nothing;
* before the delete the Pod gets the condition ``DisruptionTarget`` True, reason
  ``EvictionByEvictionAPI``, message ``Eviction API: evicting`` (``addConditionAndDeletePod``;
  PodDisruptionConditions is GA in 1.32): a Job's pod failure policy can then tell an eviction
  from a crash. The condition is written at the Pod's current revision (a ``uid`` or
  ``resourceVersion`` precondition of the options is checked against it, and a
  resourceVersion precondition then moves on to the revision the condition made);
* a Pod that is Pending (not yet terminating) is deleted with its resourceVersion as a
  precondition (``shouldEnforceResourceVersion``), and a conflict retries the whole
  read-and-delete, up to 20 times 0.5 s apart (``EvictionsRetry``), unless the client gave a
  resourceVersion precondition itself (a ``uid`` precondition that does not hold is answered
  409 at once, where upstream would retry it for 10 s);
* the answer is ``Status`` Success, code 201.
"""

from __future__ import annotations

import asyncio
import copy

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.pods import update_pod_condition
from kubesvc.apiserver.registry.store import Store

DISRUPTION_TARGET = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
EVICTIONS_RETRY_STEPS = 20
EVICTIONS_RETRY_INTERVAL = 0.5


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def can_ignore_pdb(pod: dict) -> bool:
    """``canIgnorePDB``: a finished, Pending or terminating Pod is evicted without a budget check."""
    return _phase(pod) in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))


def should_enforce_resource_version(pod: dict) -> bool:
    """``shouldEnforceResourceVersion``: not for finished or terminating Pods."""
    return not (_phase(pod) in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"))


def resource_version_unset(options: dict) -> bool:
    return not (options.get("preconditions") or {}).get("resourceVersion")


def delete_options_of(eviction: dict, request_dry_run: bool) -> dict:
    """``propagateDryRun``: the Eviction's deleteOptions with the request's dryRun."""
    options = copy.deepcopy(eviction.get("deleteOptions") or {})
    for key in ("apiVersion", "kind"):
        options.pop(key, None)
    requested = ["All"] if request_dry_run else []
    given = options.get("dryRun") or []
    if not given:
        if requested:
            options["dryRun"] = requested
    elif requested and given != requested:
        raise errors.bad_request(f"Non-matching dry-run options in request and content: {requested} and {given}")
    return options


def _with_resource_version(options: dict, resource_version: str) -> dict:
    options = copy.deepcopy(options)
    options.setdefault("preconditions", {})["resourceVersion"] = resource_version
    return options


async def _add_condition_and_delete(pods: Store, namespace: str, name: str, options: dict, dry_run: bool) -> None:
    """``addConditionAndDeletePod``."""
    if not dry_run:
        now = pods.clock.now()

        def add_condition(pod: dict) -> dict:
            status = pod.setdefault("status", {})
            status["conditions"], _ = update_pod_condition(status.get("conditions") or [], DISRUPTION_TARGET, now)
            return pod

        updated = await pods.update_in_storage(namespace, name, add_condition, preconditions=options.get("preconditions") or {})
        if not resource_version_unset(options):  # the condition's write is the revision now expected
            options = _with_resource_version(options, updated["metadata"]["resourceVersion"])
    await pods.delete(namespace, name, options, dry_run=dry_run)


async def evict_pod(pods: Store, namespace: str, name: str, eviction: dict, *, request_dry_run: bool) -> None:
    """``EvictionREST.Create`` with no PodDisruptionBudget to consult."""
    if name != (eviction.get("metadata") or {}).get("name", ""):
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = delete_options_of(eviction, request_dry_run)
    dry_run = options.get("dryRun") == ["All"]
    retry_conflicts = resource_version_unset(options)
    for attempt in range(EVICTIONS_RETRY_STEPS):
        pod = await pods.get(namespace, name)
        attempt_options = options
        if can_ignore_pdb(pod) and should_enforce_resource_version(pod) and resource_version_unset(options):
            attempt_options = _with_resource_version(options, pod["metadata"]["resourceVersion"])
        try:
            await _add_condition_and_delete(pods, namespace, name, attempt_options, dry_run)
            return
        except StatusError as err:
            # a uid precondition never comes true by retrying: answered at once (upstream retries it too)
            if err.code != 409 or not retry_conflicts or "UID in precondition" in err.message or attempt == EVICTIONS_RETRY_STEPS - 1:
                raise
        await asyncio.sleep(EVICTIONS_RETRY_INTERVAL)
