"""IpvsBackend (src/kubesvc/proxy/ipvs/proxier.py) over stateful fakes: the IPVS table
(``FakeIpvs``), iptables (``FakeIptablesAsync``), links (``FakeLinks``) and ipsets (``FakeIpset``).
Asserts the kernel state after each sync: virtual/real servers, addresses on kube-ipvs0, set members, graceful
termination across syncs, deletion of a Service."""

from __future__ import annotations

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.ipset import FakeIpset
from kubesvc.kernel.fake.sysctl import FakeSysctl
from kubesvc.kernel.fake.iptables import TEST_NODE_NAME, FakeIptablesAsync
from kubesvc.kernel.fake.ipvs import FakeIpvs
from kubesvc.kernel.fake.netlink import FakeLinks
from kubesvc.kernel.ipvs import ServiceKey
from kubesvc.proxy.backend import ProxyOptions, SyncFailed
from kubesvc.proxy.config import IPVSSettings
from kubesvc.proxy.ipvs.proxier import IpvsBackend
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.types import IPV4
from tests.support.builders import Cluster, ep, port, spn

NODE_IP = "192.168.0.2"


class FakeHost(FakeLinks):
    """The node's links (``FakeLinks``), its ipsets (``FakeIpset``) and sysctls (``FakeSysctl``,
    with the ``net/ipv4/vs`` keys ``ip_vs`` brings)."""

    def __init__(self):
        super().__init__({"lo": ["127.0.0.1"], "eth0": [NODE_IP]})
        self.ipset = FakeIpset()
        self.sysctl = FakeSysctl(links=("lo", "eth0"))
        self.sysctl.values.update({f"net/ipv4/vs/{key}": "0" for key in ("conntrack", "expire_nodest_conn", "expire_quiescent_template")})


def backend(fake_ipvs: FakeIpvs, host: FakeHost, scheduler: str = "", metrics: ProxyMetrics | None = None) -> Proxier:
    """The IPVS mode inside the shared proxier (``run_sync`` takes requests directly)."""
    options = ProxyOptions(family=IPV4, node_name=TEST_NODE_NAME)
    mode = IpvsBackend(options, settings=IPVSSettings(scheduler=scheduler), ipvs=fake_ipvs, ipt=FakeIptablesAsync(),
                       ipset=host.ipset, sysctl=host.sysctl, links=host)
    return Proxier(mode, options, metrics or ProxyMetrics())


VIP = ServiceKey("172.30.0.41", "TCP", 80)
NODEPORT = ServiceKey(NODE_IP, "TCP", 3001)


async def test_sync_programs_ipvs_addresses_and_drains_removed_endpoints_gracefully():
    ipvs, host = FakeIpvs(), FakeHost()
    b = backend(ipvs, host)
    c = Cluster().add(port("ns1", "svc", cluster_ip="172.30.0.41", node_port=3001))
    c.set_endpoints(spn("ns1", "svc"), ep("10.180.0.1", 80), ep("10.180.0.2", 80))
    await b.run_sync(c.request(full=True))
    assert set(ipvs.servers) == {VIP, NODEPORT}
    assert {rs: s.weight for rs, s in ipvs.reals[VIP].items()} == {("10.180.0.1", 80): 1, ("10.180.0.2", 80): 1}
    assert host.links["kube-ipvs0"] == ["172.30.0.41"]
    assert host.ipset.members("KUBE-CLUSTER-IP") == {"172.30.0.41,tcp:80"}
    assert not [name for name in host.ipset.sets if "TMP" in name]  # refilled through a swapped-in temporary
    assert [host.sysctl.read(k) for k in ("net/ipv4/vs/conntrack", "net/ipv4/vs/expire_nodest_conn", "net/ipv4/ip_forward")] == ["1"] * 3

    # 10.180.0.2 goes away while it still has a connection: weight 0, kept
    ipvs.connections(VIP, ("10.180.0.2", 80), active=1)
    c.set_endpoints(spn("ns1", "svc"), ep("10.180.0.1", 80))
    await b.run_sync(c.request())
    assert {rs: s.weight for rs, s in ipvs.reals[VIP].items()} == {("10.180.0.1", 80): 1, ("10.180.0.2", 80): 0}
    assert ("10.180.0.2", 80) not in ipvs.reals[NODEPORT]  # no connections there: deleted at once

    # its connection ends: the next (periodic) sync deletes it
    ipvs.connections(VIP, ("10.180.0.2", 80), active=0)
    await b.run_sync(c.request(full=True))
    assert set(ipvs.reals[VIP]) == {("10.180.0.1", 80)}

    # someone deletes a virtual server behind our back: repaired by the next sync
    del ipvs.servers[VIP], ipvs.reals[VIP]
    await b.run_sync(c.request())
    assert VIP in ipvs.servers

    c.delete_service("ns1", "svc")
    await b.run_sync(c.request())
    assert ipvs.servers == {}
    assert host.links["kube-ipvs0"] == []
    assert host.ipset.members("KUBE-CLUSTER-IP") == set()


async def test_scheduler_and_affinity_reach_the_kernel_and_change_in_place():
    ipvs, host = FakeIpvs(), FakeHost()
    c = Cluster().add(port("ns1", "svc", cluster_ip="172.30.0.41", affinity_seconds=60))
    await backend(ipvs, host, "lc").run_sync(c.request(full=True))
    server = ipvs.servers[VIP]
    assert (server.scheduler, server.flags, server.timeout) == ("lc", 1, 60)
    ipvs.calls.clear()
    await backend(ipvs, host, "sh").run_sync(c.request(full=True))
    assert ipvs.calls == ["edit-service 172.30.0.41:80/TCP"]
    assert ipvs.servers[VIP].scheduler == "sh"


async def test_a_failed_sync_counts_the_failure_metric_and_the_next_one_is_full():
    ipvs, host = FakeIpvs(), FakeHost()
    metrics = ProxyMetrics()
    b = backend(ipvs, host, metrics=metrics)
    c = Cluster().add(port("ns1", "svc", cluster_ip="172.30.0.41"))
    c.set_endpoints(spn("ns1", "svc"), ep("10.180.0.1"))
    await b.run_sync(c.request(full=True))

    async def broken(text, **kwargs):
        raise CommandFailed(("iptables-restore",), 1, "", "iptables-restore: line 2 failed", text)
    b.mode.ipt.restore = broken
    with pytest.raises(SyncFailed):
        await b.run_sync(c.request())
    assert metrics.registry.get_sample_value("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", {"ip_family": "IPv4"}) == 1
    del b.mode.ipt.restore
    assert b.need_full_sync and (await b.run_sync(c.request())).full
