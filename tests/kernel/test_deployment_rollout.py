"""Issue 20's guarantee under ``kubesvc up``: a 10-replica Deployment behind a ClusterIP
Service is rolled (``kubectl set image``, then ``kubectl rollout restart``) while a client in
the machine sends a request every 10 ms, and not one request fails. What makes it hold is the
documents' promise: a new Pod receives traffic only once Ready (readiness probe), an old Pod
leaves the Service as soon as it starts terminating and keeps serving through its grace period
(the server drains 3 s on SIGTERM), and the rollout never takes more than maxUnavailable Pods
away. ``kubectl rollout status`` must finish, and the old ReplicaSet end at 0.

One ``kubesvc up`` for the module; expected values are the manifest's, written here by hand.
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.support.agent import RequestLoop, is_failure, requests_in, tally
from tests.support.netns import REPO_ROOT, wait_until
from tests.support.up import running_machine

pytestmark = pytest.mark.kernel

REPLICAS = 10
PORT = 9376
SERVER = yaml.safe_load((REPO_ROOT / "examples" / "backend.yaml").read_text().split("\n---\n")[1])["spec"]["containers"][0]


def manifests() -> str:
    container = {**SERVER, "image": "backend:v1"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"terminationGracePeriodSeconds": 10, "containers": [container]}}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": PORT}]}}
    return yaml.safe_dump_all([deployment, service])


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    with running_machine("w20b", tmp_path_factory.mktemp("rollout")) as made:
        made.kubectl("apply", "-f", "-", input=manifests())
        done = made.kubectl("rollout", "status", "deployment/web", "--timeout=180s", timeout=200)
        assert 'deployment "web" successfully rolled out' in done.stdout, done.stdout + made.log()
        yield made


def replica_sets(machine) -> list[tuple[str, int]]:
    items = machine.get("replicasets")["items"]
    items.sort(key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
    return [(rs["spec"]["template"]["spec"]["containers"][0]["image"], rs["spec"]["replicas"]) for rs in items]


def pod_names(machine) -> set[str]:
    """The Deployment's Pods that are not terminating."""
    return {p["metadata"]["name"] for p in machine.get("pods")["items"]
            if p["metadata"]["labels"].get("app") == "web" and not p["metadata"].get("deletionTimestamp")}


def roll_under_load(machine, *command: str) -> tuple[RequestLoop, set[str]]:
    vip = machine.cluster_ip("web")
    wait_until(lambda: not any(map(is_failure, requests_in(machine.ns.name, vip, 80, 20))), 60, "the Service answering")
    before = pod_names(machine)
    with RequestLoop(machine.ns.name, vip, 80, interval=0.01) as loop:
        time.sleep(1.0)
        machine.kubectl(*command)
        done = machine.kubectl("rollout", "status", "deployment/web", "--timeout=300s", timeout=320)
        assert 'deployment "web" successfully rolled out' in done.stdout
        time.sleep(1.0)
    return loop, before


@pytest.mark.parametrize("command, image", [
    (("set", "image", "deployment/web", "server=backend:v2"), "backend:v2"),
    (("rollout", "restart", "deployment/web"), "backend:v2"),
], ids=["set image", "rollout restart"])
def test_rollout_under_load_loses_no_request(machine, command, image):
    loop, before = roll_under_load(machine, *command)
    failures = loop.failures()
    assert not failures, f"{len(failures)} of {len(loop.records)} requests failed: {tally([o for _, o in failures])}"
    sets = replica_sets(machine)
    assert sets[-1] == (image, REPLICAS) and all(size == 0 for _, size in sets[:-1]), sets
    answered = {o for _, o in loop.records}
    after = pod_names(machine)
    assert not before & after, "every Pod was replaced"
    assert answered & before and answered & after, f"both generations answered: {tally([o for _, o in loop.records])}"
    print(f"{' '.join(command)}: {len(loop.records)} requests, 0 failed, ReplicaSets {sets}")
