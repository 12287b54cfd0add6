"""The agent's Pod lifecycle as a user sees it through ``kubectl``, on ``kubesvc up`` in a
namespace of its own: probes that restart or gate containers, the crash-loop back-off,
restart policies and terminal phases, init containers, configuration errors, graceful and
forced termination, and the terminating-but-serving endpoint during a drain.

Every expectation (reasons, messages, exit codes) is upstream kubelet's, written by hand.
"""

from __future__ import annotations

import secrets
import time

import pytest
import yaml

from tests.support.agent import requests_in
from tests.support.netns import netns_names as host_netns_names
from tests.support.netns import wait_until as poll
from tests.support.up import Machine

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def up(shared_up):
    """The ``kubesvc up`` this module shares with the others of SHARED_UP_MODULES
    (tests/support/up.py, tests/kernel/conftest.py): its Pods' names are its own."""
    return shared_up


def wait_until(predicate, timeout: float = 20.0, message: str = "condition"):
    return poll(predicate, timeout, message)


@pytest.fixture
def scratch(tmp_path):
    """A host directory the Pods' processes and exec probes share with the test."""
    return tmp_path


def pod_manifest(name: str, containers: list[dict], **spec) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"containers": containers, "terminationGracePeriodSeconds": 2, **spec}})


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def container_status(up: Machine, pod: str, init: bool = False) -> dict:
    statuses = up.get("pod", pod).get("status", {}).get("initContainerStatuses" if init else "containerStatuses") or [{}]
    return statuses[0]


def pod_netns(up: Machine, pod: str) -> str:
    """The agent's network namespace of ``pod`` (``kubesvc-<uid>``), asserted to exist."""
    name = "kubesvc-" + up.get("pod", pod)["metadata"]["uid"]
    assert name in host_netns_names(), f"{pod} has no namespace {name}"
    return name


def not_found(up: Machine, pod: str) -> bool:
    result = up.kubectl("get", "pod", pod, check=False)
    return result.returncode != 0 and "NotFound" in result.stderr


def when(value, predicate):
    """``value`` if ``predicate(value)`` holds, else None (for wait_until)."""
    return value if predicate(value) else None


def events_of(up: Machine, pod: str) -> list[tuple[str, str]]:
    items = up.get("events", "--field-selector", f"involvedObject.name={pod}")["items"]
    return [(e["reason"], e["message"]) for e in items]


def condition(up: Machine, pod: str, type_: str) -> str:
    for c in up.get("pod", pod).get("status", {}).get("conditions") or []:
        if c["type"] == type_:
            return c["status"]
    return ""


def test_liveness_failure_restarts_the_container(up, scratch):
    alive = scratch / "alive"
    alive.write_text("yes")
    name = unique("live")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{
        "name": "c", "image": "busybox", "command": ["sleep", "1000"],
        "livenessProbe": {"exec": {"command": ["test", "-f", str(alive)]}, "periodSeconds": 1, "failureThreshold": 2}}]))
    wait_until(lambda: container_status(up, name).get("state", {}).get("running"), message="container running")
    time.sleep(2.5)
    assert container_status(up, name)["restartCount"] == 0  # a passing probe restarts nothing
    alive.unlink()
    status = wait_until(lambda: when(container_status(up, name), lambda s: s.get("restartCount") == 1), timeout=15,
                        message="one restart after the liveness probe failed")
    assert status["lastState"]["terminated"]["exitCode"] == 143  # sleep dies of the SIGTERM: 128 + 15
    messages = [m for _, m in events_of(up, name)]
    assert "Container c failed liveness probe, will be restarted" in messages
    assert any(m.startswith("Liveness probe failed: ") for m in messages)


