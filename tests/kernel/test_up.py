"""``kubesvc up`` as a new user runs it (README), in a network namespace of the test's own
standing in for the machine (``ks-up-<hex>``, started with ``nsenter --net`` so the Pod
namespaces the agent makes are visible in the host's ``ip netns list``):

    python -m kubesvc up --data-dir <tmp> --secure-port 0
    kubectl apply -f examples/
    curl http://<my-service ClusterIP>/        (here: plain sockets from inside the namespace)

and what the user then observes: all three backends answering through the ClusterIP; each
backend's environment holding the Service variables of the Services created before it; a Pod
whose readiness fails leaving the answers within the probe period and ``kubectl get pod``
showing 0/1 (and coming back); ``kubectl delete pod`` during a request loop costing no request;
ClientIP affinity; UDP Services; ``kubectl logs``. Ctrl-C must leave the namespace exactly as
it was before (links, routes, nftables tables, iptables rules) and no Pod namespace on the host;
so must ``kill -9`` followed by ``kubesvc down``, which also kills the orphaned containers.

Expected values come from the examples (written here by hand) or from kubectl's output, never
from kubesvc's code.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from tests.support.agent import RequestLoop, in_netns, is_failure, request_in, requests_in, tally
from tests.support.netns import REPO_ROOT, Netns, netns_pids, wait_until
from tests.support.up import POD_NETNS_PREFIX, Machine, host_pod_namespaces, pod_namespaces_of, pod_uids_ever_stored, snapshot

pytestmark = pytest.mark.kernel

EXAMPLES = REPO_ROOT / "examples"
BACKENDS = {"backend-1", "backend-2", "backend-3"}
ALL_PODS = {("default", "backend-1"), ("default", "backend-2"), ("default", "backend-3"), ("default", "udp-echo-1"),
            ("default", "udp-echo-2")}  # and kube-system's, up's DNS add-on (tests/dns/test_dns_kernel.py)
BACKEND_PORT = 9376  # examples/backend.yaml: containerPort, targetPort
PROBE_PERIOD = 2.0  # examples/backend.yaml: readinessProbe periodSeconds (failureThreshold 1)
PROPAGATION = 4.0  # status write -> EndpointSlice -> proxy sync (min sync period 1 s) -> rules


# ---------------------------------------------------------------------------------------------
# the machine and the user's commands


@pytest.fixture
def machine(tmp_path):
    ns = Netns.create("up")
    made = Machine(ns, tmp_path)
    try:
        yield made
    finally:
        made.teardown()


def all_pods_ready(machine: Machine) -> dict:
    """Wait until the example Pods are Running and Ready; the Pods."""

    def ready():
        pods = {key: pod for key, pod in machine.pods().items() if key[0] != "kube-system"}
        if set(pods) != ALL_PODS:
            return None
        for pod in pods.values():
            conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
            if pod.get("status", {}).get("phase") != "Running" or conditions.get("Ready") != "True":
                return None
        return pods

    try:
        return wait_until(ready, 60, "every example Pod Running and Ready", interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{machine.kubectl('get', 'pods', '-A', '-o', 'wide').stdout}\n--- up log ---\n{machine.log()}") from None


def answers(machine: Machine, vip: str, count: int, port: int = 80) -> list[str]:
    return requests_in(machine.ns.name, vip, port, count)


def wait_for_answers(machine: Machine, vip: str, names: set[str], timeout: float, what: str, batch: int = 25) -> float:
    """Poll batches of ``batch`` requests until every one is answered and exactly ``names``
    answer; the seconds it took. (A Pod still in the Service misses a batch of 25 among three
    with probability (2/3)^25, 4e-5.)"""
    start = time.monotonic()
    last: list[str] = []

    def done():
        nonlocal last
        last = answers(machine, vip, batch)
        return not any(map(is_failure, last)) and set(last) == names

    try:
        wait_until(done, timeout, what, interval=0.05)
    except AssertionError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last batch: {tally(last)}\n--- up log ---\n{machine.log()}") from None
    return time.monotonic() - start


def dns_a(server: str, name: str) -> list[str] | None:
    """The A records of ``name`` asked of ``server`` (dnspython's stub), None if it does not answer."""
    import dns.exception
    import dns.message
    import dns.query

    try:
        answer = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=2)
    except (dns.exception.DNSException, OSError):
        return None
    return sorted(rr.to_text() for rrset in answer.answer for rr in rrset)


def udp_exchange(host: str, port: int, payload: bytes, timeout: float = 2.0) -> str:
    """One datagram from a new socket (a new conntrack flow); the answer, or ``! timeout``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(payload, (host, port))
        try:
            return sock.recv(2048).decode(errors="replace")
        except OSError as exc:
            return f"! {type(exc).__name__}: {exc}"


def pod_netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def processes_in_netns(inodes: set[int]) -> list[int]:
    """Every process on the host whose network namespace is one of ``inodes``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                found.append(int(entry))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------------------------------------
# the scenario


