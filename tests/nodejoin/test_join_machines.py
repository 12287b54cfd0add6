"""Machines joining as nodes with the real commands (issue 19's done-when, the join part):
three network namespaces on one LAN bridge (nothing leaves them; tests/nodejoin/joined.py). The
first runs ``kubesvc up --cluster-init``; ``kubesvc token create --print-join-command`` prints
the join; the other two run it (``kubesvc join https://<first>:6443 --token ...
--discovery-token-ca-cert-hash ... --zone ...``). One cluster serves the module.
test_join_machines_vxlan.py runs this module's Pod network tests again on ``--pod-network
vxlan`` machines behind a router.

Observed with the real kubectl: three Ready nodes with distinct Pod CIDRs (the joiners' from
the cluster's node-ipam-controller) and their zone labels, the approved and issued CSRs, the
node credential kept 0600; node 2's own credential gets 403 changing node 3's Node and Pods; a
wrong token is one line and changes nothing (no file, Node or CSR); ``kubesvc leave`` stops a
node, removes what it made on its machine and the Node turns NotReady.

Every machine runs ``--pod-network routes`` (direct routes to the other nodes' Pod CIDRs), so
Services span the machines: echo Pods pinned to each node behind one ClusterIP answer from every
node and from a Pod on every node (the backends themselves too); a Pod on m1 reaches the Pod on m3 by its Pod IP and is seen
with its own IP; a NodePort with ``externalTrafficPolicy: Local`` answers from a LAN client (the
spare, no node) only on the node with a local endpoint and the server sees the client's address, with
``Cluster`` on all three.

LoadBalancer on joined nodes: ``up`` runs with ``--loadbalancer-pool`` (addresses on the LAN);
each join gets kube-proxy's certificate through a CSR and runs its proxy and ``lb-announcer``
with it; a LoadBalancer Service with ``externalTrafficPolicy: Local`` whose only endpoint is on
m3 gets a pool address, m3 holds its Lease and answers ARP for it, and the spare (a LAN client,
no node) reaches it with its own address kept.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.nodejoin.joined import JOINED, holds_no_pod_network, joined_cluster, kubesvc, pod_network_routes, route_to, traces_of_node
from tests.support import netns
from tests.support.slowdown import scaled

pytestmark = pytest.mark.kernel


LB_POOL = "192.168.77.240-192.168.77.247"  # on the LAN (tests/support/lan.py: 192.168.77.0/24), free of its machines


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with joined_cluster(tmp_path_factory.mktemp("join"), "routes", segments=1, loadbalancer_pool=LB_POOL) as joined:
        yield joined


def nodes(server) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in server.get("nodes")["items"]}


def ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions") or [])


@pytest.mark.timeout(900)
def test_three_ready_nodes_with_distinct_pod_cidrs_and_their_csrs(cluster):
    server, (two, three) = cluster["server"], cluster["joiners"]
    assert cluster["command"][:2] == ["kubesvc", "join"] and cluster["command"][2].startswith(f"https://{cluster.ip(1)}:")
    netns.wait_until(lambda: len([n for n in nodes(server).values() if ready(n)]) == 3, scaled(120), "three Ready nodes")
    table = server.kubectl("get", "nodes", "--no-headers").stdout.splitlines()
    assert sorted(line.split()[:2] for line in table) == [["m1", "Ready"], ["m2", "Ready"], ["m3", "Ready"]]
    found = nodes(server)
    cidrs = {name: node["spec"]["podCIDRs"] for name, node in found.items()}
    assert cidrs["m1"] == ["10.244.0.0/24"]
    assert len({c[0] for c in cidrs.values()}) == 3 and all(c[0].startswith("10.244.") and c[0].endswith(".0/24") for c in cidrs.values())
    assert JOINED.match(two.line).group(3) == cidrs["m2"][0]  # the agent runs on the range the cluster gave
    assert found["m2"]["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"
    assert found["m3"]["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-c"
    internal = {a["address"] for a in found["m3"]["status"]["addresses"] if a["type"] == "InternalIP"}
    assert internal == {cluster.ip(3)}
    wide = [line.split() for line in server.kubectl("get", "nodes", "-o", "wide").stdout.splitlines()]
    column = wide[0].index("INTERNAL-IP")
    assert {row[0]: row[column] for row in wide[1:]} == {"m1": cluster.ip(1), "m2": cluster.ip(2), "m3": cluster.ip(3)}
    rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
    issued = [r for r in rows if r[2] == "kubernetes.io/kube-apiserver-client-kubelet" and r[-1] == "Approved,Issued"]
    assert len(issued) >= 2 and all(r[3].startswith("system:bootstrap:") for r in issued)
    for path in (two.data_dir / "kubeconfig", two.data_dir / "pki" / "kubelet-client.key", two.data_dir / "pki" / "kubelet-client.crt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    whoami = json.loads(two.kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]["username"]
    assert whoami == "system:node:m2"
    # kube-proxy's certificate, asked for by each joined node as itself and approved by csrapproving
    proxies = [r for r in rows if r[2] == "kubernetes.io/kube-apiserver-client"]
    assert sorted(r[3] for r in proxies if r[-1] == "Approved,Issued") == ["system:node:m2", "system:node:m3"], proxies
    for path in (two.data_dir / "kube-proxy.kubeconfig", two.data_dir / "pki" / "kube-proxy-client.key",
                 two.data_dir / "pki" / "kube-proxy-client.crt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    proxy_whoami = two.kubectl(f"--kubeconfig={two.data_dir / 'kube-proxy.kubeconfig'}", "auth", "whoami", "-o", "json")
    assert json.loads(proxy_whoami.stdout)["status"]["userInfo"]["username"] == "system:kube-proxy", proxy_whoami.stderr


def test_node_two_cannot_change_node_threes_objects(cluster):
    server, (two, three) = cluster["server"], cluster["joiners"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-m3", "namespace": "default"},
           "spec": {"nodeName": "m3", "containers": [{"name": "c", "image": "x", "command": ["sleep", "600"]}]}}
    server.kubectl("apply", "-f", "-", input=json.dumps(pod))
    try:
        for args in (("label", "node", "m3", "stolen=yes"), ("annotate", "node", "m3", "x=y"),
                     ("delete", "pod", "on-m3", "--wait=false"), ("label", "pod", "on-m3", "x=y")):
            result = two.kubectl(*args)
            assert result.returncode != 0 and "(Forbidden)" in result.stderr, (args, result.stderr)
        assert "stolen" not in nodes(server)["m3"]["metadata"].get("labels", {})
        assert server.get("pod", "on-m3")["metadata"].get("deletionTimestamp") is None
    finally:
        server.kubectl("delete", "pod", "on-m3", "--grace-period=0", "--force", "--wait=false", check=False)


def test_a_wrong_token_changes_nothing(cluster):
    server, spare, tmp = cluster["server"], cluster["spare"], cluster["tmp"]
    command = cluster["command"]
    token = command[command.index("--token") + 1]
    csrs_before = server.kubectl("get", "csr", "-o", "name").stdout.split()
    data_dir = tmp / "node4"
    result = kubesvc(spare, *command[1:command.index("--token")], "--token", token.split(".")[0] + ".0000000000000000",
                     "--data-dir", str(data_dir), "--node-name", "m4", "--node-ip", cluster.ip(4), check=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: cannot join: the token's secret does not match")
    assert not data_dir.exists()
    assert "m4" not in nodes(server)
    assert server.kubectl("get", "csr", "-o", "name").stdout.split() == csrs_before
    assert "cbr0" not in spare.ip("link").stdout


ECHO = """\
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (sys.argv[2] + " " + self.client_address[0] + "\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""
MACHINES = ("m1", "m2", "m3")


def pinned_pod(name: str, node: str, labels: dict, command: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "python", "command": command}]}}


