"""The ReplicaSet controller and the ReplicationController manager against a real apiserver,
driven with the real kubectl: scale up and down (not-ready Pods deleted first), an orphan Pod
adopted, a Pod whose labels change released and replaced, Pods deleted behind the controller
replaced, ``kubectl delete rs --cascade=orphan`` leaving the Pods, and the status counts.
A stand-in kubelet (tests/support/workloads.py) reports the Pods Running and Ready."""

from __future__ import annotations

from datetime import datetime, timezone

import yaml

from kubesvc.client.rest import PODS
from kubesvc.controllers.serviceaccount.controller import SERVICEACCOUNTS
from kubesvc.controllers.gc.controller import GarbageCollector
from kubesvc.controllers.replicaset.controller import REPLICASETS, REPLICATIONCONTROLLERS, ReplicaSetController, replication_manager
from kubesvc.util.golang import parse_rfc3339
from tests.support.cluster import eventually, get_or_none, kubectl, running_task
from tests.support.workloads import fake_kubelet, ready_status, running_controllers


def replica_set(name: str, replicas: int, labels: dict | None = None, **spec) -> str:
    labels = labels or {"app": name}
    body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "app", "command": ["sleep", "1d"]}]}}, **spec}}
    return yaml.safe_dump(body)


def controller(client, informers):
    return ReplicaSetController(client, informers)


async def pods_of(client, namespace: str, labels: str = "") -> list[dict]:
    return (await client.resource(PODS).list(namespace, label_selector=labels or None))["items"]


def owner_uids(pod: dict) -> list[str]:
    return [ref["uid"] for ref in pod["metadata"].get("ownerReferences") or [] if ref.get("controller")]


async def rs_status(client, namespace: str, name: str) -> dict:
    return (await client.resource(REPLICASETS).get(name, namespace)).get("status") or {}


async def test_scale_up_then_down_deletes_not_ready_pods_first(apiserver, client, namespace):
    async with running_controllers(client, controller):
        async with running_task(fake_kubelet(client, namespace, ready_status, interval=0.1)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("web", 3))

            async def all_ready():
                status = await rs_status(client, namespace, "web")
                return status if status.get("readyReplicas") == 3 and status.get("availableReplicas") == 3 else None

            status = await eventually(all_ready, 30, "3 ready replicas")
        rs = await client.resource(REPLICASETS).get("web", namespace)
        assert status["replicas"] == 3 and status["fullyLabeledReplicas"] == 3
        assert status["observedGeneration"] == rs["metadata"]["generation"]
        ready_pods = {p["metadata"]["name"] for p in await pods_of(client, namespace)}
        pods = await pods_of(client, namespace)
        assert all(owner_uids(p) == [rs["metadata"]["uid"]] for p in pods)
        assert all(p["metadata"]["generateName"] == "web-" for p in pods)
        # the kubelet is gone: two more Pods stay Pending, and scaling back removes exactly those
        await kubectl(apiserver, "-n", namespace, "scale", "rs/web", "--replicas=5")
        await eventually(lambda: pods_count(client, namespace, 5), 30, "5 pods")
        await kubectl(apiserver, "-n", namespace, "scale", "rs/web", "--replicas=3")

        async def back_to_three():
            names = {p["metadata"]["name"] for p in await pods_of(client, namespace)}
            return names if len(names) == 3 else None

        assert await eventually(back_to_three, 30, "3 pods") == ready_pods
        await kubectl(apiserver, "-n", namespace, "scale", "rs/web", "--replicas=0")
        await eventually(lambda: pods_count(client, namespace, 0), 30, "no pods")
        await eventually(lambda: status_is(client, namespace, "web", 0), 30, "status replicas 0")
    table = await kubectl(apiserver, "-n", namespace, "get", "rs", "web", "--no-headers")
    assert table.stdout.split()[1:4] == ["0", "0", "0"]
    events = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=web",
                           "-o", "jsonpath={range .items[*]}{.reason} {.source.component}{\"\\n\"}{end}")
    assert "SuccessfulCreate replicaset-controller" in events.stdout and "SuccessfulDelete replicaset-controller" in events.stdout


async def pods_count(client, namespace: str, count: int) -> bool:
    return len(await pods_of(client, namespace)) == count


