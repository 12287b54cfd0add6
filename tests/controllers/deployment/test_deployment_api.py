"""The Deployment controller against a real apiserver, with the real kubectl: rollouts within
their surge/unavailability bounds (observed through a watch of the ReplicaSets), ``kubectl
rollout status|history|undo|restart|pause|resume``, proportional scaling mid-rollout, a
failed rollout reporting ProgressDeadlineExceeded, Recreate, history cleanup, and adoption
after ``kubectl delete --cascade=orphan``. The ReplicaSet controller runs beside it; a stand-in
kubelet reports Pods Ready unless their image is ``broken``."""

from __future__ import annotations

import asyncio
import contextlib

import yaml

from kubesvc.client.rest import PODS
from kubesvc.controllers.deployment.controller import DEPLOYMENTS, REPLICASETS, DeploymentController
from kubesvc.controllers.deployment.util import REVISION_ANNOTATION
from kubesvc.controllers.gc.controller import GarbageCollector
from kubesvc.controllers.replicaset.controller import ReplicaSetController
from tests.support.cluster import eventually, kubectl, running_task
from tests.support.workloads import fake_kubelet, ready_unless, running_controllers


def manifest(name: str, image: str, replicas: int, **spec) -> str:
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": image, "command": ["sleep", "3600"]}]}},
                     **spec}}
    return yaml.safe_dump(body)


@contextlib.asynccontextmanager
async def cluster(client, namespace, *, gc: bool = False):
    """The Deployment and ReplicaSet controllers (and the garbage collector), and a kubelet
    that readies every Pod but the ``broken`` image's."""
    factories = [lambda c, i: DeploymentController(c, i), lambda c, i: ReplicaSetController(c, i)]
    async with running_controllers(client, *factories) as controllers:
        async with running_task(fake_kubelet(client, namespace, ready_unless("broken"))):
            if gc:
                collector = GarbageCollector(client, workers=2)
                async with running_task(collector.run()):
                    yield controllers
            else:
                yield controllers


async def replica_sets(client, namespace) -> list[dict]:
    items = (await client.resource(REPLICASETS).list(namespace))["items"]
    return sorted(items, key=lambda rs: int(rs["metadata"].get("annotations", {}).get(REVISION_ANNOTATION, "0")))


def sizes(rss: list[dict]) -> list[int]:
    return [rs["spec"]["replicas"] for rs in rss]