def answers_seen(netns_name: str, host: str, port: int, want: set[str], timeout: float) -> dict[str, str]:
    """Requests to ``host:port`` from ``netns_name`` until every backend name in ``want`` has
    answered (bounded): each name with the client address it reported."""
    from tests.support.agent import requests_in

    seen: dict[str, str] = {}
    last: list[str] = []

    def all_answered() -> bool:
        nonlocal last
        last = requests_in(netns_name, host, port, 6, timeout=2)
        for outcome in last:
            if not outcome.startswith("!"):
                name, _, source = outcome.partition(" ")
                seen[name] = source
        return want <= set(seen)

    try:
        netns.wait_until(all_answered, timeout, f"{sorted(want)} answering {host}:{port} from {netns_name}", interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; seen {seen}, last {last}") from None
    return seen


@pytest.fixture(scope="module")
def echoes(cluster):
    """An echo Pod (answers with its name and the client's address) and an idle client Pod
    pinned to each machine; their Pods as the apiserver reports them once Running."""
    server = cluster["server"]
    names = [f"echo-{m}" for m in MACHINES] + [f"client-{m}" for m in MACHINES]
    made = []
    for machine in MACHINES:
        made.append(pinned_pod(f"echo-{machine}", machine, {"app": "echo", "machine": machine}, ["python3", "-c", ECHO, "8080", f"echo-{machine}"]))
        made.append(pinned_pod(f"client-{machine}", machine, {"app": "client"}, ["sleep", "3600"]))
    # one kubectl for the six Pods: a stream of JSON objects
    server.kubectl("apply", "-f", "-", input="\n".join(map(json.dumps, made)))
    pods: dict[str, dict] = {}

    def running() -> bool:
        for name in names:
            pod = server.get("pod", name)
            if (pod.get("status") or {}).get("phase") != "Running" or not pod["status"].get("podIP"):
                return False
            pods[name] = pod
        return True

    try:
        netns.wait_until(running, scaled(120), "an echo and a client Pod Running on each machine", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.kubectl('get', 'pods', '-o', 'wide', check=False).stdout}") from None
    try:
        yield pods
    finally:
        server.kubectl("delete", "pods", *names, "--grace-period=0", "--force", "--wait=false", check=False)
        server.kubectl("delete", "services", "echo", "echo-local", "echo-cluster", "--ignore-not-found", "--wait=false", check=False)


def pod_netns(pod: dict) -> str:
    return "kubesvc-" + pod["metadata"]["uid"]  # the agent's --netns-prefix default, as up and join run it


def echo_service(name: str, selector: dict, **spec) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 8080}], **spec}})