def test_crash_loop_back_off_and_previous_logs(up):
    name = unique("crash")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo boom; exit 3"]}]))
    status = wait_until(lambda: when(container_status(up, name), lambda s: s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"),
                        timeout=15, message="CrashLoopBackOff")
    uid = up.get("pod", name)["metadata"]["uid"]
    assert status["state"]["waiting"]["message"] == f"back-off 10s restarting failed container=c pod={name}_default({uid})"
    assert status["lastState"]["terminated"]["exitCode"] == 3 and status["lastState"]["terminated"]["reason"] == "Error"
    assert status["restartCount"] == 1
    assert up.kubectl("logs", name, "--previous").stdout == "boom\n"
    table = up.kubectl("get", "pod", name, "--no-headers").stdout.split()
    assert table[2] == "CrashLoopBackOff" and table[3].startswith("1")
    assert ("BackOff", f"Back-off restarting failed container c in pod {name}_default({uid})") in events_of(up, name)


@pytest.mark.parametrize("code,phase,reason,column", [(0, "Succeeded", "Completed", "Completed"), (2, "Failed", "Error", "Error")],
                         ids=["exit-0-succeeded", "exit-2-failed"])
def test_restart_policy_never_ends_in_a_terminal_phase(up, code, phase, reason, column):
    name = unique("once")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", f"exit {code}"]}],
                                                     restartPolicy="Never"))
    pod = wait_until(lambda: when(up.get("pod", name), lambda p: p.get("status", {}).get("phase") == phase), message=phase)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == code and terminated["reason"] == reason
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert up.kubectl("get", "pod", name, "--no-headers").stdout.split()[2] == column
    up.kubectl("delete", "pod", name, "--wait=true", timeout=30)  # a finished Pod goes at once


def test_init_containers_run_to_completion_first(up, scratch):
    order = scratch / "order"
    name = unique("init")
    up.kubectl("apply", "-f", "-", input=pod_manifest(
        name, [{"name": "main", "image": "busybox", "command": ["sh", "-c", f"echo main >> {order}; sleep 1000"]}],
        initContainers=[{"name": "first", "image": "busybox", "command": ["sh", "-c", f"echo first >> {order}"]},
                        {"name": "second", "image": "busybox", "command": ["sh", "-c", f"sleep 0.5; echo second >> {order}"]}]))
    wait_until(lambda: condition(up, name, "Ready") == "True", message="Ready")
    # Ready once the main container has started; its shell writes a moment later
    wait_until(lambda: "main" in order.read_text().split(), message="the main container to write")
    assert order.read_text().split() == ["first", "second", "main"]
    init = up.get("pod", name)["status"]["initContainerStatuses"]
    assert [(s["name"], s["state"]["terminated"]["reason"], s["state"]["terminated"]["exitCode"]) for s in init] == [
        ("first", "Completed", 0), ("second", "Completed", 0)]
    assert condition(up, name, "Initialized") == "True"


