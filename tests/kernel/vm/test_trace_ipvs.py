"""``kubesvc trace`` in IPVS mode beside real connections (issue 22: "IPVS (in the VM)"): the
side-by-side test of tests/kernel/test_trace_side_by_side.py on a kernel with IPVS. One node
namespace (``NodeTopology``: an outside client, three Pods) whose IPVS table, ipsets and
iptables rules the real ``IpvsBackend`` programs from this process (netlink and the tools
inside the namespace); the trace reads them back as ``kubesvc trace`` does (``live.read_node``:
``iptables-save``, ``ipset save``, the IPVS table over netlink), and for each scenario of
tests/trace/test_ipvs.py (the same table, there over the fakes) the trace's JSON and real
connections from the same source are held to the expected outcome.

Runs in the VM only (tests/kernel/test_proxy_ipvs_vm.py; this kernel has no IPVS). Few attempts
per scenario: every one is emulated. ``kubesvc trace`` itself reads the same state through the
same ``live.read_node`` (its command path is tested on the host in the other modes).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from kubesvc.kernel import modules
from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
from kubesvc.proxy.ipvs.proxier import IpvsBackend
from kubesvc.proxy.ipvs.support import wanted_modules
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.trace import live
from tests.kernel.test_trace_side_by_side import CIDRS, services
from tests.kernel.vm.pods import ThreadedServer
from tests.support.builders import options
from tests.support.builders import request as sync_request
from tests.support.netns import CLIENT_IP, NODE_IP, POD_CIDR, NodeTopology
from tests.support.slowdown import scaled
from tests.trace.test_ipvs import CASES, FROM_NODE

pytestmark = pytest.mark.kernel

TIMEOUT = min(scaled(0.7), 3.0)  # a connection that should not land: how long to wait for it


@pytest.fixture(scope="module")
def world():
    assert not modules.load(wanted_modules("rr")), "the VM's kernel must load ip_vs"
    t = NodeTopology(pods=3, default_via_client=True)
    servers = []
    try:
        # each Pod's TCP 8080 answering "pod<k> <client address>" (no Python start per Pod)
        for k, pod in enumerate(t.pods, start=1):
            servers.append(ThreadedServer(pod.name, f"pod{k}", tcp=(8080,), udp=()))
        opts = options(POD_CIDR, node_name=TEST_NODE_NAME)
        backend = IpvsBackend(opts, netns=t.node.name)
        asyncio.run(Proxier(backend, opts, ProxyMetrics()).run_sync(sync_request(services(), service_cidrs=CIDRS)))
        yield t, asyncio.run(live.read_node(netns=t.node.name))
    finally:
        for server in servers:
            server.close()
        t.close()


class Why:
    """The assertion message, made only when one fails (``ipvsadm -Ln`` is a process: seconds here)."""

    def __init__(self, t, rep, outcomes):
        self.t, self.rep, self.outcomes = t, rep, outcomes

    def __str__(self) -> str:
        return f"trace: {json.dumps(self.rep, indent=1)}\nkernel: {self.outcomes}\n{self.t.node.run('ipvsadm', '-Ln').stdout}"


def source_of(t: NodeTopology, source: str):
    for k in (1, 2, 3):
        if source == t.pod_ip(k):
            return t.pods[k - 1]
    return t.node if source == NODE_IP else t.client


@pytest.mark.parametrize("case,source,dest,dport,verdict,pods,masq", [*CASES, FROM_NODE], ids=[c[0] for c in [*CASES, FROM_NODE]])
def test_ipvs_trace_and_real_connections_agree(world, case, source, dest, dport, verdict, pods, masq):
    t, state = world
    rep = json.loads(json.dumps(live.report(state, source, dest, dport, "tcp", from_node=source == NODE_IP)))
    traced = {int(c["endpoint"].split(".")[2]) for c in rep["candidates"]}
    outcomes = [o for o, _ in NodeTopology.attempts(source_of(t, source), dest, dport, count=4 * len(pods) or 1,
                                                    timeout=TIMEOUT if not pods else scaled(2))]
    why = Why(t, rep, outcomes)
    assert rep["mode"] == "ipvs" and (rep["verdict"], traced) == (verdict, pods), why
    if pods:
        assert rep["masquerade"] == masq, why
        landed = {int(o.split()[0][3:]) for o in outcomes if o.startswith("pod")}
        assert len(landed) == 1 if rep["affinity"] else landed == pods, why
        assert landed <= pods and all(o.startswith("pod") for o in outcomes), why
        peers = {o.split()[1] for o in outcomes}
        assert (source not in peers) if masq else (peers == {source}), why
    elif verdict == "REJECT":  # ICMP port unreachable from the node (ip_vs_leave, or KUBE-IPVS-FILTER)
        assert set(outcomes) <= {"refused", "timeout"} and "refused" in outcomes, why
    elif verdict == "NONE" and dest.startswith("10.1."):  # routed as it is, to the Pod
        assert set(outcomes) == {f"pod3 {CLIENT_IP}"}, why
    else:
        assert set(outcomes) == {"timeout"}, why