@pytest.mark.timeout(600)
def test_pods_on_three_nodes_answer_through_one_cluster_ip_from_every_node_and_pod(cluster, echoes):
    server, (two, three) = cluster["server"], cluster["joiners"]
    assert {echoes[f"echo-{m}"]["spec"]["nodeName"] for m in MACHINES} == set(MACHINES)
    cidrs = {m: node["spec"]["podCIDRs"][0] for m, node in nodes(server).items()}
    for machine in MACHINES:  # each Pod in its own node's range
        assert ipaddress.ip_address(echoes[f"echo-{machine}"]["status"]["podIP"]) in ipaddress.ip_network(cidrs[machine]), (machine, cidrs)
    server.kubectl("apply", "-f", "-", input=echo_service("echo", {"app": "echo"}))
    cluster_ip = server.cluster_ip("echo")
    want = {f"echo-{m}" for m in MACHINES}
    for ns in (cluster["server"].ns, two.ns, three.ns):
        answers_seen(ns.name, cluster_ip, 80, want, scaled(90))
    for machine in MACHINES:
        answers_seen(pod_netns(echoes[f"client-{machine}"]), cluster_ip, 80, want, scaled(90))
    for machine in MACHINES:  # a backend reaching its own Service: itself too (hairpin), as the others
        answers_seen(pod_netns(echoes[f"echo-{machine}"]), cluster_ip, 80, want, scaled(90))


@pytest.mark.timeout(300)
def test_a_pod_on_node_one_reaches_a_pod_on_node_three_by_pod_ip_with_its_own_source(cluster, echoes):
    client, target = echoes["client-m1"], echoes["echo-m3"]
    seen = answers_seen(pod_netns(client), target["status"]["podIP"], 8080, {"echo-m3"}, scaled(60))
    assert seen == {"echo-m3": client["status"]["podIP"]}


@pytest.mark.timeout(600)
def test_nodeport_local_answers_only_where_an_endpoint_is_and_keeps_the_client_address_cluster_on_all(cluster, echoes):
    from tests.support.agent import requests_in

    server, spare = cluster["server"], cluster["spare"]
    client_ip = cluster.ip(4)  # the spare: on the LAN, no node
    server.kubectl("apply", "-f", "-", input=echo_service("echo-local", {"app": "echo", "machine": "m3"}, type="NodePort",
                                                          externalTrafficPolicy="Local"))
    server.kubectl("apply", "-f", "-", input=echo_service("echo-cluster", {"app": "echo"}, type="NodePort", externalTrafficPolicy="Cluster"))
    local_port = server.get("service", "echo-local")["spec"]["ports"][0]["nodePort"]
    cluster_port = server.get("service", "echo-cluster")["spec"]["ports"][0]["nodePort"]
    want = {f"echo-{m}" for m in MACHINES}
    for index in (1, 2, 3):  # every node's proxy has the later Service, so the earlier one too
        answers_seen(spare.name, cluster.ip(index), cluster_port, want, scaled(90))
    assert answers_seen(spare.name, cluster.ip(3), local_port, {"echo-m3"}, scaled(60)) == {"echo-m3": client_ip}
    for index in (1, 2):  # no local endpoint: nothing answers there
        outcomes = requests_in(spare.name, cluster.ip(index), local_port, 2, timeout=2)
        assert all(o.startswith("!") for o in outcomes), (index, outcomes)