def test_sidecar_init_container_runs_beside_the_pod_and_stops_when_it_completes(up, scratch):
    """An init container with restartPolicy Always (a sidecar, KEP-753) starts in its turn and
    keeps running: the next init container and the main one run while it does. When the main
    container of a restartPolicy Never Pod completes, the sidecar is stopped (SIGTERM: the
    shell's 143) and the Pod Succeeds. A sidecar that exits is restarted whatever the Pod's
    restartPolicy, and one whose image changes is restarted with it. On deletion the sidecar is
    stopped after the main container."""
    order, runs, stops = scratch / "order", scratch / "runs", scratch / "stops"
    name, crashing, deleted = unique("sidecar"), unique("sidecarcrash"), unique("sidecarstop")
    up.kubectl("apply", "-f", "-", input=pod_manifest(
        name, [{"name": "main", "image": "busybox", "command": ["sh", "-c", f"echo main >> {order}; sleep 2"]}], restartPolicy="Never",
        initContainers=[{"name": "proxy", "image": "busybox", "restartPolicy": "Always",
                         "command": ["sh", "-c", f"echo proxy >> {order}; trap 'exit 143' TERM; while true; do sleep 0.1; done"]},
                        {"name": "setup", "image": "busybox", "command": ["sh", "-c", f"echo setup >> {order}"]}]))
    up.kubectl("apply", "-f", "-", input=pod_manifest(
        crashing, [{"name": "main", "image": "busybox", "command": ["sleep", "1000"]}], restartPolicy="Never",
        initContainers=[{"name": "flaky", "image": "busybox", "restartPolicy": "Always", "command": ["sh", "-c", f"echo run >> {runs}; exit 1"]}]))

    def stopping(word):
        return ["sh", "-c", f"trap 'echo {word} >> {stops}; exit 0' TERM; while true; do sleep 0.1; done"]

    up.kubectl("apply", "-f", "-", input=pod_manifest(
        deleted, [{"name": "main", "image": "busybox", "command": stopping("main")}],
        initContainers=[{"name": "log", "image": "busybox", "restartPolicy": "Always", "command": stopping("sidecar")}]))

    pod = wait_until(lambda: when(up.get("pod", name), lambda p: p.get("status", {}).get("phase") == "Succeeded"), timeout=40,
                     message="the Pod Succeeded")
    assert order.read_text().split() == ["proxy", "setup", "main"]
    proxy, setup = pod["status"]["initContainerStatuses"]
    assert (proxy["name"], proxy["state"]["terminated"]["exitCode"], proxy["restartCount"]) == ("proxy", 143, 0)
    assert (setup["name"], setup["state"]["terminated"]["reason"], setup["state"]["terminated"]["exitCode"]) == ("setup", "Completed", 0)
    main = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (main["reason"], main["exitCode"]) == ("Completed", 0)
    # the sidecar ended after main: its finish is no earlier than main's
    assert proxy["state"]["terminated"]["finishedAt"] >= main["finishedAt"]

    flaky = wait_until(lambda: when(container_status(up, crashing, init=True), lambda s: s.get("restartCount", 0) >= 1), timeout=30,
                       message="the exiting sidecar restarted under restartPolicy Never")
    assert flaky["name"] == "flaky" and len(runs.read_text().split()) >= 2
    wait_until(lambda: "running" in container_status(up, crashing).get("state", {}), message="the main container running beside it")
    assert up.get("pod", crashing)["status"]["phase"] == "Running"
    for pod_name in (name, crashing):
        up.kubectl("delete", "pod", pod_name, "--wait=true", timeout=40)
    wait_until(lambda: condition(up, deleted, "Ready") == "True", message="the third Pod Ready")
    up.kubectl("patch", "pod", deleted, "--type=json", "-p", '[{"op": "replace", "path": "/spec/initContainers/0/image", "value": "busybox:1.37"}]')
    restarted = wait_until(lambda: when(container_status(up, deleted, init=True), lambda s: s.get("restartCount") == 1 and "running" in s["state"]),
                           message="the sidecar restarted with its new image")
    assert restarted["image"] == "busybox:1.37" and ("Killing", "Init container log definition changed") in events_of(up, deleted)
    up.kubectl("delete", "pod", deleted, "--wait=true", timeout=40)
    assert stops.read_text().split() == ["sidecar", "main", "sidecar"]  # the restart's, then the deletion's in order


