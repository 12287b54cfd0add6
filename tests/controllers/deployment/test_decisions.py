"""The Deployment controller's pure decisions against upstream's own unit-test cases
(pkg/controller/deployment: util/deployment_util_test.go, rolling_test.go, sync_test.go,
progress_test.go), as transcribed in reference/workloads.md §4."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.controllers.deployment import rolling, status, util
from kubesvc.controllers.intstr import IntOrPercentError

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def deployment(replicas, *, surge=None, unavailable=None, strategy="RollingUpdate", generation=1, dstatus=None, **spec):
    strat = {"type": strategy}
    if strategy == "RollingUpdate":
        strat["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    return {"metadata": {"name": "foo", "namespace": "default", "uid": "d-uid", "generation": generation},
            "spec": {"replicas": replicas, "strategy": strat, "template": {"metadata": {"labels": {"app": "foo"}}, "spec": {}}, **spec},
            "status": dstatus or {}}


def rs(name, size, *, available=None, created=0, desired=None, max_replicas=None, status_replicas=None, rev=None, generation=1,
       observed=1, deleting=False):
    annotations = {}
    if desired is not None:
        annotations[util.DESIRED_REPLICAS_ANNOTATION] = str(desired)
    if max_replicas is not None:
        annotations[util.MAX_REPLICAS_ANNOTATION] = str(max_replicas)
    if rev is not None:
        annotations[util.REVISION_ANNOTATION] = str(rev)
    meta = {"name": name, "uid": f"{name}-uid", "creationTimestamp": (NOW + timedelta(seconds=created)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "annotations": annotations, "generation": generation}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"replicas": size},
            "status": {"replicas": size if status_replicas is None else status_replicas,
                       "availableReplicas": size if available is None else available, "observedGeneration": observed}}


# ---- TestResolveFenceposts, TestMaxUnavailable, TestNewRSNewReplicas ------------------------

@pytest.mark.parametrize("surge, unavailable, desired, expected", [
    ("0%", "0%", 0, (0, 1)),
    ("39%", "39%", 10, (4, 3)),
    (None, "39%", 10, (0, 3)),
    ("39%", None, 10, (4, 0)),
    (None, None, 10, (0, 1)),
], ids=["0%/0% of 0", "39% of 10", "nil surge", "nil unavailable", "both nil"])
def test_resolve_fenceposts(surge, unavailable, desired, expected):
    assert util.resolve_fenceposts(surge, unavailable, desired) == expected


@pytest.mark.parametrize("surge, unavailable", [("oops", "39%"), ("55%", "urg")], ids=["bad surge", "bad unavailable"])
def test_resolve_fenceposts_errors(surge, unavailable):
    with pytest.raises(IntOrPercentError):
        util.resolve_fenceposts(surge, unavailable, 10)


@pytest.mark.parametrize("d, expected", [
    (deployment(10, surge=1, unavailable=5), 5),
    (deployment(10, surge=1, unavailable=10), 10),
    (deployment(5, surge=1, unavailable=10), 5),
    (deployment(0, surge=1, unavailable=10), 0),
    (deployment(10, strategy="Recreate"), 0),
    (deployment(10, surge=1, unavailable="50%"), 5),
    (deployment(10, surge=1, unavailable="100%"), 10),
    (deployment(5, surge=1, unavailable="100%"), 5),
], ids=["5 of 10", "10 of 10", "clamped to 5", "no replicas", "recreate", "50%", "100% of 10", "100% of 5"])
def test_max_unavailable(d, expected):
    assert util.max_unavailable(d) == expected


@pytest.mark.parametrize("d, new_size, expected", [
    (deployment(1, surge=1, unavailable=1), 5, 5),
    (deployment(6, surge=10, unavailable=1), 2, 6),
    (deployment(3, strategy="Recreate"), 1, 3),
], ids=["can not scale up - to newRSReplicas", "scale up - to depReplicas", "recreate - to depReplicas"])
def test_new_rs_new_replicas(d, new_size, expected):
    new = rs("new", new_size)
    assert util.new_rs_new_replicas(d, [rs("other", 5), new], new) == expected


# ---- rolling_test.go ---------------------------------------------------------------------------

@pytest.mark.parametrize("desired, surge, old, new, expected", [
    (10, 0, 10, 0, None),
    (10, 2, 10, 0, 2),
    (10, 2, 5, 0, 7),
    (10, 2, 10, 2, None),
    (10, 2, 2, 11, 10),
], ids=["no surge room", "surge 2", "old shrunk", "already surged", "new too big"])
def test_reconcile_new_replica_set(desired, surge, old, new, expected):
    d = deployment(desired, surge=surge, unavailable=0)
    old_rs, new_rs = rs("old", old, created=0), rs("new", new, created=1)
    assert rolling.new_replica_set_size(d, [old_rs, new_rs], new_rs) == expected


@pytest.mark.parametrize("desired, unavailable, old, new, old_available, new_available, expected", [
    (10, 0, 10, 0, 10, 0, {"old": 9}),
    (10, 2, 10, 0, 10, 0, {"old": 8}),
    (10, 2, 10, 0, 8, 0, {"old": 8}),
    (10, 2, 10, 0, 9, 0, {"old": 8}),
    (10, 2, 8, 2, 8, 0, {}),
], ids=["fencepost 1", "2 unavailable", "2 unhealthy cleaned", "1 cleaned + 1 scaled", "new pods unavailable"])
def test_reconcile_old_replica_sets(desired, unavailable, old, new, old_available, new_available, expected):
    d = deployment(desired, surge=0, unavailable=unavailable)
    old_rs = rs("old", old, available=old_available, created=0)
    new_rs = rs("new", new, available=new_available, created=1)
    assert rolling.old_replica_set_sizes(d, [old_rs, new_rs], [old_rs], new_rs) == expected


@pytest.mark.parametrize("desired, unavailable, old_available, old, expected", [
    (10, 0, 10, 10, {"old": 9}),
    (10, 2, 10, 10, {"old": 8}),
    (10, 2, 8, 10, {}),
    (10, 2, 10, 0, {}),
    (10, 2, 1, 10, {}),
], ids=["fencepost", "2", "not enough available", "empty", "few available"])
def test_scale_down_old_replica_sets(desired, unavailable, old_available, old, expected):
    d = deployment(desired, surge=0, unavailable=unavailable)
    old_rs = rs("old", old, available=old_available)
    assert rolling.scale_down_old(d, [old_rs], None) == expected


@pytest.mark.parametrize("ready, unhealthy, max_cleanup, cleaned", [(8, 2, 1, 1), (8, 2, 3, 2), (8, 2, 0, 0), (10, 0, 3, 0)],
                         ids=["capped at 1", "all 2", "none allowed", "none unhealthy"])
def test_cleanup_unhealthy_replicas(ready, unhealthy, max_cleanup, cleaned):
    old_rs = rs("old", 10, available=ready)
    assert 10 - rolling.cleanup_unhealthy([old_rs], max_cleanup).get("old", 10) == cleaned


# ---- full rollouts under instant readiness (§4.4) ------------------------------------------

def simulate(desired, surge, unavailable):
    d = deployment(desired, surge=surge, unavailable=unavailable)
    old_rs, new_rs = rs("old", desired, created=0), rs("new", 0, created=1)
    seq = [(desired, 0)]
    for _ in range(50):
        all_rss = [old_rs, new_rs]
        size = rolling.new_replica_set_size(d, all_rss, new_rs)
        if size is not None:
            new_rs = rs("new", size, created=1)
        else:
            sizes = rolling.old_replica_set_sizes(d, all_rss, [old_rs] if util.replicas(old_rs) else [], new_rs)
            if not sizes:
                break
            old_rs = rs("old", sizes["old"], created=0)
        # invariants on every step
        assert util.replicas(old_rs) + util.replicas(new_rs) <= desired + util.max_surge(d)
        seq.append((util.replicas(old_rs), util.replicas(new_rs)))
    return seq


@pytest.mark.parametrize("desired, surge, unavailable, expected", [
    (10, "25%", "25%", "10/0 10/3 5/3 5/8 0/8 0/10"),
    (10, 3, 2, "10/0 10/3 5/3 5/8 0/8 0/10"),
    (4, "25%", "25%", "4/0 4/1 2/1 2/3 0/3 0/4"),
    (1, "25%", "25%", "1/0 1/1 0/1"),
    (3, 1, 0, "3/0 3/1 2/1 2/2 1/2 1/3 0/3"),
    (3, 0, 1, "3/0 2/0 2/1 1/1 1/2 0/2 0/3"),
    (2, "0%", "1%", "2/0 1/0 1/1 0/1 0/2"),
    (10, "30%", "10%", "10/0 10/3 6/3 6/7 2/7 2/10 0/10"),
    (5, "100%", "0%", "5/0 5/5 0/5"),
    (5, "0%", "100%", "5/0 0/0 0/5"),
], ids=lambda v: str(v))
def test_full_rollout_sequence(desired, surge, unavailable, expected):
    assert " ".join(f"{o}/{n}" for o, n in simulate(desired, surge, unavailable)) == expected


# ---- TestScale (proportional scaling) ----------------------------------------------------------

def scale_case(old_replicas, new_replicas, rss_sizes, *, new_present=True, surge=0, old_surge=None, unavailable=0,
               template_changed=False, annotate=None, unavailable_new=False):
    old_d = deployment(old_replicas, surge=old_surge if old_surge is not None else surge, unavailable=unavailable)
    d = deployment(new_replicas, surge=surge, unavailable=unavailable, dstatus={"replicas": sum(rss_sizes)})
    annotations = {"desired": old_replicas, "max_replicas": old_replicas + util.max_surge(old_d)}
    made = []
    for index, size in enumerate(rss_sizes):  # newest first
        name = f"v{len(rss_sizes) - index}"
        kwargs = dict(annotations)
        if annotate and name in annotate:
            kwargs["desired"] = annotate[name]
        available = 0 if (unavailable_new and index == 0) else size
        made.append(rs(name, size, created=-index, available=available, **kwargs))
    new_rs = made[0] if new_present else None
    old_rss = made[1:] if new_present else made
    return d, new_rs, old_rss


@pytest.mark.parametrize("case, expected", [
    (scale_case(10, 12, [10]), {"v1": 12}),
    (scale_case(10, 5, [10]), {"v1": 5}),
    (scale_case(5, 10, [2, 3]), {"v2": 4, "v1": 6}),
    (scale_case(5, 3, [2, 3]), {"v2": 1, "v1": 2}),
    (scale_case(9, 4, [8, 1]), {"v2": 4, "v1": 0}),
    (scale_case(7, 10, [2, 3, 2]), {"v3": 3, "v2": 4, "v1": 3}),
    (scale_case(13, 8, [2, 8, 3]), {"v3": 1, "v2": 5, "v1": 2}),
    (scale_case(3, 4, [1, 1, 1]), {"v3": 2, "v2": 1, "v1": 1}),
    (scale_case(3, 2, [1, 1, 1]), {"v3": 1, "v2": 1, "v1": 0}),
    (scale_case(4, 5, [2, 2], new_present=False), {"v2": 3, "v1": 2}),
    (scale_case(6, 0, [3, 2, 1]), {"v3": 0, "v2": 0, "v1": 0}),
    (scale_case(6, 6, [0, 0, 0]), {"v3": 6}),
    (scale_case(10, 20, [6, 6], surge=2), {"v2": 11, "v1": 11}),
    (scale_case(10, 50, [5, 8], surge=6, old_surge=3), {"v2": 22, "v1": 34}),
    (scale_case(10, 14, [7, 3], new_present=False), {"v2": 10, "v1": 4}),
    (scale_case(2, 2, [2, 1], surge=1, unavailable=1, unavailable_new=True), {"v2": 2, "v1": 1}),
], ids=["normal 10->12", "normal 10->5", "proportional 5->10", "proportional 5->3", "proportional 9->4",
        "proportional 7->10", "proportional 13->8", "leftover 3->4", "leftover 3->2", "no new rs 4->5", "6->0", "0->6",
        "surge pods", "change both surge and size", "change both size and template", "saturated but broken new rs"])
def test_proportional_scaling(case, expected):
    d, new_rs, old_rss = case
    assert util.proportional_sizes(d, new_rs, old_rss) == expected


def test_saturated_new_replica_set_scales_old_ones_to_zero():
    d = deployment(3, surge=1, unavailable=0)
    new_rs = rs("new", 3, desired=3, available=3, created=1)
    old_rs = rs("old", 1, desired=3, created=0)
    assert util.proportional_sizes(d, new_rs, [old_rs]) == {"old": 0}


# ---- status (TestDeploymentComplete, TestDeploymentProgressing, timeouts) --------------------

@pytest.mark.parametrize("args, complete", [
    ((5, 5, 5, 5, 0, 0), True),
    ((5, 5, 5, 4, 1, 0), False),
    ((5, 5, 5, 3, 1, 0), False),
    ((5, 5, 4, 5, 0, 0), False),
    ((1, 2, 1, 1, 0, 1), False),
    ((1, 1, 1, 0, 1, 1), False),
], ids=["complete", "not complete", "not enough available", "not all updated", "still running old pods", "one replica unavailable"])
def test_deployment_complete(args, complete):
    desired, current, updated, available, max_unav, max_surge = args
    d = deployment(desired, surge=max_surge, unavailable=max_unav, generation=1)
    new_status = {"replicas": current, "updatedReplicas": updated, "availableReplicas": available, "observedGeneration": 1}
    assert status.deployment_complete(d, new_status) is complete


def _counts(replicas, updated, ready, available):
    return {"replicas": replicas, "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": available}


@pytest.mark.parametrize("old, new, progressing", [
    ((10, 4, 4, 4), (10, 6, 4, 4), True),
    ((10, 4, 4, 4), (10, 4, 4, 4), False),
    ((10, 4, 6, 6), (8, 4, 6, 6), True),
    ((10, 7, 3, 3), (10, 6, 3, 3), False),
    ((10, 4, 7, 7), (8, 8, 5, 5), True),
    ((10, 10, 9, 8), (10, 10, 10, 8), True),
    ((10, 10, 10, 9), (10, 10, 10, 10), True),
], ids=["updated pods", "not progressing", "old pods removed", "less new pods", "less overall but more new pods",
        "more ready pods", "more available pods"])
def test_deployment_progressing(old, new, progressing):
    d = deployment(10, surge=1, unavailable=1, dstatus=_counts(*old))
    assert status.deployment_progressing(d, _counts(*new)) is progressing


def _progressing(reason, updated_seconds_ago, state="True"):
    stamp = (NOW - timedelta(seconds=updated_seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "Progressing", "status": state, "reason": reason, "message": "", "lastUpdateTime": stamp, "lastTransitionTime": stamp}


@pytest.mark.parametrize("condition, timed_out", [
    (None, False),
    (_progressing("ReplicaSetUpdated", 30), False),
    (_progressing("ReplicaSetUpdated", 61), True),
    (_progressing("NewReplicaSetAvailable", 600), False),
    (_progressing("ProgressDeadlineExceeded", 0, "False"), True),
], ids=["no condition", "within deadline", "past deadline", "complete", "already timed out"])
def test_deployment_timed_out(condition, timed_out):
    d = deployment(3, surge=1, unavailable=0, progressDeadlineSeconds=60)
    assert status.deployment_timed_out(d, {"conditions": [condition] if condition else []}, NOW) is timed_out


def test_rollout_status_reports_deadline_exceeded_then_stays():
    d = deployment(3, surge=1, unavailable=0, progressDeadlineSeconds=60,
                   dstatus={**_counts(4, 1, 3, 3), "observedGeneration": 1, "conditions": [_progressing("ReplicaSetUpdated", 61)]})
    old_rs, new_rs = rs("old", 3, created=0), rs("new", 1, available=0, status_replicas=1, created=1)
    new_rs["status"]["readyReplicas"] = 0
    old_rs["status"]["readyReplicas"] = 3
    result = status.rollout_status(d, [old_rs, new_rs], new_rs, NOW)
    condition = status.get_condition(result, "Progressing")
    assert (condition["status"], condition["reason"], condition["message"]) == \
        ("False", "ProgressDeadlineExceeded", 'ReplicaSet "new" has timed out progressing.')
    assert status.get_condition(result, "Available")["reason"] == "MinimumReplicasAvailable"
    assert status.requeue_after(d, result, NOW) == 0.0  # the current one is not yet the timed-out one


def test_rollout_status_progress_moves_update_time_keeps_transition():
    earlier = _progressing("ReplicaSetUpdated", 50)
    earlier["lastTransitionTime"] = "2025-12-31T00:00:00Z"
    d = deployment(3, surge=1, unavailable=0, progressDeadlineSeconds=60,
                   dstatus={**_counts(4, 1, 3, 3), "observedGeneration": 1, "conditions": [earlier]})
    old_rs, new_rs = rs("old", 2, created=0), rs("new", 2, available=1, created=1)
    result = status.rollout_status(d, [old_rs, new_rs], new_rs, NOW)
    condition = status.get_condition(result, "Progressing")
    assert condition["reason"] == "ReplicaSetUpdated"
    assert condition["lastTransitionTime"] == "2025-12-31T00:00:00Z"
    assert condition["lastUpdateTime"] == "2026-01-01T12:00:00Z"
    assert condition["message"] == 'ReplicaSet "new" is progressing.'


def test_requeue_stuck_deployment_at_the_deadline():
    d = deployment(3, surge=1, unavailable=0, progressDeadlineSeconds=60,
                   dstatus={**_counts(4, 1, 3, 3), "conditions": [_progressing("ReplicaSetUpdated", 20)]})
    assert status.requeue_after(d, d["status"], NOW) == 41.0


# ---- cleanupDeployment --------------------------------------------------------------------

@pytest.mark.parametrize("rss, limit, deletions", [
    ([rs("a", 0), rs("b", 0, created=1), rs("c", 0, created=2)], 1, 2),
    ([rs("a", 0, status_replicas=0), rs("b", 0, status_replicas=1), rs("c", 1, status_replicas=0), rs("d", 1, status_replicas=1)], 0, 1),
    ([rs("a", 0), rs("b", 0)], 0, 2),
    ([rs("a", 1), rs("b", 1)], 0, 0),
    ([rs("a", 0, deleting=True)], 0, 0),
    ([rs("a", 0), rs("b", 0), rs("c", 0)], util.MAX_INT32, 0),
], ids=["3 x (0,0) limit 1", "mixed limit 0", "2 x (0,0)", "2 x (1,1)", "being deleted", "MaxInt32"])
def test_cleanup_deployment(rss, limit, deletions):
    d = deployment(1, surge=1, unavailable=0, revisionHistoryLimit=limit)
    assert len(util.replica_sets_to_clean_up(d, rss)) == deletions


def test_cleanup_takes_the_oldest_revisions_first():
    d = deployment(1, surge=1, unavailable=0, revisionHistoryLimit=1)
    rss = [rs("r3", 0, rev=3, created=0), rs("r1", 0, rev=1, created=2), rs("r2", 0, rev=2, created=1)]
    assert [r["metadata"]["name"] for r in util.replica_sets_to_clean_up(d, rss)] == ["r1", "r2"]


# ---- hash, template equality, revisions ------------------------------------------------------

def test_hash_is_stable_safe_and_collision_count_changes_it():
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    first = util.compute_hash(template, None)
    assert first == util.compute_hash({"spec": template["spec"], "metadata": template["metadata"]}, None)
    assert set(first) <= set("bcdfghjklmnpqrstvwxz2456789") and 1 <= len(first) <= 10
    assert util.compute_hash(template, 1) != first
    assert util.compute_hash({**template, "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}, None) != first


def test_safe_encode_and_fnv():
    # FNV-1a 32 of "a" is 0xe40c292c (the published test vector)
    assert util.fnv32a(b"a") == 0xE40C292C
    assert util.safe_encode("0123456789") == "".join("bcdfghjklmnpqrstvwxz2456789"[ord(c) % 27] for c in "0123456789")


def test_new_replica_set_is_found_ignoring_the_hash_label_and_empty_fields():
    d = deployment(1)
    d["spec"]["template"] = {"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    same = rs("same", 1, created=5)
    same["spec"]["template"] = {"metadata": {"labels": {"app": "foo", "pod-template-hash": "abc"}, "annotations": {}},
                                "spec": {"containers": [{"name": "c", "image": "x", "env": []}]}}
    other = rs("other", 1, created=1)
    other["spec"]["template"] = {"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "y"}]}}
    assert util.find_new_replica_set(d, [other, same]) is same
    assert util.find_old_replica_sets([other, same], same) == ([other], [other])


def test_revisions_and_rollback_history():
    rss = [rs("a", 0, rev=1), rs("b", 0, rev=3), rs("c", 1, rev=2)]
    assert (util.max_revision(rss), util.last_revision(rss)) == (3, 2)
    d = deployment(3, surge=1, unavailable=0)
    d["metadata"]["annotations"] = {"kubernetes.io/change-cause": "v2", util.REVISION_ANNOTATION: "3",
                                    util.LAST_APPLIED_ANNOTATION: "{}"}
    brought_back = rs("a", 0, rev=1)
    assert util.set_new_rs_annotations(d, brought_back, "4", exists=True)
    assert util.annotations(brought_back) == {util.REVISION_ANNOTATION: "4", util.REVISION_HISTORY_ANNOTATION: "1",
                                              "kubernetes.io/change-cause": "v2"}
    util.set_new_rs_annotations(d, brought_back, "6", exists=True)
    assert util.annotations(brought_back)[util.REVISION_HISTORY_ANNOTATION] == "1,4"
    fresh = rs("n", 0)
    util.set_new_rs_annotations(d, fresh, "7", exists=False)
    assert util.annotations(fresh)[util.DESIRED_REPLICAS_ANNOTATION] == "3"
    assert util.annotations(fresh)[util.MAX_REPLICAS_ANNOTATION] == "4"


def test_scaling_event():
    d = deployment(5, surge=1, unavailable=0)
    assert util.is_scaling_event(d, [rs("a", 3, desired=3)])
    assert not util.is_scaling_event(d, [rs("a", 3, desired=5), rs("b", 0, desired=3)])


def test_rollback_request_and_template():
    d = deployment(1)
    assert util.rollback_to(d) is None
    d["metadata"]["annotations"] = {util.ROLLBACK_TO_ANNOTATION: "3", "kubernetes.io/change-cause": "now", util.LAST_APPLIED_ANNOTATION: "{}"}
    assert util.rollback_to(d) == 3
    old = rs("old", 0, rev=3)
    old["metadata"]["annotations"]["kubernetes.io/change-cause"] = "then"
    old["spec"]["template"] = {"metadata": {"labels": {"app": "foo", "pod-template-hash": "h"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    back = util.rolled_back(d, old)
    assert back["spec"]["template"] == {"metadata": {"labels": {"app": "foo"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert back["metadata"]["annotations"] == {util.ROLLBACK_TO_ANNOTATION: "3", util.LAST_APPLIED_ANNOTATION: "{}", "kubernetes.io/change-cause": "then"}
    assert d["metadata"]["annotations"]["kubernetes.io/change-cause"] == "now"  # the input is not changed
    d["metadata"]["annotations"][util.ROLLBACK_TO_ANNOTATION] = "not a number"
    assert util.rollback_to(d) is None


def test_stale_old_status_stops_the_step():
    """An old ReplicaSet reporting more available Pods than its size (its status predates its
    last scale-down) makes the step fail, as upstream's cleanupUnhealthyReplicas does, instead of
    counting Pods that are going away."""
    d = deployment(8, surge=2, unavailable=2)
    old_rs, new_rs = rs("old", 6, available=8, created=0), rs("new", 4, available=2, created=1)
    with pytest.raises(rolling.StaleReplicaSetStatus, match="invalid request to scale down .*old 6 -> 8"):
        rolling.old_replica_set_sizes(d, [old_rs, new_rs], [old_rs], new_rs)