@pytest.mark.timeout(600)
def test_a_joined_node_announces_a_pool_address_for_its_local_endpoint(cluster, echoes):
    """eTP Local with the only endpoint on m3 (joined): m3's announcer (kube-proxy's identity)
    holds the address's Lease and answers ARP; the spare on the LAN reaches it, seen with its
    own address (Local keeps the client's source)."""
    server, spare = cluster["server"], cluster["spare"]
    first, last = (ipaddress.ip_address(a) for a in LB_POOL.split("-"))
    server.kubectl("apply", "-f", "-", input=echo_service("echo-lb", {"app": "echo", "machine": "m3"}, type="LoadBalancer",
                                                          externalTrafficPolicy="Local"))
    try:
        def ingress() -> str:
            status = server.get("service", "echo-lb").get("status") or {}
            return next((i["ip"] for i in (status.get("loadBalancer") or {}).get("ingress") or [] if i.get("ip")), "")

        address = netns.wait_until(ingress, scaled(30), "echo-lb's pool address")
        assert first <= ipaddress.ip_address(address) <= last
        lease = "kubesvc-lb-" + address.replace(".", "-")

        def holder() -> str:
            found = server.kubectl("get", "lease", "-n", "kubesvc-lb", lease, "-o", "json", check=False)
            return json.loads(found.stdout)["spec"].get("holderIdentity", "") if found.returncode == 0 else ""

        assert netns.wait_until(lambda: holder() == "m3", scaled(60), "m3 holding the address's Lease")
        assert answers_seen(spare.name, address, 80, {"echo-m3"}, scaled(60)) == {"echo-m3": cluster.ip(4)}
        assert holder() == "m3"
    finally:
        server.kubectl("delete", "service", "echo-lb", "--ignore-not-found", "--wait=false", check=False)


def web(name: str, node: str, app: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
                       "spec": {"nodeName": node, "containers": [{"name": "web", "image": "python",
                                                                  "command": ["python3", "-m", "http.server", "8080"],
                                                                  "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}})


def service(name: str, app: str, node_port: int) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"type": "NodePort", "selector": {"app": app},
                                "ports": [{"port": 80, "targetPort": 8080, "nodePort": node_port}]}})


def ready_endpoints(server, service_name: str) -> list[str]:
    slices = server.get("endpointslices", "-n", "default", "-l", f"kubernetes.io/service-name={service_name}")["items"]
    return [a for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready") for a in e["addresses"]]


def test_a_joined_nodes_proxy_answers_its_nodeport(cluster):
    """The joined node's proxy (node credentials) programs the NodePort: a client on the LAN
    reaches the Pod on that node through it. (Reaching Pods on other nodes needs the cross-node
    Pod network, ``--pod-network``, which is not this test's.)"""
    server, spare = cluster["server"], cluster["spare"]
    server.kubectl("apply", "-f", "-", input=web("web-m2", "m2", "web2"))
    server.kubectl("apply", "-f", "-", input=service("web2", "web2", 30802))
    netns.wait_until(lambda: ready_endpoints(server, "web2"), scaled(90), "web-m2 ready in its EndpointSlice")

    def answers() -> bool:
        return spare.run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", f"http://{cluster.ip(2)}:30802/",
                         check=False).stdout == "200"

    netns.wait_until(answers, scaled(60), "the NodePort on m2 answering from the LAN")


def component_pids(joiner) -> dict[str, int]:
    """The join's agent, proxy and lb-announcer processes (their command lines name its data dir)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if "kubesvc" in args and any(str(joiner.data_dir) in a for a in args):
            found.update({name: int(entry.name) for name in ("agent", "proxy", "lb-announcer") if name in args})
    return found


def pod_pids(server, name: str) -> set[int]:
    """The processes in that Pod's network namespace (its containers)."""
    uid = server.get("pod", name)["metadata"]["uid"]
    return {int(p) for p in subprocess.run(["ip", "netns", "pids", pod_netns({"metadata": {"uid": uid}})], capture_output=True,
                                           text=True, check=True).stdout.split()}


PRESENTED = ("import hashlib, socket, ssl, sys; c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE; "
             "s = c.wrap_socket(socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)); print(hashlib.sha256(s.getpeercert(True)).hexdigest())")


def presented_fingerprint(spare, host: str, port: int) -> str:
    """SHA-256 of the certificate a new TLS connection to host:port is served with."""
    return spare.run(sys.executable, "-c", PRESENTED, host, str(port)).stdout.strip()


def file_fingerprint(path: Path) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return hashlib.sha256(x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)).hexdigest()