def test_init_container_image_change_as_the_kubelet_does(up, scratch):
    """spec.initContainers[*].image may change on a running Pod. kuberuntime's
    computeInitContainerActions (1.32) looks at no regular init container once the Pod is
    initialized: the completed one is not run again and the main container keeps running. One
    waiting out its crash-loop back-off runs again at once, with the new image (the back-off
    key holds the container's hash), not after the 20 s it was told to wait."""
    done_runs, loop_runs = scratch / "done-runs", scratch / "loop-runs"
    done, loop = unique("initdone"), unique("initloop")
    main = [{"name": "main", "image": "busybox", "command": ["sleep", "1000"]}]
    up.kubectl("apply", "-f", "-", input=pod_manifest(done, main, initContainers=[
        {"name": "setup", "image": "busybox:1.36", "command": ["sh", "-c", f"echo run >> {done_runs}"]}]))
    up.kubectl("apply", "-f", "-", input=pod_manifest(loop, main, initContainers=[
        {"name": "setup", "image": "busybox:1.36", "command": ["sh", "-c", f"echo run >> {loop_runs}; exit 1"]}]))
    new_image = '[{"op": "replace", "path": "/spec/initContainers/0/image", "value": "busybox:1.37"}]'
    wait_until(lambda: condition(up, done, "Ready") == "True", message="the initialized Pod Ready")
    up.kubectl("patch", "pod", done, "--type=json", "-p", new_image)

    def backing_off_20s(status):
        return (status.get("state", {}).get("waiting", {}).get("message") or "").startswith("back-off 20s")

    before = wait_until(lambda: when(container_status(up, loop, init=True), backing_off_20s), timeout=40,
                        message="the failing init container in a 20 s back-off")
    runs = len(loop_runs.read_text().split())
    up.kubectl("patch", "pod", loop, "--type=json", "-p", new_image)
    after = wait_until(lambda: when(container_status(up, loop, init=True), lambda s: s.get("restartCount", 0) > before["restartCount"]),
                       timeout=12, message="the init container run again with its new image, without the back-off")
    # (a fresh back-off: the first retry of the new definition is immediate too)
    assert after["image"] == "busybox:1.37" and len(loop_runs.read_text().split()) > runs
    assert ("Killing", "Init container setup definition changed") not in events_of(up, loop)  # it was not running

    assert done_runs.read_text().split() == ["run"]  # not run again
    initialized = up.get("pod", done)["status"]
    assert initialized["initContainerStatuses"][0]["image"] == "busybox:1.36"  # the one that ran
    assert initialized["containerStatuses"][0]["restartCount"] == 0 and "running" in initialized["containerStatuses"][0]["state"]
    assert up.get("pod", done)["spec"]["initContainers"][0]["image"] == "busybox:1.37"


def test_read_only_root_filesystem_and_memory_volume_through_the_agent(up):
    """readOnlyRootFilesystem and an emptyDir of medium Memory as a process in the Pod sees them
    (kubectl exec): "/" refuses a write, the tmpfs volume takes one and is sized by its
    sizeLimit; the tmpfs leaves the host's mount table with the Pod."""
    name = unique("rofs")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{
        "name": "c", "image": "busybox", "command": ["sleep", "1000"], "securityContext": {"readOnlyRootFilesystem": True},
        "resources": {"limits": {"memory": "64Mi"}}, "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
        volumes=[{"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}]))
    wait_until(lambda: condition(up, name, "Ready") == "True", message="Ready")
    uid = up.get("pod", name)["metadata"]["uid"]
    seen = up.kubectl("exec", name, "--", "sh", "-c",
                      "touch /etc/x 2>&1; echo ok > /cache/f && cat /cache/f; grep ' /cache ' /proc/mounts | cut -d' ' -f1-3; "
                      "(echo >> /etc/resolv.conf) 2>&1 | grep -c 'Read-only file system'", check=False)
    assert seen.stdout.splitlines() == ["touch: cannot touch '/etc/x': Read-only file system", "ok", "tmpfs /cache tmpfs", "1"], seen
    options = up.kubectl("exec", name, "--", "sh", "-c", "grep ' /cache ' /proc/mounts").stdout.split()[3].split(",")
    assert "size=16384k" in options and "rw" in options
    host_tmpfs = [line for line in open("/proc/self/mountinfo").read().splitlines() if uid in line and " - tmpfs " in line]
    assert len(host_tmpfs) == 1 and host_tmpfs[0].split()[4].endswith("/volumes/kubernetes.io~empty-dir/cache")
    up.kubectl("delete", "pod", name, "--wait=true", timeout=40)
    assert not [line for line in open("/proc/self/mountinfo").read().splitlines() if uid in line]


def test_missing_secret_is_a_container_config_error(up):
    name = unique("cfg")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{
        "name": "c", "image": "busybox", "command": ["sleep", "1000"],
        "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]}]))
    waiting = wait_until(lambda: container_status(up, name).get("state", {}).get("waiting", {}).get("reason") == "CreateContainerConfigError"
                         and container_status(up, name)["state"]["waiting"], message="CreateContainerConfigError")
    assert waiting["message"] == 'secret "db" not found'
    assert up.get("pod", name)["status"]["phase"] == "Pending"
    assert up.kubectl("get", "pod", name, "--no-headers").stdout.split()[2] == "CreateContainerConfigError"


def test_startup_probe_holds_readiness_until_it_passes(up, scratch):
    started = scratch / "started"
    name = unique("startup")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{
        "name": "c", "image": "busybox", "command": ["sleep", "1000"],
        "startupProbe": {"exec": {"command": ["test", "-f", str(started)]}, "periodSeconds": 1, "failureThreshold": 30}}]))
    wait_until(lambda: container_status(up, name).get("state", {}).get("running"), message="running")
    time.sleep(2)
    status = container_status(up, name)
    assert status["started"] is False and status["ready"] is False
    assert condition(up, name, "Ready") == "False"
    started.write_text("")
    wait_until(lambda: condition(up, name, "Ready") == "True", timeout=10, message="Ready after the startup probe passed")
    assert container_status(up, name)["started"] is True


IGNORE_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(1000)"


def test_graceful_termination_runs_pre_stop_then_kills_after_the_grace_period(up, scratch):
    marker = scratch / "prestop"
    name = unique("grace")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{
        "name": "c", "image": "busybox", "command": ["python3", "-c", IGNORE_SIGTERM],
        "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", f"echo ran > {marker}"]}}}}], terminationGracePeriodSeconds=3))
    wait_until(lambda: condition(up, name, "Ready") == "True", message="Ready")
    netns = pod_netns(up, name)
    began = time.monotonic()
    up.kubectl("delete", "pod", name, timeout=30)  # waits until the object is gone
    took = time.monotonic() - began
    assert 3.0 <= took < 8.0, took  # SIGTERM ignored: SIGKILL at the end of the 3 s grace period
    assert marker.read_text() == "ran\n"
    assert not_found(up, name)
    assert netns not in host_netns_names(), "the Pod's network namespace is left"