class BoundsWatch:
    """Every ReplicaSet event of a namespace: the sum of sizes and of available replicas at
    each moment (one ReplicaSet's change applied at a time, as a client sees them)."""

    def __init__(self, client, namespace):
        self.client, self.namespace = client, namespace
        self.latest: dict[str, dict] = {}
        self.totals: list[int] = []
        self.available: list[int] = []

    async def run(self) -> None:
        listed = await self.client.resource(REPLICASETS).list(self.namespace)
        for rs in listed["items"]:
            self.latest[rs["metadata"]["name"]] = rs
        async for kind, rs in self.client.resource(REPLICASETS).watch(self.namespace, resource_version=listed["metadata"]["resourceVersion"]):
            if kind == "DELETED":
                self.latest.pop(rs["metadata"]["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self.latest[rs["metadata"]["name"]] = rs
            self.totals.append(sum(r["spec"]["replicas"] for r in self.latest.values()))
            self.available.append(sum((r.get("status") or {}).get("availableReplicas", 0) for r in self.latest.values()))


async def test_rolling_update_stays_within_bounds_and_kubectl_rollout_works(apiserver, client, namespace):
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 8))
        done = await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        assert 'deployment "web" successfully rolled out' in done.stdout
        watch = BoundsWatch(client, namespace)
        async with running_task(watch.run()):
            await asyncio.sleep(0.3)
            await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=v2")
            done = await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
            assert 'deployment "web" successfully rolled out' in done.stdout
            await asyncio.sleep(0.3)
        # 25 % of 8: surge 2 (rounded up), unavailable 2 (rounded down)
        assert watch.totals and max(watch.totals) <= 10, watch.totals
        assert min(watch.available) >= 6, watch.available
        assert max(watch.totals) == 10  # it did surge
        rss = await replica_sets(client, namespace)
        assert sizes(rss) == [0, 8]
        assert [rs["spec"]["template"]["spec"]["containers"][0]["image"] for rs in rss] == ["v1", "v2"]
        deployment = await client.resource(DEPLOYMENTS).get("web", namespace)
        assert deployment["metadata"]["annotations"][REVISION_ANNOTATION] == "2"
        assert {c["type"]: c["reason"] for c in deployment["status"]["conditions"]} == \
            {"Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}

        history = await kubectl(apiserver, "-n", namespace, "rollout", "history", "deployment/web")
        assert history.stdout.split("\n")[0].strip() == "deployment.apps/web"
        assert [line.split()[0] for line in history.stdout.strip().split("\n")[2:]] == ["1", "2"]
        undo = await kubectl(apiserver, "-n", namespace, "rollout", "undo", "deployment/web")
        assert undo.stdout.strip() == "deployment.apps/web rolled back"
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        rss = await replica_sets(client, namespace)
        # the v1 ReplicaSet came back as revision 3, remembering it was 1
        assert [(rs["spec"]["template"]["spec"]["containers"][0]["image"], rs["spec"]["replicas"],
                 rs["metadata"]["annotations"][REVISION_ANNOTATION]) for rs in rss] == [("v2", 0, "2"), ("v1", 8, "3")]
        assert rss[1]["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "1"
        history = await kubectl(apiserver, "-n", namespace, "rollout", "history", "deployment/web")
        assert [line.split()[0] for line in history.stdout.strip().split("\n")[2:]] == ["2", "3"]


async def test_pause_resume_restart(apiserver, client, namespace):
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 2))
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        paused = await kubectl(apiserver, "-n", namespace, "rollout", "pause", "deployment/web")
        assert paused.stdout.strip() == "deployment.apps/web paused"
        await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=v2")
        await eventually(lambda: _progressing_reason(client, namespace, "web", "DeploymentPaused"), 20, "Paused condition")
        assert len(await replica_sets(client, namespace)) == 1  # nothing rolls while paused
        refused = await kubectl(apiserver, "-n", namespace, "rollout", "restart", "deployment/web", check=False)
        assert refused.returncode != 0 and "can't restart paused deployment (run rollout resume first)" in refused.stderr
        resumed = await kubectl(apiserver, "-n", namespace, "rollout", "resume", "deployment/web")
        assert resumed.stdout.strip() == "deployment.apps/web resumed"
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        assert sizes(await replica_sets(client, namespace)) == [0, 2]
        restarted = await kubectl(apiserver, "-n", namespace, "rollout", "restart", "deployment/web")
        assert restarted.stdout.strip() == "deployment.apps/web restarted"
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        rss = await replica_sets(client, namespace)
        assert sizes(rss) == [0, 0, 2]
        assert "kubectl.kubernetes.io/restartedAt" in rss[-1]["spec"]["template"]["metadata"]["annotations"]


async def _progressing_reason(client, namespace, name, reason) -> bool:
    deployment = await client.resource(DEPLOYMENTS).get(name, namespace)
    return any(c["type"] == "Progressing" and c["reason"] == reason for c in (deployment.get("status") or {}).get("conditions") or [])


async def test_failed_rollout_reports_progress_deadline_exceeded(apiserver, client, namespace):
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 3, progressDeadlineSeconds=3))
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=broken")
        failed = await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s", check=False)
        assert failed.returncode == 1
        assert 'error: deployment "web" exceeded its progress deadline' in failed.stderr
        deployment = await client.resource(DEPLOYMENTS).get("web", namespace)
        progressing = next(c for c in deployment["status"]["conditions"] if c["type"] == "Progressing")
        new_rs = (await replica_sets(client, namespace))[-1]["metadata"]["name"]
        assert (progressing["status"], progressing["reason"], progressing["message"]) == \
            ("False", "ProgressDeadlineExceeded", f'ReplicaSet "{new_rs}" has timed out progressing.')
        # the old Pods were never taken below 3 - 0 (25 % of 3 rounds down to 0 unavailable)
        assert sizes(await replica_sets(client, namespace)) == [3, 1]


