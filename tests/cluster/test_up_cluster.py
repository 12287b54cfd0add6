"""Three server machines (network namespaces on one LAN bridge in a namespace of its own, and a
fourth namespace on it for the user's kubectl and Python client) made one control plane with the
real commands: ``kubesvc up --cluster-init`` on the first, ``kubesvc token create
--print-join-command`` there, ``kubesvc up --server https://<first>:6443 --token <token>`` on
the others. One cluster serves the whole module (its start is most of the module's time).

A wrong token is one line and leaves the machine's data directory and the etcd cluster as they
were; the right one joins: objects written through one apiserver are read through the others,
and etcd (asked with the real etcdctl) has three voting members. 50 clients racing through the
three apiservers for one static ClusterIP: exactly one wins.

Issue 18's done-when: under a steady write load from four clients through different
apiservers (Services with dynamic and static ClusterIPs and NodePorts, Pods, EndpointSlices,
patches; ``tests/cluster/load.py``), the third machine is killed (``kill -9`` of its whole
``up`` process tree: etcd, apiserver and the rest). Every acknowledged write is then stored with
its content, no ClusterIP or NodePort is held twice, the repair loops' metrics and logs show
nothing to repair, kubectl and the Python client keep working through the survivors, the watch
moved from the dead apiserver to a live one (from its last resourceVersion) missed no event,
and a plain ``kubesvc up`` on the killed machine's data directory brings it back, serving
every write.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.cluster import load
from tests.support import netns
from tests.support.agent import nsenter_argv
from tests.support.slowdown import scaled
from tests.support.up import Machine

pytestmark = pytest.mark.kernel

LAN = "192.168.78"


class Server(Machine):
    """``tests.support.up.Machine`` with up's cluster flags and this machine's LAN address."""

    def __init__(self, ns: netns.Netns, tmp: Path, index: int):
        super().__init__(ns, tmp)
        self.index = index
        self.ip = f"{LAN}.{10 + index}"

    def up_argv(self, *extra: str) -> list[str]:
        return nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", "up", "--data-dir", str(self.data_dir),
                            "--node-name", f"srv{self.index}", "--pod-cidr", f"10.244.{self.index}.0/24", *extra)

    def start(self, *extra: str, timeout: float = 180) -> str:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.up_argv(*extra), stdout=subprocess.PIPE, stderr=log, cwd=netns.REPO_ROOT)
        from tests.cluster.machines import _first_line

        line = _first_line(self.process, scaled(timeout))
        match = re.match(r"^kubesvc is up at https://127\.0\.0\.1:(\d+); kubeconfig: (\S+)$", line)
        assert match, f"kubesvc up did not announce itself ({line!r}, exit {self.process.poll()}):\n{self.log()}"
        self.port, self.kubeconfig = int(match.group(1)), Path(match.group(2))
        return line

    def failed_start(self, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.up_argv(*extra), capture_output=True, text=True, timeout=scaled(120), cwd=netns.REPO_ROOT)

    def kubesvc(self, *args: str) -> str:
        return subprocess.run(nsenter_argv(self.ns.name, sys.executable, "-m", "kubesvc", *args), capture_output=True, text=True,
                              timeout=scaled(60), check=True, cwd=netns.REPO_ROOT).stdout

    def etcd_members(self) -> list[dict]:
        pki = self.data_dir / "pki" / "etcd"
        out = self.ns.run("env", "ETCDCTL_API=3", "etcdctl", "--endpoints", f"https://{self.ip}:2379", "--cacert", pki / "ca.crt",
                          "--cert", pki / "client.crt", "--key", pki / "client.key", "member", "list", "-w", "json").stdout
        return json.loads(out)["members"]


CLIENT_IP = f"{LAN}.100"  # the user's machine on the same LAN: kubectl and the Python client run there
REPAIR_INTERVAL = 2  # seconds between the allocation repair passes of every apiserver (upstream: 3 min)


@dataclass
class Cluster:
    lan: netns.Netns
    client: netns.Netns  # the user's machine: kubectl and the Python client run in it
    servers: list[Server]
    url: str  # what --server is given
    token: str
    tmp: Path

    def kubeconfig(self, machine: Server) -> Path:
        """The admin kubeconfig (the first server's), pointed at ``machine``'s apiserver over the LAN."""
        config = yaml.safe_load(self.servers[0].kubeconfig.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://{machine.ip}:6443"
        path = self.tmp / f"admin-to-srv{machine.index}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def kubectl(self, machine: Server, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The real kubectl on the user's machine, pointed at ``machine``'s apiserver."""
        result = self.client.run("kubectl", f"--kubeconfig={self.kubeconfig(machine)}", f"--cache-dir={self.tmp / 'kubectl-cache'}",
                                 "--request-timeout=20s", *args, check=False, timeout=scaled(60))
        assert not check or result.returncode == 0, f"kubectl {' '.join(args)} through srv{machine.index}: {result.stderr}"
        return result

    def retried(self, machine: Server, *args: str, seconds: float = 30) -> subprocess.CompletedProcess:
        """``kubectl`` again while the server answers 5xx (an etcd election under way) or the
        request times out, at most ``seconds``; the last answer (AlreadyExists: an earlier try
        committed)."""
        deadline = time.monotonic() + scaled(seconds)
        while True:
            result = self.kubectl(machine, *args, check=False)
            if result.returncode == 0 or "AlreadyExists" in result.stderr or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def api(self, machine: Server) -> k8s.ApiClient:
        """The official Python client pointed at ``machine``'s apiserver (its sockets are made by
        threads that entered the user's machine)."""
        configuration = k8s.Configuration()
        kubernetes.config.load_kube_config(config_file=str(self.kubeconfig(machine)), client_configuration=configuration)
        configuration.retries = False  # a dead apiserver is one failed request, not three
        configuration.connection_pool_maxsize = 20
        return k8s.ApiClient(configuration)

    def in_client(self, fn, *args):
        return netns.call_in_netns(self.client.name, fn, *args)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three server machines joined with the real commands, and the user's machine, for the whole
    module (one cluster start, ~30 s, pays for every test here)."""
    tmp = tmp_path_factory.mktemp("cluster")
    lan = netns.Netns.create("lan")
    made: list[Server] = []
    client = None
    try:
        netns.bridge(lan, "br0")
        client = netns.Netns.create("user")
        netns.veth(client, "eth0", lan, "user")
        netns.attach(lan, "user", "br0")
        client.ip("addr", "add", f"{CLIENT_IP}/24", "dev", "eth0")
        first, second, third = (made.append(server(lan, tmp, i)) or made[-1] for i in (1, 2, 3))
        repair = ("--repair-services-interval", str(REPAIR_INTERVAL))
        first.start("--cluster-init", *repair)
        joining = first.kubesvc("token", "create", "--data-dir", str(first.data_dir), "--print-join-command", "--control-plane").split()
        url, token = joining[joining.index("--server") + 1], joining[joining.index("--token") + 1]
        second.start("--server", url, "--token", token, *repair)
        third.start("--server", url, "--token", token, *repair)
        yield Cluster(lan, client, [first, second, third], url, token, tmp)
    finally:
        running = [m for m in made if m.process is not None and m.process.poll() is None]
        for machine in running:  # Ctrl-C to all three at once: their clean stops overlap
            machine.process.send_signal(signal.SIGINT)
        for machine in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                machine.process.wait(timeout=scaled(60))
        for machine in reversed(made):
            machine.teardown()
        if client is not None:
            client.close()
        lan.close()


def server(lan: netns.Netns, tmp: Path, index: int) -> Server:
    (tmp / f"srv{index}").mkdir()
    machine = Server(netns.Netns.create(f"srv{index}"), tmp / f"srv{index}", index)
    netns.veth(machine.ns, "eth0", lan, f"s{index}")
    netns.attach(lan, f"s{index}", "br0")
    machine.ns.ip("addr", "add", f"{machine.ip}/24", "dev", "eth0")
    return machine


@pytest.mark.timeout(600)  # three up starts, each ~10 s on a quiet machine, several times that under load
def test_three_servers_join_with_the_real_commands(cluster):
    first, second, third = cluster.servers
    assert cluster.url == f"https://{first.ip}:6443"

    # a wrong token (the right ID, another secret) on a fourth machine: one line, nothing made
    # (the other refusals are in test_join.py against a real apiserver)
    fourth = server(cluster.lan, cluster.tmp, 4)
    try:
        result = fourth.failed_start("--server", cluster.url, "--token", cluster.token.split(".")[0] + ".0000000000000000")
    finally:
        fourth.ns.close()
    said = [line for line in result.stderr.splitlines() if line.startswith("kubesvc up: ")]  # up's progress lines (issue 22)
    lines = [line for line in result.stderr.splitlines() if line.strip() and line not in said]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert not said or said[-1] == "kubesvc up: stopped; nothing left", said
    assert lines[0].startswith("Error: cannot start: the token's secret does not match") and "kubesvc token create" in lines[0]
    assert not (fourth.data_dir / "pki" / "ca.crt").exists() and not (fourth.data_dir / "etcd").exists()
    assert not (fourth.data_dir / "up.json").exists()

    members = first.etcd_members()  # the refused machine added none
    assert len(members) == 3 and not any(m.get("isLearner") for m in members)
    first.kubectl("create", "configmap", "written-on-srv1", "--from-literal=k=v")
    assert third.get("configmap", "written-on-srv1")["data"] == {"k": "v"}
    third.kubectl("create", "configmap", "written-on-srv3", "--from-literal=k=w")
    assert second.get("configmap", "written-on-srv3")["data"] == {"k": "w"}
    netns.wait_until(lambda: {n["metadata"]["name"] for n in second.get("nodes")["items"]} == {"srv1", "srv2", "srv3"},
                     scaled(90), "the three machines' nodes")


@pytest.mark.timeout(300)
def test_fifty_clients_race_for_one_static_cluster_ip_through_three_apiservers(cluster):
    """The same allocation race as on SQLite: exactly one wins, every other is told the IP is taken."""
    apis = [cluster.api(machine) for machine in cluster.servers]
    ip = "10.96.0.250"  # outside the load test's static IPs (load.STATIC_BASE..)

    def attempt(i: int):
        body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"race{i}"},
                "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}
        try:
            return 201, load.body_of(k8s.CoreV1Api(apis[i % 3]).create_namespaced_service(
                "default", body, _preload_content=False, _request_timeout=60))
        except ApiException as exc:
            return exc.status, json.loads(exc.body)

    def race():
        with ThreadPoolExecutor(16) as pool:  # the pool's threads are made here, in the user's machine
            return list(pool.map(attempt, range(50)))

    results = cluster.in_client(race)
    winners = [body["metadata"]["name"] for code, body in results if code == 201]
    assert len(winners) == 1, sorted({code for code, _ in results})
    losers = [(code, body["message"]) for code, body in results if code != 201]
    assert all(code == 422 and f"spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: provided IP is already allocated"
               in message for code, message in losers), losers[:3]
    for machine in cluster.servers:  # every apiserver shows the one winner holding the IP
        holder = json.loads(cluster.kubectl(machine, "get", "ipaddresses", ip, "-o", "json").stdout)["spec"]["parentRef"]["name"]
        assert holder == winners[0]
    cluster.kubectl(cluster.servers[0], "delete", "svc", winners[0], "-n", "default")


@pytest.mark.timeout(600)
def test_a_machine_killed_under_load_loses_no_acknowledged_write_and_rejoins(cluster):
    """Issue 18's done-when: writers through different apiservers, a watch through the machine
    that is killed (``kill -9`` of its whole ``up`` process tree: its etcd and apiserver die),
    the watch and the writers moving to live apiservers; afterwards every acknowledged write is
    stored as acknowledged, no ClusterIP or NodePort is held twice, the repair loops found
    nothing, and the killed machine restarted on its data directory serves every write."""
    first, second, third = cluster.servers
    cluster.kubectl(first, "create", "namespace", load.NAMESPACE)
    netns.wait_until(lambda: cluster.kubectl(second, "get", "serviceaccount", "default", "-n", load.NAMESPACE, check=False).returncode == 0,
                     scaled(60), "the load namespace's default ServiceAccount (Pods need it)")
    apis = {machine.index: cluster.api(machine) for machine in cluster.servers}
    by_name = {machine.index: (f"srv{machine.index}", apis[machine.index]) for machine in cluster.servers}
    stop_writing, stop_watching = threading.Event(), threading.Event()
    # writer i starts on srv((i + 2) % 3 + 1): two of the four (0 and 3) on the machine that is killed
    writers = [load.Writer(i, [by_name[(i + 2 + k) % 3 + 1] for k in range(3)], stop_writing) for i in range(4)]
    # the watch starts from a consistent list's revision, as a reflector's (kubectl -o json prints a
    # List of its own with resourceVersion "": from there the watch would begin with the Services
    # the writers made meanwhile as ADDED events in key order, out of revision order)
    start_rv = cluster.in_client(python_list, apis[1]).metadata.resource_version
    watch = load.MovingWatch([by_name[3], by_name[1], by_name[2]], start_rv, stop_watching)

    with ThreadPoolExecutor(len(writers) + 1) as pool:
        watching = pool.submit(cluster.in_client, watch.run)
        writing = [pool.submit(cluster.in_client, writer.run) for writer in writers]
        try:
            netns.wait_until(lambda: sum(len(w.acked.objects) for w in writers) >= 60, scaled(120), "60 writes before the kill")
            assert not any(w.error for w in writers), [w.error for w in writers]
            third_pid = third.process.pid
            killed = kill9_tree(third_pid)
            assert len(killed) >= 3, killed  # up, its etcd, its apiserver, ...
            third.process.wait(timeout=scaled(30))
            acked_at_kill = [len(w.acked.objects) for w in writers]

            # the survivors keep serving the user's kubectl and Python client (once their etcd
            # members have a leader: if the killed member led, a write in the election's second
            # or two is a 500, as with kube-apiserver; a user retries it)
            created = cluster.retried(second, "create", "configmap", "after-the-kill", "--from-literal=k=v")
            assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
            names = cluster.retried(first, "get", "configmap", "after-the-kill", "-o", "name").stdout.split()
            assert names == ["configmap/after-the-kill"]
            listed = cluster.in_client(python_list, apis[1])
            assert len(listed.items) >= 10
            netns.wait_until(lambda: all(len(w.acked.objects) >= before + 15 for w, before in zip(writers, acked_at_kill)),
                             scaled(180), "15 writes of every writer after the kill")
        finally:
            stop_writing.set()
            for future in writing:
                future.result(timeout=scaled(120))
        assert not any(w.error for w in writers), [w.error for w in writers]
        for writer in (writers[0], writers[3]):  # srv3's writers moved on to a live apiserver
            assert writer.acked.moves and writer.acked.moves[0] != "srv3", (writer.index, writer.acked.moves, writer.acked.failures)

        # the watch moved from the dead apiserver to a live one, from its last resourceVersion,
        # and delivered every acknowledged Service write
        acked_writes = set().union(*(w.acked.service_writes for w in writers))
        try:
            netns.wait_until(lambda: acked_writes <= {(name, rv) for _, name, rv in watch.events}, scaled(60),
                             "the watch to deliver every acknowledged Service write")
        finally:
            stop_watching.set()
            watching.result(timeout=scaled(60))
    assert watch.error is None, f"{watch.error!r}\n{watch.describe()}"
    assert watch.served_by[0] == "srv3" and watch.served_by[-1] != "srv3", watch.describe()
    revisions = [int(rv) for _, _, rv in watch.events]
    assert revisions == sorted(set(revisions)), f"the watch delivered an event twice or out of order:\n{watch.describe()}"

    # every acknowledged write is stored, with its content, read through both survivors
    acked = merged(writers)
    for machine in (first, second):
        check_stored(cluster, machine, acked)
    check_no_allocation_held_twice(cluster, first)

    # the repair loops of the survivors ran passes after the writes and found nothing
    time.sleep(2 * REPAIR_INTERVAL + 1)
    for machine in (first, second):
        errors = repair_errors(cluster, machine)
        assert not errors, errors
        log = (machine.data_dir / "logs" / "apiserver.log").read_text(errors="replace")
        assert "repair pass at revision" not in log, log[log.index("repair pass at revision") - 200:][:2000]

    # the killed machine restarts on its data directory (no flag, no token) and serves every write
    third.down()
    third.start("--repair-services-interval", str(REPAIR_INTERVAL))
    check_stored(cluster, third, acked)
    assert len(first.etcd_members()) == 3
    cluster.kubectl(third, "create", "configmap", "after-the-rejoin", "--from-literal=k=x")
    assert json.loads(cluster.kubectl(second, "get", "configmap", "after-the-rejoin", "-o", "json").stdout)["data"] == {"k": "x"}
    # the rejoined apiserver's repair loops (a pass at start, then every 2 s) find nothing either
    time.sleep(REPAIR_INTERVAL + 1)
    assert not repair_errors(cluster, third)
    log = (third.data_dir / "logs" / "apiserver.log").read_text(errors="replace")
    assert "repair pass at revision" not in log, log[log.index("repair pass at revision") - 200:][:2000]


def python_list(api: k8s.ApiClient, seconds: float = 30):
    """The load namespace's Services through the official client, again while the server
    answers 5xx (an etcd election under way), at most ``seconds``."""
    deadline = time.monotonic() + scaled(seconds)
    while True:
        try:
            return k8s.CoreV1Api(api).list_namespaced_service(load.NAMESPACE, _request_timeout=30)
        except ApiException as exc:
            if not load.server_failed(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def kill9_tree(pid: int) -> list[int]:
    """``kill -9`` of ``pid`` and every process under it (its etcd, apiserver and the other
    components), stopped first so that none is restarted or reaped meanwhile."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for member in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, sig)
    return tree


def merged(writers: list[load.Writer]) -> load.Acked:
    acked = load.Acked()
    for writer in writers:
        acked.objects.update(writer.acked.objects)
        acked.annotations.update(writer.acked.annotations)
    return acked


LISTS = {"Service": "services", "Pod": "pods", "EndpointSlice": "endpointslices.discovery.k8s.io"}


def check_stored(cluster: Cluster, machine: Server, acked: load.Acked) -> None:
    """Every acknowledged object is listed by ``machine``'s apiserver with the content it was
    acknowledged with (a consistent list: resourceVersion="")."""
    for kind, resource in LISTS.items():
        items = json.loads(cluster.kubectl(machine, "get", resource, "-n", load.NAMESPACE, "-o", "json").stdout)["items"]
        stored = {item["metadata"]["name"]: item for item in items}
        for (acked_kind, name), answer in acked.objects.items():
            if acked_kind != kind:
                continue
            assert name in stored, f"srv{machine.index} lost the acknowledged {kind} {name}"
            item = stored[name]
            assert item["metadata"]["uid"] == answer["metadata"]["uid"], (kind, name)
            if kind == "Service":
                assert item["spec"]["clusterIP"] == answer["spec"]["clusterIP"], (name, item["spec"], answer["spec"])
                assert [p.get("nodePort") for p in item["spec"]["ports"]] == [p.get("nodePort") for p in answer["spec"]["ports"]]
                assert item["metadata"]["annotations"]["round"] in acked.annotations[name], (name, item["metadata"]["annotations"])
            elif kind == "Pod":
                assert item["spec"]["containers"][0]["command"] == ["sleep", name]
            else:
                assert item["endpoints"] == answer["endpoints"] and item["ports"] == answer["ports"], name


def check_no_allocation_held_twice(cluster: Cluster, machine: Server) -> None:
    """Across every Service: each ClusterIP and each NodePort once, and each ClusterIP's
    IPAddress object names the Service that holds it."""
    services = json.loads(cluster.kubectl(machine, "get", "services", "-A", "-o", "json").stdout)["items"]
    ips = [ip for s in services for ip in s["spec"].get("clusterIPs", []) if ip != "None"]
    ports = [p["nodePort"] for s in services for p in s["spec"]["ports"] if p.get("nodePort")]
    assert len(ips) == len(set(ips)) and len(ports) == len(set(ports))
    owners = {ip: (s["metadata"]["namespace"], s["metadata"]["name"]) for s in services for ip in s["spec"].get("clusterIPs", [])}
    addresses = json.loads(cluster.kubectl(machine, "get", "ipaddresses", "-o", "json").stdout)["items"]
    held = {a["metadata"]["name"]: (a["spec"]["parentRef"]["namespace"], a["spec"]["parentRef"]["name"]) for a in addresses}
    assert {ip: held.get(ip) for ip in owners} == owners


def repair_errors(cluster: Cluster, machine: Server) -> dict[str, float]:
    """The repair loops' error counters on ``machine``'s /metrics (upstream's names), non-zero ones."""
    text = cluster.kubectl(machine, "get", "--raw", "/metrics").stdout
    for family in ("kube_apiserver_clusterip_repair_ip_errors", "kube_apiserver_nodeport_repair_port_errors"):
        assert f"# HELP {family}_total " in text, f"srv{machine.index}'s /metrics has no {family}_total"
    found = {}
    for line in text.splitlines():
        if line.startswith(("kube_apiserver_clusterip_repair_ip_errors_total", "kube_apiserver_nodeport_repair_port_errors_total")):
            name, value = line.rsplit(" ", 1)
            if float(value):
                found[name] = float(value)
    return found