def test_force_deletion_kills_at_once(up):
    name = unique("force")
    up.kubectl("apply", "-f", "-", input=pod_manifest(name, [{"name": "c", "image": "busybox", "command": ["python3", "-c", IGNORE_SIGTERM]}],
                                                     terminationGracePeriodSeconds=60))
    wait_until(lambda: condition(up, name, "Ready") == "True", message="Ready")
    netns = pod_netns(up, name)
    began = time.monotonic()
    up.kubectl("delete", "pod", name, "--grace-period=0", "--force")
    assert not_found(up, name)
    wait_until(lambda: netns not in host_netns_names(), timeout=10, message="the Pod's namespace removed")
    assert time.monotonic() - began < 3.0, "SIGKILL at once, not after the 60 s grace period"


def test_endpoint_is_terminating_and_serving_while_the_pod_drains(up):
    name = unique("drain")
    label = {"app": name}
    server = ("import http.server, signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "class H(http.server.BaseHTTPRequestHandler):\n"
              "    def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(b'ok')\n"
              "http.server.HTTPServer(('', 8080), H).serve_forever()\n")
    manifests = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"selector": label, "ports": [{"port": 80, "targetPort": 8080}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": label},
         "spec": {"terminationGracePeriodSeconds": 6, "containers": [{
             "name": "c", "image": "busybox", "command": ["python3", "-c", server],
             "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}}]}},
    ]
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))

    def endpoint_conditions():
        slices = up.get("endpointslices", "-l", f"kubernetes.io/service-name={name}")["items"]
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        return endpoints[0]["conditions"] if endpoints else None

    wait_until(lambda: endpoint_conditions() == {"ready": True, "serving": True, "terminating": False}, message="ready endpoint")
    vip = up.get("service", name)["spec"]["clusterIP"]
    wait_until(lambda: requests_in(up.ns.name, vip, 80, 1) == ["ok"], message="the Service answering")
    up.kubectl("delete", "pod", name, "--wait=false")
    draining = wait_until(lambda: when(endpoint_conditions(), lambda c: c and c.get("terminating")), timeout=10, message="terminating")
    assert draining == {"ready": False, "serving": True, "terminating": True}
    # the only endpoint is terminating but serving: the proxy keeps using it while it drains
    assert requests_in(up.ns.name, vip, 80, 5) == ["ok"] * 5
    wait_until(lambda: not_found(up, name), timeout=15, message="Pod gone after the grace period")