async def test_proportional_scaling_mid_rollout(apiserver, client, namespace):
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}}
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 10, strategy=strategy))
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=broken")

        async def stuck():  # rolling.go's crash-looping example: 10/0 -> 10/3 -> 8/3 -> 8/5, then stuck
            return sizes(await replica_sets(client, namespace)) == [8, 5]

        await eventually(stuck, 30, "the rollout stuck at 8 old / 5 new")
        await kubectl(apiserver, "-n", namespace, "scale", "deployment/web", "--replicas=20")
        # 20 + 3 allowed, 13 running, 10 to add: old round(8*23/13) = 14 (+6), new round(5*23/13) = 9 (+4)
        await eventually(lambda: _sizes_are(client, namespace, [14, 9]), 30, "proportional 14/9")
        await asyncio.sleep(0.5)
        assert sizes(await replica_sets(client, namespace)) == [14, 9]


async def _sizes_are(client, namespace, expected) -> bool:
    return sizes(await replica_sets(client, namespace)) == expected


async def test_recreate_never_runs_old_and_new_pods_together(apiserver, client, namespace):
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 3, strategy={"type": "Recreate"}))
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        images_seen: list[set] = []

        async def watch_pods():
            live: dict[str, str] = {}
            async for kind, pod in client.resource(PODS).watch(namespace):
                if kind == "DELETED":
                    live.pop(pod["metadata"]["name"], None)
                elif kind in ("ADDED", "MODIFIED"):
                    live[pod["metadata"]["name"]] = pod["spec"]["containers"][0]["image"]
                images_seen.append(set(live.values()))

        async with running_task(watch_pods()):
            await asyncio.sleep(0.3)
            await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=v2")
            await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
            await asyncio.sleep(0.3)
        assert not any(s >= {"v1", "v2"} for s in images_seen), images_seen
        assert images_seen[-1] == {"v2"}


async def test_history_limit_and_orphan_then_adopt(apiserver, client, namespace):
    async with cluster(client, namespace, gc=True):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 1, revisionHistoryLimit=1))
        for image in ("v2", "v3"):
            await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
            await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", f"app={image}")
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")

        async def images():
            return [rs["spec"]["template"]["spec"]["containers"][0]["image"] for rs in await replica_sets(client, namespace)]

        await eventually(lambda: _equals(images(), ["v2", "v3"]), 20, "v1's ReplicaSet cleaned up (limit 1)")

        deleted = await kubectl(apiserver, "-n", namespace, "delete", "deployment", "web", "--cascade=orphan")
        assert deleted.stdout.strip() == 'deployment.apps "web" deleted'

        async def orphaned():
            rss = await replica_sets(client, namespace)
            return len(rss) == 2 and all(not rs["metadata"].get("ownerReferences") for rs in rss)

        await eventually(orphaned, 30, "ReplicaSets orphaned")
        pods_before = {p["metadata"]["name"] for p in (await client.resource(PODS).list(namespace))["items"]}
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v3", 1, revisionHistoryLimit=1))
        deployment = await client.resource(DEPLOYMENTS).get("web", namespace)

        async def adopted():
            rss = await replica_sets(client, namespace)
            return len(rss) == 2 and all(rs["metadata"].get("ownerReferences", [{}])[0].get("uid") == deployment["metadata"]["uid"] for rs in rss)

        await eventually(adopted, 30, "ReplicaSets adopted by the new Deployment")
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        assert {p["metadata"]["name"] for p in (await client.resource(PODS).list(namespace))["items"]} == pods_before  # same Pod kept