def test_kubectl_logs_reach_a_joined_node_once_its_serving_certificate_is_approved(cluster):
    """The agent asks for its serving certificate (kubernetes.io/kubelet-serving, as the
    kubelet's serverTLSBootstrap); no controller approves that, an administrator does; then the
    apiserver trusts the agent and kubectl logs work for a Pod on the joined node. The agent
    takes the issued certificate in place: the same agent process serves it, its Pod's
    processes run on (a restart of the agent would restart them)."""
    server = cluster["server"]
    two = cluster["joiners"][0]

    def pending_serving() -> list[str]:
        rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
        return [r[0] for r in rows if r[2] == "kubernetes.io/kubelet-serving" and r[3] == "system:node:m2" and r[-1] == "Pending"]

    name = netns.wait_until(pending_serving, scaled(60), "m2's pending serving CSR")[0]
    pod = json.loads(web("talker", "m2", "talker"))
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", "echo hello from m2; sleep 600"]
    del pod["spec"]["containers"][0]["readinessProbe"]
    server.kubectl("apply", "-f", "-", input=json.dumps(pod))
    netns.wait_until(lambda: (server.get("pod", "talker").get("status") or {}).get("phase") == "Running", scaled(60), "talker running")
    agent, talker = component_pids(two)["agent"], netns.wait_until(lambda: pod_pids(server, "talker"), scaled(30), "talker's processes")
    self_signed = presented_fingerprint(cluster.spare, cluster.ip(2), 10250)
    server.kubectl("certificate", "approve", name)
    issued = lambda: server.kubectl("get", "csr", name, "--no-headers").stdout.split()[-1] == "Approved,Issued"  # noqa: E731
    netns.wait_until(issued, scaled(30), "the serving certificate issued")

    def logs() -> bool:
        return "hello from m2" in server.kubectl("logs", "talker", check=False).stdout

    netns.wait_until(logs, scaled(90), "kubectl logs of a Pod on m2")
    issued_pair = two.data_dir / "pki" / "kubelet-server.crt"
    assert presented_fingerprint(cluster.spare, cluster.ip(2), 10250) == file_fingerprint(issued_pair) != self_signed
    assert component_pids(two)["agent"] == agent  # taken in place
    assert pod_pids(server, "talker") == talker


ROTATE = ("import asyncio, sys; from pathlib import Path; from kubesvc.nodejoin import tlsbootstrap as t; p = t.Paths(Path(sys.argv[1])); "
          "[asyncio.run(t.rotate_once(p, sys.argv[2], sys.argv[3], i)) for i in (t.node_identity(p, sys.argv[3]), t.kube_proxy_identity(p))]")


def apiserver_connections(ns, pids: dict[str, int], server_port: str) -> dict[str, set[str]]:
    """Each component's established connections to the apiserver, by local address:port."""
    found: dict[str, set[str]] = {name: set() for name in pids}
    for line in ns.run("ss", "-Htnp", "state", "established", "dport", f"= :{server_port}").stdout.splitlines():
        for name, pid in pids.items():
            if f"pid={pid}," in line:
                found[name].add(line.split()[2])
    return found


