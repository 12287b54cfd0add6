"""The DaemonSet controller's decisions as pure functions (pkg/controller/daemon:
daemon_controller.go ``NodeShouldRunDaemonPod``, ``podsShouldBeOnNode``,
``updateDaemonSetStatus``; update.go ``rollingUpdate``, ``getPatch``; util/daemonset_util.go).

* **Which nodes.** A node runs the daemon Pod when the template's ``nodeName`` (if any) is the
  node, its ``nodeSelector`` and required node affinity match, and every ``NoSchedule`` /
  ``NoExecute`` taint is tolerated, counting the tolerations every daemon Pod gets
  (not-ready/unreachable ``NoExecute``; disk/memory/pid-pressure and unschedulable
  ``NoSchedule``; network-unavailable for host-network Pods). An untolerated ``NoExecute``
  taint also evicts a running one; a ``NoSchedule`` one only stops new ones.
* **The Pods.** Each carries ``controller-revision-hash`` (the template's hash) and
  ``pod-template-generation``, and a required node affinity ``metadata.name In [<node>]``
  that the scheduler binds by. Per node: none and should run -> create; failed or succeeded
  -> delete; several running -> keep the oldest (with surge: the oldest new and the oldest
  old one until the new one is available); should not run -> delete.
* **Rolling update.** ``maxUnavailable``/``maxSurge`` round **up** against the number of nodes
  that should run it (both 0: unavailable 1). Without surge, old Pods are deleted while the
  unavailable nodes stay under ``maxUnavailable`` (an old unavailable Pod always); the next
  pass creates the new ones. With surge, a new Pod joins an old one on up to ``maxSurge``
  nodes (always where the old one is unavailable) and the old one goes once the new one is
  available.
"""

from __future__ import annotations

import copy
from datetime import datetime

from kubesvc.controllers.intstr import scaled_value
from kubesvc.controllers.scheduler.placement import matches_node_affinity, tolerated
from kubesvc.api.pods import is_available, is_ready

UNIQUE_LABEL_KEY = "controller-revision-hash"
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
ROLLING_UPDATE = "RollingUpdate"

_DEFAULT_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)
NETWORK_UNAVAILABLE = ("node.kubernetes.io/network-unavailable", "NoSchedule")


def daemon_tolerations(spec: dict) -> list[dict]:
    """``AddOrUpdateDaemonPodTolerations``: the template's tolerations plus the defaults."""
    tolerations = list(spec.get("tolerations") or [])
    wanted = list(_DEFAULT_TOLERATIONS) + ([NETWORK_UNAVAILABLE] if spec.get("hostNetwork") else [])
    for key, effect in wanted:
        if not any(t.get("key") == key and t.get("effect") == effect and t.get("operator") == "Exists" for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})
    return tolerations


def node_should_run(ds: dict, node: dict) -> tuple[bool, bool]:
    """``NodeShouldRunDaemonPod``: (should run a new Pod, should keep a running one)."""
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    node_name = node["metadata"]["name"]
    if template_spec.get("nodeName") and template_spec["nodeName"] != node_name:
        return False, False
    pod = {"spec": {**template_spec, "nodeName": node_name, "tolerations": daemon_tolerations(template_spec)}}
    if not matches_node_affinity(pod, node):
        return False, False
    tolerations = pod["spec"]["tolerations"]
    taints = (node.get("spec") or {}).get("taints") or []
    untolerated = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerated(tolerations, t)]
    if untolerated:
        return False, not any(t.get("effect") == "NoExecute" for t in untolerated)
    return True, True