def test_up_examples_then_ctrl_c_leaves_nothing(machine):
    before = snapshot(machine.ns)
    pod_netns_before = host_pod_namespaces()
    machine.up()
    assert not (machine.data_dir / "token").exists()  # no built-in bearer token: the admin is the kubeconfig's certificate

    applied = machine.kubectl("apply", "-f", str(EXAMPLES)).stdout.splitlines()
    order = [line.split()[0] for line in applied]
    # kubectl applies the directory's files in name order: affinity.yaml (sticky) and backend.yaml
    # (my-service, then the Pods) come before kube-dns.yaml and udp-echo.yaml
    assert order.index("service/sticky") < order.index("pod/backend-1") and order.index("service/my-service") < order.index("pod/backend-1"), applied
    pods = all_pods_ready(machine)
    vip = machine.cluster_ip("my-service")
    sticky_vip = machine.cluster_ip("sticky")
    udp_vip = machine.cluster_ip("udp-echo")
    assert machine.cluster_ip("kube-dns", "kube-system") == "10.96.0.10"  # up's DNS add-on (and examples/kube-dns.yaml) ask for it

    # every Pod runs in a namespace of its own, visible on the host
    uids = {key: pod["metadata"]["uid"] for key, pod in pods.items()}
    listed = host_pod_namespaces()
    assert {POD_NETNS_PREFIX + uid for uid in uids.values()} <= listed, (uids, listed)

    # curl http://<ClusterIP>/ a few dozen times: all three answer, none fails
    wait_for_answers(machine, vip, BACKENDS, 20, "all three backends through the ClusterIP")
    during = snapshot(machine.ns)
    assert "cbr0" in during["ip link"] and "kube-proxy" in during["nft list tables"], during  # the leftover check below can fail
    got = tally(answers(machine, vip, 45))
    assert set(got) == BACKENDS and all(got[name] >= 3 for name in BACKENDS), f"45 requests to {vip}: {got}"

    # each backend's environment: the Service variables of the Services created before it
    for name in sorted(BACKENDS):
        pod_ip = pods[("default", name)]["status"]["podIP"]
        status, body = request_in(machine.ns.name, pod_ip, BACKEND_PORT, "/env")
        assert status == 200, (name, status, body)
        env = dict(line.split("=", 1) for line in body.splitlines() if "=" in line)
        expected = {"POD_NAME": name, "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
                    "KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": "tcp://10.96.0.1:443",
                    "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.1"}
        for service, prefix in (("my-service", "MY_SERVICE"), ("sticky", "STICKY")):
            svc = machine.get("service", service)
            ip, port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"]
            expected |= {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(port), f"{prefix}_PORT": f"tcp://{ip}:{port}",
                         f"{prefix}_PORT_{port}_TCP": f"tcp://{ip}:{port}", f"{prefix}_PORT_{port}_TCP_PROTO": "tcp",
                         f"{prefix}_PORT_{port}_TCP_PORT": str(port), f"{prefix}_PORT_{port}_TCP_ADDR": ip}
        wrong = {k: (v, env.get(k)) for k, v in expected.items() if env.get(k) != v}
        assert not wrong, f"{name}: environment variables (expected, actual): {wrong}\n{body}"
        assert "KUBE_DNS_SERVICE_HOST" not in env, f"{name}: a kube-system Service's variables in a default Pod:\n{body}"

    # readiness fails on backend-2: out of the answers within the probe period, 0/1; then back
    target = "backend-2"
    target_ip = pods[("default", target)]["status"]["podIP"]
    assert request_in(machine.ns.name, target_ip, BACKEND_PORT, "/unready", method="POST") == (200, f"{target} readiness: False\n")
    gone_after = wait_for_answers(machine, vip, BACKENDS - {target}, PROBE_PERIOD + PROPAGATION + 4, f"{target} out of the answers")
    assert gone_after <= PROBE_PERIOD + PROPAGATION, f"{target} left the answers {gone_after:.1f}s after failing readiness"
    got = tally(answers(machine, vip, 30))
    assert set(got) == BACKENDS - {target}, f"30 requests after {target} became unready: {got}"
    assert machine.ready_column(target) == "0/1"
    assert request_in(machine.ns.name, target_ip, BACKEND_PORT, "/ready", method="POST") == (200, f"{target} readiness: True\n")
    back_after = wait_for_answers(machine, vip, BACKENDS, PROBE_PERIOD + PROPAGATION + 4, f"{target} back in the answers")
    assert back_after <= PROBE_PERIOD + PROPAGATION, f"{target} rejoined the answers {back_after:.1f}s after passing readiness"
    assert machine.ready_column(target) == "1/1"
    print(f"readiness: out of the answers {gone_after:.2f}s after /unready, back {back_after:.2f}s after /ready")

    # ClientIP affinity: 20 requests from one address, one Pod
    got = tally(answers(machine, sticky_vip, 20))
    assert len(got) == 1 and set(got) <= BACKENDS and sum(got.values()) == 20, f"20 requests to sticky {sticky_vip}: {got}"

    # UDP: udp-echo from both Pods; the cluster DNS add-on on 10.96.0.10:53 answers a real query
    got = tally(in_netns(machine.ns.name, lambda: [udp_exchange(udp_vip, 5353, b"hello") for _ in range(20)]))
    assert set(got) == {"udp-echo-1: hello", "udp-echo-2: hello"}, f"20 datagrams to udp-echo {udp_vip}:5353: {got}"
    assert wait_until(lambda: in_netns(machine.ns.name, dns_a, "10.96.0.10", "my-service.default.svc.cluster.local") == [vip] or None,
                      60, "the cluster DNS answering")

    # kubectl logs
    logs = machine.kubectl("logs", "backend-2").stdout
    assert f"backend-2: listening on :{BACKEND_PORT}" in logs, logs

    # kubectl delete pod backend-1 while requests keep coming: none fails, backend-1 leaves
    with RequestLoop(machine.ns.name, vip, 80, interval=0.02) as loop:
        time.sleep(1.0)
        delete_started = time.monotonic()
        machine.kubectl("delete", "pod", "backend-1", timeout=60)
        deleted = time.monotonic()
        time.sleep(1.0)
    failures = loop.failures()
    assert not failures, f"{len(failures)} of {len(loop.records)} requests failed while backend-1 terminated: {failures[:10]}"
    assert "backend-1" in loop.between(0, delete_started), f"backend-1 never answered before the delete: {tally(loop.between(0, delete_started))}"
    after = loop.between(deleted)
    assert len(after) >= 20 and set(after) == {"backend-2", "backend-3"}, f"answers after kubectl delete returned: {tally(after)}"
    last_seen = max(t for t, o in loop.records if o == "backend-1") - delete_started
    print(f"delete: {len(loop.records)} requests, 0 failed; backend-1 last answered {last_seen:.2f}s after the delete began, "
          f"kubectl delete took {deleted - delete_started:.2f}s")
    assert "NotFound" in machine.kubectl("get", "pod", "backend-1", check=False).stderr

    # Ctrl-C: exit 0 within a few seconds, and the machine as it was before
    code, took = machine.interrupt()
    assert code == 0, f"kubesvc up exited {code} after SIGINT ({took:.1f}s):\n{machine.log()}"
    assert took < 15, f"kubesvc up took {took:.1f}s to stop"
    print(f"Ctrl-C: exited 0 after {took:.2f}s")
    # what up said on stderr while it started and stopped: each component, then ready; each stop, then clean
    said = [line for line in machine.log(tail=10**7).splitlines() if line.startswith("kubesvc up: ")]
    for component in ("apiserver", "controller-manager", "agent", "proxy"):
        assert f"kubesvc up: starting {component}" in said and any(line.startswith(f"kubesvc up: {component} ready (") for line in said), said
    assert any(line.startswith("kubesvc up: ready (") for line in said), said
    assert any(line.startswith("kubesvc up: stopping proxy, agent, controller-manager") for line in said), said
    assert said[-2:] == ["kubesvc up: removing proxy rules, the Pod network and Service routes", "kubesvc up: stopped; nothing left"], said
    assert snapshot(machine.ns) == before
    left = host_pod_namespaces()
    assert not {POD_NETNS_PREFIX + uid for uid in machine.uids} & left, f"Pod namespaces left: {left}"
    assert set(uids.values()) <= pod_uids_ever_stored(machine.data_dir)  # the store read below sees this run's Pods
    ours = pod_namespaces_of(machine.data_dir, left - pod_netns_before)
    assert not ours, f"Pod namespaces of this machine that were not there before: {ours}"