def test_a_rotation_of_the_client_certificates_keeps_every_component_and_pod_running(cluster):
    """The node's and kube-proxy's client certificates renewed as the join renews them at 70-90 %
    of their lifetime (a CSR as the node, the files replaced: ``tlsbootstrap.rotate_once``): the
    agent, the proxy and the LB announcer keep their processes, and so do the Pods; each drops
    its connections to the apiserver and makes new ones with the new pair (client-go's
    cert_rotation), on which the node keeps renewing its Lease and stays Ready."""
    server, two = cluster["server"], cluster["joiners"][0]
    url = cluster["command"][2]
    server.kubectl("apply", "-f", "-", input=json.dumps(pinned_pod("steady", "m2", {"app": "steady"}, ["sleep", "3600"])))
    netns.wait_until(lambda: (server.get("pod", "steady").get("status") or {}).get("phase") == "Running", scaled(60), "steady running")
    pods = netns.wait_until(lambda: pod_pids(server, "steady"), scaled(30), "steady's processes")
    components = component_pids(two)
    assert set(components) == {"agent", "proxy", "lb-announcer"}, components
    port = url.rsplit(":", 1)[1].rstrip("/")
    before = apiserver_connections(two.ns, components, port)
    assert all(before.values()), before
    certs = {path: path.read_bytes() for path in (two.data_dir / "pki" / "kubelet-client.crt", two.data_dir / "pki" / "kube-proxy-client.crt")}

    two.ns.run(sys.executable, "-c", ROTATE, str(two.data_dir), url, "m2", timeout=scaled(120))
    assert all(path.read_bytes() != old for path, old in certs.items())
    rotated_at = server.get("lease", "m2", "-n", "kube-node-lease")["spec"]["renewTime"]

    def reconnected() -> dict:
        now = apiserver_connections(two.ns, components, port)
        return now if all(now[name] and not now[name] & before[name] for name in now) else {}

    netns.wait_until(reconnected, scaled(60), f"every component on new connections to the apiserver (before: {before})")
    netns.wait_until(lambda: server.get("lease", "m2", "-n", "kube-node-lease")["spec"]["renewTime"] > rotated_at, scaled(60),
                     "m2's Lease renewed after the rotation")
    assert ready(nodes(server)["m2"])
    assert component_pids(two) == components
    assert pod_pids(server, "steady") == pods
    server.kubectl("delete", "pod", "steady", "--grace-period=0", "--force", "--wait=false", check=False)


def test_leave_removes_what_the_node_made_and_it_turns_not_ready(cluster):
    server, (two, three) = cluster["server"], cluster["joiners"]
    assert "cbr0" in three.ns.ip("link").stdout
    server.kubectl("apply", "-f", "-", input=web("web-m3", "m3", "web3"))
    server.kubectl("apply", "-f", "-", input=service("web3", "web3", 30803))
    netns.wait_until(lambda: ready_endpoints(server, "web3"), scaled(90), "web-m3 ready in its EndpointSlice")
    result = three.leave()  # and the join exits 0
    assert result.returncode == 0 and "nothing of" in result.stdout, result.stderr
    assert not three.data_dir.exists()
    assert "cbr0" not in three.ns.ip("link").stdout
    assert "kube-proxy" not in three.ns.run("nft", "list", "tables").stdout
    assert holds_no_pod_network(three.ns)  # no routes of ours, no VXLAN device, no masquerade table
    netns.wait_until(lambda: not ready(nodes(server)["m3"]), scaled(60), "m3 NotReady")
    netns.wait_until(lambda: not ready_endpoints(server, "web3"), scaled(60), "web-m3's endpoint drained")


def test_stopping_a_join_after_kubectl_delete_node_removes_what_it_made(cluster):
    server, (two, three) = cluster["server"], cluster["joiners"]
    cidr = nodes(server)["m2"]["spec"]["podCIDRs"][0]
    assert route_to(cluster.mode, cidr, cluster.ip(2)) in pod_network_routes(server.ns)  # m1 routes m2's Pods to m2
    traces = traces_of_node(server.ns, cidr, cluster.ip(2))
    assert len(traces) == (1 if cluster.mode == "routes" else 3), traces  # the route (vxlan: and m2's VTEP neighbour and FDB entry)
    server.kubectl("apply", "-f", "-", input=web("web-m2b", "m2", "web2b"))
    netns.wait_until(lambda: (server.get("pod", "web-m2b").get("status") or {}).get("phase") == "Running", scaled(60), "web-m2b running")
    server.kubectl("delete", "node", "m2")
    two.process.send_signal(signal.SIGINT)
    assert two.process.wait(timeout=scaled(60)) == 0, two.log_path.read_text()[-3000:]
    assert not two.data_dir.exists()
    assert "cbr0" not in two.ns.ip("link").stdout
    assert "kube-proxy" not in two.ns.run("nft", "list", "tables").stdout
    assert holds_no_pod_network(two.ns)
    assert "m2" not in nodes(server)
    netns.wait_until(lambda: not traces_of_node(server.ns, cidr, cluster.ip(2)), scaled(60),
                     "m1 to drop its route (and VXLAN entries) to the deleted m2's Pods")
