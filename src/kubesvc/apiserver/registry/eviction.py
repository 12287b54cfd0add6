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
from kubesvc.apiserver.registry.deleteoptions import validate_delete_options
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
        raise errors.bad_request(f"Non-matching dry-run options in request and content: {_go_list(requested)} and {_go_list(given)}")
    return options


def _go_list(values: list) -> str:
    """A []string as Go's %v prints it: ``[All]``."""
    return "[" + " ".join(str(v) for v in values) + "]"


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


async def admit_eviction(pods: Store, namespace: str, name: str, eviction: dict) -> None:
    """The Eviction's create through admission, as upstream admits it before ``EvictionREST``
    runs (a dry run too), so a refused eviction writes nothing: NamespaceLifecycle (no
    eviction in a namespace being deleted, 403 as any create there) and the Pod kind's plugins
    with the Pod it names as the old object (NodeRestriction's ``admitPodEviction``: a node
    evicts only Pods bound to itself). Admission names the URL's Pod; a missing one is 404."""
    named = {**eviction, "metadata": {**(eviction.get("metadata") or {}), "name": name}}
    await pods.admit_namespace_lifecycle(namespace, named)
    pod = await pods.get(namespace, name)
    admit = getattr(pods.strategy, "admit_subresource_create", None)
    if admit is not None:
        await admit("eviction", named, pod)


async def evict_pod(pods: Store, namespace: str, name: str, eviction: dict, *, request_dry_run: bool) -> None:
    """``EvictionREST.Create`` with no PodDisruptionBudget to consult, after admission."""
    await admit_eviction(pods, namespace, name, eviction)
    if name != (eviction.get("metadata") or {}).get("name", ""):
        raise errors.bad_request("name in URL does not match name in Eviction object")
    # the delete's options as the DELETE behind it validates them (rest.BeforeDelete): 422 before
    # anything is written, and a dryRun other than ["All"] never deletes for real
    options = validate_delete_options(delete_options_of(eviction, request_dry_run))
    dry_run = bool(options.get("dryRun"))  # validated: only "All"s (dryrun.IsDryRun)
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
