"""``kubesvc trace`` beside real connections (issue 22 item 3), in nftables, iptables and
userspace modes: per mode one node namespace whose live rules a proxier programs (in this
process; userspace mode's in a process inside the node namespace, ``tests/trace/
userspace_proxy.py``, where its listeners must be) (``tests.support.netns.NodeTopology``: an
outside client, three Pods behind veths), then for
each scenario the trace's JSON form, read from the live state (``proxy.trace.live.read_node``,
as ``kubesvc trace`` reads it: the nftables table, or ``iptables-save``), and real connections
from the same source are both held to the outcome written in the table below: the verdict, the
Pods the connections land on, whether the Pod sees the client's address (masquerade). A CLI
run checks ``kubesvc trace`` itself inside the node.

Userspace mode runs every scenario, with what a relaying proxy changes: the verdict is
``REDIRECT`` (to the proxy's port, which connects to the candidates) and every endpoint sees the
node, not the client. Two scenarios have another outcome there, because upstream's userspace
proxy lacked the feature (``USERSPACE``): ``loadBalancerSourceRanges`` are not enforced (the LB
IP is proxied to both endpoints), and a Pod's connection to an externalIP under
``externalTrafficPolicy: Local`` is not sent to the cluster's endpoints (the external portal
serves only the local one). IPVS mode runs in the VM (``tests/kernel/vm/test_trace_ipvs.py``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.kernel.nftables import NFTables
from kubesvc.proxy.iptables.proxier import IptablesBackend
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.proxier import NftablesBackend
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.trace import live
from tests.support.builders import ep, options, port
from tests.support.builders import request as sync_request
from tests.support.netns import CLIENT_IP, NODE_IP, POD_CIDR, NodeTopology

pytestmark = pytest.mark.kernel

CIDRS = ("172.30.0.0/16",)
P = {k: NodeTopology.pod_ip(k) for k in (1, 2, 3)}


def services() -> list:
    return [
        (port("ns", "web", cluster_ip="172.30.0.10", node_port=30080, lb_ips=("1.2.3.4",), source_ranges=("203.0.113.0/25",)),
         (ep(P[1], 8080), ep(P[2], 8080))),
        (port("ns", "open", cluster_ip="172.30.0.11", lb_ips=("1.2.3.5",), source_ranges=("192.168.50.0/24",)),
         (ep(P[2], 8080),)),
        (port("ns", "hairpin", cluster_ip="172.30.0.12"), (ep(P[1], 8080),)),
        (port("ns", "local", cluster_ip="172.30.0.13", external_ips=("192.168.99.13",), etp_local=True),
         (ep(P[1], 8080, TEST_NODE_NAME), ep(P[3], 8080))),
        (port("ns", "sticky", cluster_ip="172.30.0.14", affinity_seconds=60), (ep(P[2], 8080), ep(P[3], 8080))),
        (port("ns", "empty", cluster_ip="172.30.0.15"), ()),
        (port("ns", "itp", cluster_ip="172.30.0.16", itp_local=True), (ep(P[1], 8080, TEST_NODE_NAME), ep(P[3], 8080))),
        (port("ns", "draining", cluster_ip="172.30.0.17"),
         (ep(P[1], 8080, ready=False, serving=True, terminating=True), ep(P[2], 8080, ready=False, serving=False))),
        (port("ns", "itp-none", cluster_ip="172.30.0.18", itp_local=True), (ep(P[3], 8080),)),
    ]


def slice_of(name: str, *endpoints: dict) -> dict:
    return {"metadata": {"name": f"{name}-abcde", "namespace": "ns"}, "ports": [{"name": "p80", "port": 8080}],
            "endpoints": list(endpoints)}


def endpoint(k: int, node: str, **conditions) -> dict:
    return {"addresses": [P[k]], "nodeName": node, "targetRef": {"kind": "Pod", "namespace": "ns", "name": f"pod{k}"},
            "conditions": {"ready": True, "serving": True, "terminating": False, **conditions}}


# What the API holds for two Services (as the EndpointSlice controller writes it), for the
# "excluded" answers.
OBJECTS = {
    "draining": live.Objects(service={"spec": {"clusterIP": "172.30.0.17", "clusterIPs": ["172.30.0.17"]}},
                             slices=[slice_of("draining", endpoint(1, TEST_NODE_NAME, ready=False, terminating=True),
                                              endpoint(2, "other", ready=False, serving=False))],
                             node=TEST_NODE_NAME),
    "local": live.Objects(service={"spec": {"clusterIP": "172.30.0.13", "clusterIPs": ["172.30.0.13"],
                                            "externalTrafficPolicy": "Local"}},
                          slices=[slice_of("local", endpoint(1, TEST_NODE_NAME), endpoint(3, "other"))],
                          node=TEST_NODE_NAME),
}

# (case, source "client" | "pod<k>" | "node", destination, port,
#  expected verdict (or {mode: verdict}), Pods a connection may land on, masqueraded, Service port named, objects)
CASES = [
    ("ClusterIP from outside", "client", "172.30.0.10", 80, "DNAT", {1, 2}, True, "ns/web", None),
    ("ClusterIP from a Pod", "pod3", "172.30.0.10", 80, "DNAT", {1, 2}, False, "ns/web", None),
    ("NodePort", "client", NODE_IP, 30080, "DNAT", {1, 2}, True, "ns/web", None),
    ("LB IP its source ranges leave out", "client", "1.2.3.4", 80, "DROP", set(), False, "ns/web", None),
    ("LB IP its source ranges allow", "client", "1.2.3.5", 80, "DNAT", {2}, True, "ns/open", None),
    ("hairpin: an endpoint to its own ClusterIP", "pod1", "172.30.0.12", 80, "DNAT", {1}, True, "ns/hairpin", None),
    ("externalIP under eTP Local from outside", "client", "192.168.99.13", 80, "DNAT", {1}, False, "ns/local", "local"),
    ("externalIP under eTP Local from a Pod", "pod2", "192.168.99.13", 80, "DNAT", {1, 3}, False, "ns/local", None),
    ("ClientIP affinity", "client", "172.30.0.14", 80, "DNAT", {2, 3}, True, "ns/sticky", None),
    ("no endpoints", "client", "172.30.0.15", 80, "REJECT", set(), False, "ns/empty", None),
    ("iTP Local from a Pod", "pod2", "172.30.0.16", 80, "DNAT", {1}, False, "ns/itp", None),
    ("terminating fallback", "client", "172.30.0.17", 80, "DNAT", {1}, True, "ns/draining", "draining"),
    ("iTP Local with no local endpoint", "pod2", "172.30.0.18", 80, "DROP", set(), False, "ns/itp-none", None),
    # nftables drops what is sent to an unallocated ClusterIP; iptables and userspace (as upstream's) let it be routed
    ("an unallocated ClusterIP", "client", "172.30.0.99", 80, {"nftables": "DROP", "iptables": "NONE", "userspace": "NONE"}, set(),
     False, None, None),
    ("not a Service address (a Pod's own)", "client", P[3], 8080, "NONE", set(), False, None, None),
    ("the node to a ClusterIP", "node", "172.30.0.10", 80, "DNAT", {1, 2}, True, "ns/web", None),
]


# What upstream's userspace proxy lacked, and so ours (see the module docstring): case → (verdict, Pods)
USERSPACE = {
    "LB IP its source ranges leave out": ("REDIRECT", {1, 2}),
    "externalIP under eTP Local from a Pod": ("REDIRECT", {1}),
}


def expected(mode: str, case: str, verdict, pods: set, masq: bool):
    """(verdict, Pods, masqueraded) in ``mode``: the table's, with userspace mode's differences."""
    verdict = verdict[mode] if isinstance(verdict, dict) else verdict
    if mode != "userspace":
        return verdict, pods, masq
    verdict, pods = USERSPACE.get(case, (verdict, pods))
    return ("REDIRECT" if verdict == "DNAT" else verdict), pods, True


@pytest.fixture(scope="module", params=["nftables", "iptables", "userspace"])
def world(request):
    """(topology, the node's state as ``kubesvc trace`` reads it, mode): one proxy per mode."""
    t = NodeTopology(pods=3, default_via_client=True)
    proxy = None
    try:
        for k, pod in enumerate(t.pods, start=1):
            t.serve(pod, f"pod{k}", tcp=(8080,))
        opts = options(POD_CIDR, node_name=TEST_NODE_NAME)
        if request.param == "userspace":
            proxy = t.node.popen(*t.node.python("tests.trace.userspace_proxy"), stdout=subprocess.PIPE, text=True)
            ready = proxy.stdout.readline()
            assert ready.strip() == "synced", f"the userspace proxy did not sync: {ready!r} (exit {proxy.poll()})"
        else:
            if request.param == "nftables":
                backend = NftablesBackend(opts, nft=NFTables(4, netns=t.node.name, in_process=False))
            else:
                backend = IptablesBackend(opts, netns=t.node.name)
            asyncio.run(Proxier(backend, opts, ProxyMetrics()).run_sync(sync_request(services(), service_cidrs=CIDRS)))
        yield t, asyncio.run(live.read_node(netns=t.node.name)), request.param
    finally:
        if proxy is not None:  # SIGTERM: it closes its listeners and removes its published portals
            proxy.terminate()
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proxy.kill()
        t.close()


def source_of(t: NodeTopology, source: str):
    if source.startswith("pod"):
        k = int(source[3:])
        return t.pods[k - 1], t.pod_ip(k)
    return (t.node, NODE_IP) if source == "node" else (t.client, CLIENT_IP)


@pytest.mark.parametrize("case,source,dest,dport,verdict,pods,masq,service,objects", CASES, ids=[c[0] for c in CASES])
def test_trace_and_real_connections_agree(world, case, source, dest, dport, verdict, pods, masq, service, objects):
    t, state, mode = world
    verdict, pods, masq = expected(mode, case, verdict, pods, masq)
    ns, source_ip = source_of(t, source)
    rep = json.loads(json.dumps(live.report(state, source_ip, dest, dport, "tcp", from_node=source == "node",
                                            objs=OBJECTS.get(objects))))
    traced = {int(c["endpoint"].split(".")[2]) for c in rep["candidates"]}
    outcomes = [o for o, _ in NodeTopology.attempts(ns, dest, dport, count=6 * len(pods) or 2, timeout=0.7)]
    why = f"trace: {json.dumps(rep, indent=1)}\nkernel: {outcomes}"
    assert rep["verdict"] == verdict and traced == pods, why
    assert rep["mode"] == mode
    assert (f"{rep['service']['namespace']}/{rep['service']['name']}" if rep["service"] else None) == service, why
    if pods:
        assert rep["masquerade"] == masq, why
        assert abs(sum(c["probability"] for c in rep["candidates"]) - 1) < 1e-6, why
        landed = {int(o.split()[0][3:]) for o in outcomes}
        if rep["affinity"]:  # the first connection picks one; the client then sticks to it
            assert len(landed) == 1 and landed <= pods, why
        else:
            assert landed == pods, why
        peers = {o.split()[1] for o in outcomes}
        assert (source_ip not in peers) if masq else (peers == {source_ip}), why
    elif verdict == "REJECT":  # forwarded, the ICMP error may not make it back
        assert set(outcomes) <= {"refused", "timeout"}, why
    elif verdict == "NONE" and dest == P[3]:  # routed as it is: straight to the Pod, the client's own source kept
        assert set(outcomes) == {f"pod3 {CLIENT_IP}"}, why
    else:
        assert set(outcomes) == {"timeout"}, why


def test_the_steps_and_probabilities_read_as_the_kernel_lists_them(world):
    t, state, mode = world
    rep = live.report(state, CLIENT_IP, "172.30.0.10", 80, "tcp")
    steps = [(s["hook"], s["chain"], s["rule"]) for s in rep["steps"]]
    if mode == "nftables":
        assert ("prerouting", "nat-prerouting", None) in steps
        assert ("prerouting", "services", "ip daddr . meta l4proto . th dport vmap @service-ips") in steps
        assert any(chain.startswith("service-") and chain.endswith("-ns/web/tcp/p80") and rule is None for _, chain, rule in steps)
        assert ("postrouting", "masquerading", "masquerade fully-random") in steps
    elif mode == "iptables":
        assert ("prerouting", "PREROUTING", None) in steps and ("prerouting", "KUBE-SERVICES", None) in steps
        assert any(chain.startswith("KUBE-SVC-") and rule and "--probability 0.5" in rule for _, chain, rule in steps)
        assert ("forward", "KUBE-FORWARD", None) in steps
        assert any(chain == "KUBE-POSTROUTING" and rule and rule.endswith("-j MASQUERADE --random-fully") for _, chain, rule in steps)
    else:  # redirected to the listener, then the node's INPUT (the proxy port's own chain accepts it)
        redirect = [rule for _, chain, rule in steps if chain == "KUBE-PORTALS-CONTAINER" and rule]
        assert len(redirect) == 1 and "-d 172.30.0.10/32" in redirect[0] and "-j REDIRECT --to-ports" in redirect[0], steps
        port = int(redirect[0].rsplit(" ", 1)[1])
        assert rep["listener"]["proxyPort"] == port and rep["listener"]["service"] == "ns/web:p80", rep["listener"]
        assert rep["listener"]["kind"] == "internal" and rep["listener"]["next"] in {f"{P[1]}:8080", f"{P[2]}:8080"}
        assert ("input", "INPUT", None) in steps and ("forward", "KUBE-FORWARD", None) not in steps
        # the kernel agrees that the proxy listens there, in the node's namespace
        assert f":{port} " in t.node.run("ss", "-Hltn", f"sport = :{port}").stdout
    assert sorted((c["endpoint"], c["probability"]) for c in rep["candidates"]) == [(f"{P[1]}:8080", 0.5), (f"{P[2]}:8080", 0.5)]
    assert rep["service"] == {"namespace": "ns", "name": "web", "protocol": "TCP", "port": "p80"}


def test_affinity_is_named(world):
    _, state, mode = world
    rep = live.report(state, CLIENT_IP, "172.30.0.14", 80, "tcp")
    # one per endpoint: a client seen before goes back to it; userspace: the listener's sessions
    assert len(rep["affinity"]) == (1 if mode == "userspace" else 2), rep["affinity"]
    assert sorted(c["probability"] for c in rep["candidates"]) == [0.5, 0.5]


def test_excluded_endpoints_say_why(world):
    _, state, _ = world
    rep = live.report(state, CLIENT_IP, "172.30.0.17", 80, "tcp", objs=OBJECTS["draining"])
    assert [(c["endpoint"], c["pod"], c["node"]) for c in rep["candidates"]] == [(f"{P[1]}:8080", "ns/pod1", TEST_NODE_NAME)]
    assert [(e["pod"], e["reason"]) for e in rep["excluded"]] == [("ns/pod2", "not ready")]
    rep = live.report(state, CLIENT_IP, "192.168.99.13", 80, "tcp", objs=OBJECTS["local"])
    assert [(e["pod"], e["reason"]) for e in rep["excluded"]] == [("ns/pod3", "on node other, and the traffic policy is Local")]


def test_the_command_traces_the_live_rules(world):
    t, _, mode = world
    result = t.node.run(*t.node.python("kubesvc", "trace", "external", "172.30.0.15:80/tcp", "-o", "json",
                                       "--data-dir", "/nonexistent"), check=False)
    assert result.returncode == 0, result.stderr
    rep = json.loads(result.stdout)
    assert rep["verdict"] == "REJECT" and rep["source"]["ip"] == "203.0.113.1" and rep["mode"] == mode
    assert rep["service"]["name"] == "empty"
    from click.testing import CliRunner

    from kubesvc.cmd import main
    text = CliRunner().invoke(main, ["trace", "external", "172.30.0.10:80", "--netns", t.node.name, "--data-dir", "/nonexistent"]).output
    assert ("the proxy connects to one of" if mode == "userspace" else "delivered to one of:") in text, text
    assert f"{P[1]}:8080" in text and "50.0%" in text, text


API_OBJECTS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: ns}}
---
apiVersion: v1
kind: Node
metadata: {{name: {TEST_NODE_NAME}}}
---
apiVersion: v1
kind: Service
metadata: {{name: draining, namespace: ns}}
spec:
  clusterIP: 172.30.0.17
  ports: [{{name: p80, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: draining-abcde
  namespace: ns
  labels: {{kubernetes.io/service-name: draining}}
addressType: IPv4
ports: [{{name: p80, port: 8080, protocol: TCP}}]
endpoints:
- addresses: ["{P[1]}"]
  nodeName: {TEST_NODE_NAME}
  targetRef: {{kind: Pod, namespace: ns, name: pod1}}
  conditions: {{ready: false, serving: true, terminating: true}}
- addresses: ["{P[2]}"]
  nodeName: other
  targetRef: {{kind: Pod, namespace: ns, name: pod2}}
  conditions: {{ready: false, serving: false, terminating: false}}
---
apiVersion: v1
kind: Pod
metadata: {{name: pod3, namespace: ns}}
spec:
  nodeName: {TEST_NODE_NAME}
  containers: [{{name: c, image: busybox}}]
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """An apiserver holding the objects behind the "terminating fallback" scenario (no
    controllers: the EndpointSlice is written as the controller would)."""
    from tests.support.apiserver import running_apiserver
    with running_apiserver(tmp_path_factory.mktemp("trace-api"), "--service-cluster-ip-range=172.30.0.0/16") as server:
        server.kubectl("apply", "-f", "-", input=API_OBJECTS)
        server.kubectl("patch", "pod", "pod3", "-n", "ns", "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": {"podIP": P[3], "podIPs": [{"ip": P[3]}]}}))
        yield server


def test_the_command_names_the_objects_from_the_api(world, api):
    """``kubesvc trace ns/pod3 ns/draining`` with a kubeconfig: the Pod's address is the source,
    the Service's ClusterIP and port the destination, the candidate's Pod and node come from the
    EndpointSlice, and the endpoint left out says why."""
    from click.testing import CliRunner

    from kubesvc.cmd import main
    t, _, mode = world
    result = CliRunner().invoke(main, ["trace", "ns/pod3", "ns/draining", "--kubeconfig", str(api.kubeconfig),
                                       "--netns", t.node.name, "--node", TEST_NODE_NAME, "-o", "json"])
    assert result.exit_code == 0, result.output
    rep = json.loads(result.output)
    assert rep["mode"] == mode and rep["node"] == TEST_NODE_NAME
    assert rep["source"] == {"ip": P[3], "pod": "ns/pod3", "fromNode": False}
    assert rep["destination"] == {"ip": "172.30.0.17", "port": 80, "protocol": "TCP"}
    assert [(c["endpoint"], c["probability"], c["pod"], c["node"], c["slice"]) for c in rep["candidates"]] == [
        (f"{P[1]}:8080", 1.0, "ns/pod1", TEST_NODE_NAME, "draining-abcde")]
    assert [(e["endpoint"], e["pod"], e["reason"]) for e in rep["excluded"]] == [(P[2], "ns/pod2", "not ready")]
    assert (rep["verdict"], rep["masquerade"]) == (("REDIRECT", True) if mode == "userspace" else ("DNAT", False))
    missing = CliRunner().invoke(main, ["trace", "ns/pod3", "ns/nosuch", "--kubeconfig", str(api.kubeconfig),
                                        "--netns", t.node.name])
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1, missing.output


@pytest.mark.parametrize("dest,dport", [("172.30.0.10", 80), ("172.30.0.15", 80), ("1.2.3.4", 80), (NODE_IP, 30080)],
                         ids=["ClusterIP", "no endpoints", "LB source range", "NodePort"])
def test_probe_the_kernels_own_trace_agrees(world, dest, dport):
    """``--probe``: a real connection from the client's namespace, traced by the kernel
    (nftables: ``nft monitor trace``) matched the same rules in the same order as the walk; in
    iptables mode (a raw-table ``TRACE`` rule, ``xtables-monitor --trace``) the rules the kernel
    matched are the walk's, in order, and its outcome (the DNAT target, REJECT, DROP) is the
    walk's; in userspace mode the same, the outcome being the redirect to the walk's listener."""
    from click.testing import CliRunner

    from kubesvc.cmd import main
    t, _, mode = world
    tables = t.node.run("nft", "list", "tables").stdout
    result = CliRunner().invoke(main, ["trace", CLIENT_IP, f"{dest}:{dport}", "--netns", t.node.name, "--probe", t.client.name,
                                       "--data-dir", "/nonexistent", "-o", "json"])
    assert result.exit_code == 0, result.output
    rep = json.loads(result.output)
    traced = [(s["chain"], s["rule"]) for s in rep["probe"]["steps"] if s["rule"]]
    assert traced and rep["probe"]["agrees"], json.dumps(rep, indent=1)
    if mode in ("iptables", "userspace"):
        assert rep["probe"]["verdict"] == rep["verdict"], json.dumps(rep, indent=1)
        if rep["verdict"] == "DNAT":
            assert rep["probe"]["endpoint"] in {c["endpoint"] for c in rep["candidates"]}
        if rep["verdict"] == "REDIRECT":  # to the proxy's listener the walk names
            assert rep["probe"]["endpoint"] == str(rep["listener"]["proxyPort"])
        assert "kubesvc trace probe" not in t.node.run("iptables-save", "-t", "raw").stdout  # the probe's rules are gone
        assert t.node.run("nft", "list", "tables").stdout == tables  # and the raw table iptables-nft made for them
    else:
        assert "kubesvc-trace" not in t.node.run("nft", "list", "tables").stdout  # the probe's table is gone