async def _equals(value, expected) -> bool:
    return (await value) == expected


async def test_min_ready_seconds(apiserver, client, namespace):
    """Pods count as available only minReadySeconds after they became Ready: the ReplicaSet gets
    the Deployment's minReadySeconds (also when it changes later), and the rollout waits."""
    async with cluster(client, namespace):
        began = asyncio.get_running_loop().time()
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 2, minReadySeconds=3))
        await eventually(lambda: _all_ready_pods(client, namespace, 2), 30, "2 Ready Pods")
        ready_at = asyncio.get_running_loop().time()
        deployment = await client.resource(DEPLOYMENTS).get("web", namespace)
        assert not (deployment.get("status") or {}).get("availableReplicas")
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        available_at = asyncio.get_running_loop().time()
        # Ready times are whole seconds: available strictly after Ready + 3 s is >= 2 s after we saw Ready
        assert available_at - ready_at >= 2, (began, ready_at, available_at)
        assert [rs["spec"]["minReadySeconds"] for rs in await replica_sets(client, namespace)] == [3]
        await kubectl(apiserver, "-n", namespace, "patch", "deployment", "web", "--type=merge", "-p", '{"spec":{"minReadySeconds":1}}')

        async def synced():
            return [rs["spec"].get("minReadySeconds") for rs in await replica_sets(client, namespace)] == [1]

        await eventually(synced, 20, "minReadySeconds copied to the ReplicaSet")


async def _all_ready_pods(client, namespace, count) -> bool:
    pods = (await client.resource(PODS).list(namespace))["items"]
    return len(pods) == count and all(any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])
                                      for p in pods)


async def test_rollback_annotation(apiserver, client, namespace):
    """The pre-apps/v1 rollback request, ``deprecated.deployment.rollback.to``: the template of
    that revision comes back (with its change-cause) and the request is cleared; a revision
    that does not exist is only an Event."""
    async with cluster(client, namespace):
        await kubectl(apiserver, "-n", namespace, "apply", "-f", "-", input=manifest("web", "v1", 1))
        await kubectl(apiserver, "-n", namespace, "annotate", "deployment", "web", "kubernetes.io/change-cause=first")
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl(apiserver, "-n", namespace, "set", "image", "deployment/web", "app=v2")
        await kubectl(apiserver, "-n", namespace, "annotate", "deployment", "web", "--overwrite", "kubernetes.io/change-cause=second")
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl(apiserver, "-n", namespace, "annotate", "deployment", "web", "deprecated.deployment.rollback.to=1")

        async def rolled_back():
            d = await client.resource(DEPLOYMENTS).get("web", namespace)
            annotations = d["metadata"].get("annotations") or {}
            return (d["spec"]["template"]["spec"]["containers"][0]["image"] == "v1" and "deprecated.deployment.rollback.to" not in annotations
                    and annotations.get("kubernetes.io/change-cause") == "first" and d)

        d = await eventually(rolled_back, 20, "rolled back to revision 1")
        assert "pod-template-hash" not in d["spec"]["template"]["metadata"]["labels"]
        await kubectl(apiserver, "-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s")
        await kubectl(apiserver, "-n", namespace, "annotate", "deployment", "web", "deprecated.deployment.rollback.to=42")

        async def cleared():
            d = await client.resource(DEPLOYMENTS).get("web", namespace)
            return "deprecated.deployment.rollback.to" not in (d["metadata"].get("annotations") or {})

        await eventually(cleared, 20, "the request cleared")

        async def events() -> str:
            listed = await kubectl(apiserver, "-n", namespace, "get", "events", "--field-selector=involvedObject.name=web", "-o",
                                   "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
            return listed.stdout if "DeploymentRollbackRevisionNotFound" in listed.stdout else ""

        seen = await eventually(events, 20, "the rollback Events")
        assert 'DeploymentRollback: Rolled back deployment "web" to revision 1' in seen
        assert "DeploymentRollbackRevisionNotFound: Unable to find the revision to rollback to." in seen