def template_generation(ds: dict) -> str | None:
    return ((ds.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)


def is_pod_updated(pod: dict, hash_: str, generation: str | None) -> bool:
    """``IsPodUpdated``: the current hash, or the current template generation."""
    labels = pod["metadata"].get("labels") or {}
    return bool(hash_) and labels.get(UNIQUE_LABEL_KEY) == hash_ or (generation is not None and labels.get(TEMPLATE_GENERATION_LABEL) == generation)


def target_node(pod: dict) -> str | None:
    """``GetTargetNodeName``: ``spec.nodeName``, else the node the affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return spec["nodeName"]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return None


def pod_template_for_node(ds: dict, node_name: str, hash_: str) -> dict:
    """The template a node's daemon Pod is made from: the hash and generation labels, the
    daemon tolerations, and a required affinity to exactly that node (other required node
    affinity terms replaced, as ``ReplaceDaemonSetPodNodeNameNodeAffinity`` does)."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    meta = template.setdefault("metadata", {})
    labels = dict(meta.get("labels") or {})
    labels[UNIQUE_LABEL_KEY] = hash_
    generation = template_generation(ds)
    if generation is not None:
        labels[TEMPLATE_GENERATION_LABEL] = generation
    meta["labels"] = labels
    spec = template.setdefault("spec", {})
    spec["tolerations"] = daemon_tolerations(spec)
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    return template


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def by_creation(pods: list[dict]) -> list[dict]:
    """``podByCreationTimestampAndPhase``: oldest first; running before pending at a tie."""
    return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", _phase(p) != "Running", p["metadata"].get("name", "")))


def _min_ready(ds: dict) -> int:
    return int((ds.get("spec") or {}).get("minReadySeconds") or 0)


def pods_to_delete_on_node(ds: dict, pods: list[dict], should_continue: bool, max_surge: int, hash_: str, now: datetime) -> tuple[list[dict], list[dict], list[dict]]:
    """``podsShouldBeOnNode`` for a node with Pods: (to delete, failed ones among them,
    succeeded ones among them). ``pods`` are the node's daemon Pods."""
    if not should_continue:
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")], [], []
    delete, failed, succeeded, running = [], [], [], []
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if _phase(pod) == "Failed":
            failed.append(pod)
        elif _phase(pod) == "Succeeded":
            succeeded.append(pod)
        else:
            running.append(pod)
    delete += failed + succeeded
    if len(running) <= 1:
        return delete, failed, succeeded
    running = by_creation(running)
    if max_surge == 0:
        return delete + running[1:], failed, succeeded
    oldest_new = oldest_old = None
    for pod in running:
        if (pod["metadata"].get("labels") or {}).get(UNIQUE_LABEL_KEY) == hash_:
            if oldest_new is None:
                oldest_new = pod
                continue
        elif oldest_old is None:
            oldest_old = pod
            continue
        delete.append(pod)
    if oldest_new is not None and oldest_old is not None:
        if not is_ready(oldest_old) or is_available(oldest_new, _min_ready(ds), now):
            delete.append(oldest_old)
    return delete, failed, succeeded


def surge_and_unavailable(ds: dict, desired: int) -> tuple[int, int]:
    """``updatedDesiredNodeCounts``: (maxSurge, maxUnavailable), both rounded up."""
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") if strategy.get("type", ROLLING_UPDATE) == ROLLING_UPDATE else None
    if rolling is None:
        surge = unavailable = 0
    else:
        surge = scaled_value(rolling.get("maxSurge"), desired, True)
        unavailable = scaled_value(rolling.get("maxUnavailable"), desired, True)
    if desired > 0 and surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _new_and_old(ds: dict, pods: list[dict], hash_: str) -> tuple[dict | None, dict | None, bool]:
    """``findUpdatedPodsOnNode``: (new Pod, old Pod, ok); not ok when there are two of a kind."""
    new = old = None
    generation = template_generation(ds)
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if is_pod_updated(pod, hash_, generation):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_update(ds: dict, node_pods: dict[str, list[dict]], should_run: dict[str, bool], hash_: str,
                   now: datetime) -> tuple[list[dict], list[str]]:
    """``rollingUpdate``: (old Pods to delete, nodes to create a new Pod on). ``node_pods``:
    every node's daemon Pods (nodes that should run one included, empty); ``should_run``:
    node name -> whether a new Pod may go there."""
    desired = sum(1 for run in should_run.values() if run)
    max_surge, max_unavailable = surge_and_unavailable(ds, desired)
    min_ready = _min_ready(ds)
    nodes = sorted(set(node_pods) | {n for n, run in should_run.items() if run})
    if max_surge == 0:
        unavailable = 0
        replacements, candidates = [], []
        for node in nodes:
            new, old, ok = _new_and_old(ds, node_pods.get(node, []), hash_)
            if not ok or (new is None and old is None) or (new is not None and old is not None):
                unavailable += 1
            elif new is not None:
                if not is_available(new, min_ready, now):
                    unavailable += 1
            elif not is_available(old, min_ready, now):
                replacements.append(old)
            elif unavailable < max_unavailable:
                candidates.append(old)
        remaining = min(max(0, max_unavailable - unavailable), len(candidates))
        return replacements + candidates[:remaining], []
    to_delete, should_not_run_delete, candidate_nodes, allowed_nodes = [], [], [], []
    surge = available = 0
    for node in nodes:
        new, old, ok = _new_and_old(ds, node_pods.get(node, []), hash_)
        if not ok:
            surge += 1
            continue
        if old is not None:
            available += is_available(old, min_ready, now)
        elif new is not None:
            available += is_available(new, min_ready, now)
        if old is None:
            continue
        if new is None:
            if not is_available(old, min_ready, now):
                if not should_run.get(node, False):
                    should_not_run_delete.append(old)
                    continue
                allowed_nodes.append(node)
            elif surge < max_surge:
                candidate_nodes.append(node)
        elif not is_available(new, min_ready, now):
            surge += 1
        else:
            to_delete.append(old)
    deletable = available - desired
    if deletable > 0:
        to_delete += should_not_run_delete[:deletable]
    remaining = min(max(0, max_surge - surge), len(candidate_nodes))
    return to_delete, allowed_nodes + candidate_nodes[:remaining]


def history_data(ds: dict) -> dict:
    """``getPatch``: the revision data that puts this template back."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def status_counts(ds: dict, nodes: list[dict], node_pods: dict[str, list[dict]], hash_: str, now: datetime) -> dict:
    """``updateDaemonSetStatus``'s counts, by each node's oldest daemon Pod."""
    desired = current = misscheduled = ready = updated = available = 0
    generation = template_generation(ds)
    for node in nodes:
        name = node["metadata"]["name"]
        run, _ = node_should_run(ds, node)
        pods = node_pods.get(name) or []
        if run:
            desired += 1
            if not pods:
                continue
            current += 1
            pod = by_creation(pods)[0]
            if is_ready(pod):
                ready += 1
                if is_available(pod, _min_ready(ds), now):
                    available += 1
            if is_pod_updated(pod, hash_, generation):
                updated += 1
        elif pods:
            misscheduled += 1
    return {"desiredNumberScheduled": desired, "currentNumberScheduled": current, "numberMisscheduled": misscheduled,
            "numberReady": ready, "updatedNumberScheduled": updated, "numberAvailable": available,
            "numberUnavailable": desired - available}