async def status_is(client, namespace: str, name: str, replicas: int) -> bool:
    return (await rs_status(client, namespace, name)).get("replicas", 0) == replicas


async def test_orphan_adopted_relabelled_pod_released_and_deleted_pods_replaced(apiserver, client, namespace):
    orphan = {"metadata": {"name": "orphan", "namespace": namespace, "labels": {"app": "web"}},
              "spec": {"containers": [{"name": "app", "image": "app"}]}}
    await client.resource(PODS).create(orphan)
    async with running_controllers(client, controller):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("web", 2))
        rs = await client.resource(REPLICASETS).get("web", namespace)
        uid = rs["metadata"]["uid"]

        async def two_owned():
            pods = await pods_of(client, namespace)
            return pods if len(pods) == 2 and all(owner_uids(p) == [uid] for p in pods) else None

        pods = await eventually(two_owned, 30, "the orphan adopted and one Pod created")
        assert "orphan" in {p["metadata"]["name"] for p in pods}
        adopted = next(p for p in pods if p["metadata"]["name"] == "orphan")
        assert adopted["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": uid,
                                                          "controller": True, "blockOwnerDeletion": True}]
        # relabelled: released (no owner) and replaced
        await kubectl(apiserver, "-n", namespace, "label", "pod", "orphan", "app=elsewhere", "--overwrite")

        async def released():
            pod = await get_or_none(client, PODS, "orphan", namespace)
            owned = await pods_of(client, namespace, "app=web")
            return pod is not None and not pod["metadata"].get("ownerReferences") and len(owned) == 2

        await eventually(released, 30, "the relabelled Pod released and replaced")
        # deleted behind the controller's back: replaced
        victim = (await pods_of(client, namespace, "app=web"))[0]["metadata"]["name"]
        await kubectl(apiserver, "-n", namespace, "delete", "pod", victim)

        async def replaced():
            names = {p["metadata"]["name"] for p in await pods_of(client, namespace, "app=web")}
            return len(names) == 2 and victim not in names

        await eventually(replaced, 30, "the deleted Pod replaced")


async def test_delete_with_cascade_orphan_leaves_the_pods(apiserver, client, namespace):
    async with running_controllers(client, controller):
        collector = GarbageCollector(client, workers=2)
        async with running_task(collector.run()):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("web", 2))
            await eventually(lambda: pods_count(client, namespace, 2), 30, "2 pods")
            out = await kubectl(apiserver, "-n", namespace, "delete", "rs", "web", "--cascade=orphan", timeout=60)
            assert out.stdout.strip() == 'replicaset.apps "web" deleted'
            assert await get_or_none(client, REPLICASETS, "web", namespace) is None

            async def orphaned():
                pods = await pods_of(client, namespace)
                return len(pods) == 2 and all(not p["metadata"].get("ownerReferences") for p in pods)

            await eventually(orphaned, 30, "both Pods kept without an owner")
            # a new ReplicaSet with the same selector adopts them instead of creating more
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("web2", 2, {"app": "web"}))
            uid = (await client.resource(REPLICASETS).get("web2", namespace))["metadata"]["uid"]

            async def adopted():
                pods = await pods_of(client, namespace)
                return len(pods) == 2 and all(owner_uids(p) == [uid] for p in pods)

            await eventually(adopted, 30, "the orphans adopted by the new ReplicaSet")


async def test_replication_controller_through_the_same_code(apiserver, client, namespace):
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
          "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "legacy"}},
                                               "spec": {"containers": [{"name": "app", "image": "app"}]}}}}
    async with running_controllers(client, lambda c, i: replication_manager(c, i)):
        async with running_task(fake_kubelet(client, namespace, ready_status, interval=0.1)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(rc))

            async def ready():
                status = (await client.resource(REPLICATIONCONTROLLERS).get("legacy", namespace)).get("status") or {}
                return status.get("readyReplicas") == 2 and status.get("replicas") == 2

            await eventually(ready, 30, "2 ready replicas")
        pods = await pods_of(client, namespace)
        uid = (await client.resource(REPLICATIONCONTROLLERS).get("legacy", namespace))["metadata"]["uid"]
        assert {ref["kind"] for p in pods for ref in p["metadata"]["ownerReferences"]} == {"ReplicationController"}
        assert all(owner_uids(p) == [uid] for p in pods)
        await kubectl(apiserver, "-n", namespace, "scale", "rc/legacy", "--replicas=1")
        await eventually(lambda: pods_count(client, namespace, 1), 30, "1 pod")
    events = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=legacy",
                           "-o", "jsonpath={range .items[*]}{.source.component}{\"\\n\"}{end}")
    assert set(events.stdout.split()) == {"replication-controller"}


