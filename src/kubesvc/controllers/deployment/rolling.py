"""One step of a RollingUpdate (pkg/controller/deployment/rolling.go), as sizes to write.

Each sync does at most one of these, then writes the status:

1. **Scale the new ReplicaSet up** into the surge room: ``replicas + maxSurge`` minus the
   sizes of every ReplicaSet, never past ``replicas`` (``NewRSNewReplicas``); or down to
   ``replicas`` if it is bigger.
2. **Scale old ReplicaSets down**, at most ``maxScaledDown = Σ sizes - (replicas -
   maxUnavailable) - (the new ReplicaSet's unavailable Pods)``: first the old ReplicaSets'
   *unavailable* Pods (``cleanupUnhealthyReplicas``: removing them costs no availability),
   oldest ReplicaSet first; then available ones, only as far as the available Pods of every
   ReplicaSet exceed ``replicas - maxUnavailable``.

So during a rollout the ReplicaSets never add up to more than ``replicas + maxSurge`` Pods and
the available Pods never drop below ``replicas - maxUnavailable`` by the controller's doing.
New Pods that do not become available stop the rollout (``maxScaledDown`` reaches 0): a
crash-looping template never takes the old Pods below that floor.
"""

from __future__ import annotations

from kubesvc.controllers.deployment.util import creation_key, max_unavailable, new_rs_new_replicas, replicas, status_int


class StaleReplicaSetStatus(Exception):
    pass


def new_replica_set_size(deployment: dict, all_rss: list[dict], new_rs: dict) -> int | None:
    """``reconcileNewReplicaSet``: the new ReplicaSet's next size, or None to leave it."""
    desired = replicas(deployment)
    current = replicas(new_rs)
    if current == desired:
        return None
    if current > desired:
        return desired
    size = new_rs_new_replicas(deployment, all_rss, new_rs)
    return None if size == current else size


def old_replica_set_sizes(deployment: dict, all_rss: list[dict], old_rss: list[dict], new_rs: dict) -> dict[str, int]:
    """``reconcileOldReplicaSets`` over the active old ReplicaSets: their new sizes by name
    (only those that change)."""
    if sum(replicas(rs) for rs in old_rss) == 0:
        return {}
    desired = replicas(deployment)
    min_available = desired - max_unavailable(deployment)
    new_unavailable = replicas(new_rs) - status_int(new_rs, "availableReplicas")
    max_scaled_down = sum(replicas(rs) for rs in all_rss) - min_available - new_unavailable
    if max_scaled_down <= 0:
        return {}
    sizes = cleanup_unhealthy(old_rss, max_scaled_down)
    sizes.update(scale_down_old(deployment, old_rss, new_rs, sizes))
    return {name: size for name, size in sizes.items() if size != replicas(_named(old_rss, name))}


def _named(rss: list[dict], name: str) -> dict:
    return next(rs for rs in rss if rs["metadata"]["name"] == name)


def cleanup_unhealthy(old_rss: list[dict], max_cleanup: int) -> dict[str, int]:
    """``cleanupUnhealthyReplicas``: take up to ``max_cleanup`` unavailable Pods off the old
    ReplicaSets, oldest first (removing them costs no availability)."""
    sizes: dict[str, int] = {}
    cleaned = 0
    for rs in sorted(old_rss, key=creation_key):
        if cleaned >= max_cleanup:
            break
        size, available = replicas(rs), status_int(rs, "availableReplicas")
        if size == 0 or size == available:
            continue
        count = min(max_cleanup - cleaned, size - available)
        if count < 0:
            # more available than its size: a status from before its last scale-down (the
            # ReplicaSet controller has not yet counted the deleted Pods). Upstream refuses
            # the step with this error and retries; acting on it would count Pods that are
            # going away as available.
            raise StaleReplicaSetStatus(f"when cleaning up unhealthy replicas, got invalid request to scale down "
                                        f"{rs['metadata'].get('namespace')}/{rs['metadata']['name']} {size} -> {size - count}")
        sizes[rs["metadata"]["name"]] = size - count
        cleaned += count
    return sizes


def scale_down_old(deployment: dict, old_rss: list[dict], new_rs: dict | None, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """``scaleDownOldReplicaSetsForRollingUpdate``: take available Pods off the old
    ReplicaSets, oldest first, as far as every ReplicaSet's available Pods exceed
    ``replicas - maxUnavailable``. ``sizes``: old sizes already decided this sync."""
    sizes = dict(sizes or {})
    min_available = replicas(deployment) - max_unavailable(deployment)
    available_pods = sum(status_int(rs, "availableReplicas") for rs in old_rss + ([new_rs] if new_rs else []))
    if available_pods <= min_available:
        return {}
    to_scale_down = available_pods - min_available
    scaled = 0
    result: dict[str, int] = {}
    for rs in sorted(old_rss, key=creation_key):
        if scaled >= to_scale_down:
            break
        name = rs["metadata"]["name"]
        size = sizes.get(name, replicas(rs))
        if size == 0:
            continue
        count = min(size, to_scale_down - scaled)
        result[name] = size - count
        scaled += count
    return result