def test_kill_9_then_down_leaves_nothing(machine):
    before = snapshot(machine.ns)
    pod_netns_before = host_pod_namespaces()
    machine.up()
    machine.kubectl("apply", "-f", str(EXAMPLES))
    pods = all_pods_ready(machine)
    names = [POD_NETNS_PREFIX + pod["metadata"]["uid"] for pod in pods.values()]
    assert set(names) <= host_pod_namespaces()
    inodes = {pod_netns_inode(name) for name in names}
    containers = {pid for name in names for pid in netns_pids(name)}
    assert all(netns_pids(name) for name in names), f"expected a process in each Pod namespace: {containers}"

    machine.kill9()
    time.sleep(0.5)
    orphans = processes_in_netns(inodes)
    assert set(orphans) >= containers, f"the containers died with kubesvc up: before {containers}, now {orphans}"
    assert snapshot(machine.ns) != before  # a crash leaves everything: down has work to do

    start = time.monotonic()
    result = machine.down()
    took = time.monotonic() - start
    assert result.returncode == 0, f"kubesvc down exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    print(f"kubesvc down: {took:.2f}s; {result.stdout.strip()}")
    assert snapshot(machine.ns) == before
    left = host_pod_namespaces()
    assert not set(names) & left, f"Pod namespaces left: {set(names) & left}"
    assert {name[len(POD_NETNS_PREFIX):] for name in names} <= pod_uids_ever_stored(machine.data_dir)  # the store read below sees this run's Pods
    ours = pod_namespaces_of(machine.data_dir, left - pod_netns_before)
    assert not ours, f"Pod namespaces of this machine that were not there before: {ours}"
    survivors = processes_in_netns(inodes)
    assert not survivors, f"processes still in the Pod namespaces after kubesvc down: {survivors}"