async def test_controller_manager_runs_both_as_their_service_accounts(apiserver, client, namespace, tmp_path):
    """``kubesvc controller-manager --use-service-account-credentials --controllers=replicaset,replicationcontroller``:
    each writes as its kube-system ServiceAccount (upstream's bootstrap roles
    system:controller:replicaset-controller and system:controller:replication-controller are
    enough), Pods made and status written, no request refused."""
    from tests.support.apiserver import start_controller_manager

    manager = start_controller_manager(apiserver, tmp_path / "cm.log", "--leader-elect=false", "--secure-port=0",
                                       "--controllers=replicaset,replicationcontroller")
    try:
        rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
              "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "legacy"}},
                                                   "spec": {"containers": [{"name": "app", "image": "app"}]}}}}
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("web", 2) + "---\n" + yaml.safe_dump(rc))

        async def made():
            rs = (await client.resource(REPLICASETS).get("web", namespace)).get("status") or {}
            rc_status = (await client.resource(REPLICATIONCONTROLLERS).get("legacy", namespace)).get("status") or {}
            return rs.get("replicas") == 2 and rc_status.get("replicas") == 2 and len(await pods_of(client, namespace)) == 4

        await eventually(made, 60, "2 Pods each and both statuses written")
        for account in ("replicaset-controller", "replication-controller"):
            assert await get_or_none(client, SERVICEACCOUNTS, account, "kube-system") is not None
        assert "forbidden" not in manager.log()
    finally:
        assert manager.stop() == 0, manager.log()[-3000:]


async def test_available_only_after_min_ready_seconds(apiserver, client, namespace):
    async with running_controllers(client, controller):
        async with running_task(fake_kubelet(client, namespace, ready_status, interval=0.1)):
            await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=replica_set("slow", 2, minReadySeconds=3))

            async def available():
                return (await rs_status(client, namespace, "slow")).get("availableReplicas") == 2

            # the Pods do not change once Ready: only the controller's own requeue gets here
            await eventually(available, 30, "2 available replicas after minReadySeconds")
            seen = datetime.now(timezone.utc)
    ready_since = max(parse_rfc3339(c["lastTransitionTime"]) for p in await pods_of(client, namespace)
                      for c in p["status"]["conditions"] if c["type"] == "Ready")
    # available strictly after minReadySeconds of readiness (the timestamps have whole seconds)
    assert (seen - ready_since).total_seconds() > 3 - 1, (seen, ready_since)


async def test_failed_creates_report_replica_failure_and_stop_the_batch(apiserver, client, namespace):
    """A template the Pod validation refuses (an image with a leading space passes the
    ReplicaSet's template rules but not a Pod's): each sync tries one Pod (the first slow-start
    batch fails, the rest is skipped), the ReplicaFailure condition says why, FailedCreate Events."""
    body = yaml.safe_load(replica_set("broken", 5))
    body["spec"]["template"]["spec"]["containers"][0]["image"] = " app"
    async with running_controllers(client, controller):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=yaml.safe_dump(body))

        async def failure():
            conditions = (await rs_status(client, namespace, "broken")).get("conditions") or []
            return next((c for c in conditions if c["type"] == "ReplicaFailure"), None)

        condition = await eventually(failure, 30, "the ReplicaFailure condition")
        assert condition["status"] == "True" and condition["reason"] == "FailedCreate"
        assert "must not have leading or trailing whitespace" in condition["message"]
        assert await pods_of(client, namespace) == []

        async def retried():
            # a failed create lowers the expectations at once, so the next sync (rate-limited
            # retry) tries again instead of waiting out the 5-minute expectations timeout
            events = await kubectl(apiserver, "-n", namespace, "get", "events",
                                   "--field-selector=involvedObject.name=broken,reason=FailedCreate", "-o", "name")
            return len(events.stdout.split()) >= 2

        await eventually(retried, 30, "a second FailedCreate Event", interval=0.5)
