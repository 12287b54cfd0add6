"""``UserspaceBackend`` on a fake iptables: listeners follow the Service ports, the restore
carries their ports, endpoints reach the balancer, and without usable iptables the listeners
still relay."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.iptables import TEST_NODE_NAME, FakeIptablesAsync
from kubesvc.proxy.backend import ProxyOptions, SyncFailed
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.userspace.proxier import UserspaceBackend
from kubesvc.proxy.userspace.rules import JUMPS
from tests.support.builders import Cluster, ep, port, spn

HOST = "127.0.0.1"


def backend(ipt=None, **options) -> tuple[Proxier, FakeIptablesAsync]:
    """The userspace mode inside the shared proxier (``run_sync`` takes requests directly;
    ``.mode`` is the ``UserspaceBackend``)."""
    ipt = ipt or FakeIptablesAsync()
    opts = ProxyOptions(node_name=TEST_NODE_NAME)
    return Proxier(UserspaceBackend(opts, ipt=ipt, listen_ip=HOST, **options), opts, ProxyMetrics()), ipt


async def answer_server(name: str):
    async def answer(reader, writer):
        writer.write(name.encode())
        await writer.drain()
        writer.close()
    server = await asyncio.start_server(answer, HOST, 0)
    return server, server.sockets[0].getsockname()[1]


async def ask(port: int) -> str:
    reader, writer = await asyncio.open_connection(HOST, port)
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data.decode()


async def test_sync_opens_listeners_writes_their_ports_and_relays():
    server, backend_port = await answer_server("web-1")
    b, ipt = backend()
    c = Cluster(node_ip="192.168.0.2")
    web, dns = spn("ns", "web"), spn("ns", "dns", "dns", "UDP")
    c.add(port("ns", "web", cluster_ip="172.30.0.1", node_port=30080), port("ns", "dns", "dns", 53, "UDP", cluster_ip="172.30.0.2"))
    c.set_endpoints(web, ep(HOST, backend_port))
    c.set_endpoints(dns, ep(HOST, 5353))
    try:
        result = await b.run_sync(c.request(full=True))
        web_port, dns_port = b.mode.proxy_port(web), b.mode.proxy_port(dns)
        assert web_port and dns_port and web_port != dns_port
        nat = ipt.save_sync("nat")
        assert f"-d 172.30.0.1/32 -j REDIRECT --to-ports {web_port}" in nat
        assert f"--dport 30080 -j DNAT --to-destination 192.168.0.2:{web_port}" in nat
        assert f"-p udp -m udp --dport 53 -d 172.30.0.2/32 -j REDIRECT --to-ports {dns_port}" in nat
        for _, jump in JUMPS:
            assert ipt.rule_exists_sync(jump.table, jump.src, *jump.args), jump
        assert result.full and result.written == {"filter": 1, "nat": 6}
        assert await ask(web_port) == "web-1"

        # endpoints change: same listener; the Service goes: listener closed
        c.set_endpoints(web, ep(HOST, backend_port), ep(HOST, backend_port + 0))
        await b.run_sync(c.request())
        assert b.mode.proxy_port(web) == web_port
        c.delete_service("ns", "web")
        await b.run_sync(c.request())
        assert b.mode.proxy_port(web) == 0 and "172.30.0.1" not in ipt.save_sync("nat")
        with pytest.raises(OSError):
            await ask(web_port)
    finally:
        await b.stop()
        server.close()


class Unusable(FakeIptablesAsync):
    async def version(self):
        raise CommandFailed(["iptables", "--version"], 127, "", "iptables: not found")

    async def restore(self, *args, **kwargs):
        raise AssertionError("must not be called once iptables is known unusable")


async def test_without_iptables_listeners_still_relay(caplog):
    server, backend_port = await answer_server("web-1")
    b, _ = backend(Unusable())
    c = Cluster()
    c.add(port("ns", "web", cluster_ip="172.30.0.1"))
    c.set_endpoints(spn("ns", "web"), ep(HOST, backend_port))
    try:
        await b.run_sync(c.request(full=True))
        await b.run_sync(c.request(full=True))
        assert await ask(b.mode.proxy_port(spn("ns", "web"))) == "web-1"
        warnings = [r for r in caplog.records if "iptables unusable" in r.getMessage()]
        assert len(warnings) == 1, "one line, once"
    finally:
        await b.stop()
        server.close()


class Rejecting(FakeIptablesAsync):
    async def restore(self, text, **kwargs):
        raise CommandFailed(["iptables-restore"], 1, "", "iptables-restore: line 3 failed", text)


async def test_failed_restore_raises_and_makes_the_next_sync_full():
    b, _ = backend(Rejecting())
    c = Cluster()
    c.add(port("ns", "web", cluster_ip="172.30.0.1"))
    try:
        with pytest.raises(SyncFailed):
            await b.run_sync(c.request(full=False))
        assert b.need_full_sync
        assert b.metrics.iptables_restore_failures.labels("IPv4")._value.get() == 1
    finally:
        await b.stop()


async def test_the_state_file_for_trace_is_rewritten_only_when_what_it_says_changed(tmp_path, monkeypatch):
    """A sync that changes none of the portals, listeners, endpoints or balancer leaves the
    published file as it is (same file, same writtenAt); a changed endpoint rewrites it."""
    import json
    import os

    from kubesvc.kernel import runstate

    monkeypatch.setenv("KUBESVC_RUN_DIR", str(tmp_path / "run"))
    b, ipt = backend(publish_state=True)
    c = Cluster(node_ip="192.168.0.2")
    web = spn("ns", "web")
    c.add(port("ns", "web", cluster_ip="172.30.0.1"))
    c.set_endpoints(web, ep("10.244.0.5", 8080))
    path = b.mode.state_file

    def written() -> tuple:
        st = os.stat(path)
        return st.st_ino, st.st_mtime_ns, json.loads(path.read_text())

    try:
        await b.run_sync(c.request(full=True))
        first = written()
        assert [e for p in first[2]["portals"] for e in p["endpoints"]] == ["10.244.0.5:8080"]
        await b.run_sync(c.request())  # nothing changed
        await b.run_sync(c.request(full=True))  # nor in a full sync
        assert written() == first
        c.set_endpoints(web, ep("10.244.0.6", 8080))
        await b.run_sync(c.request())
        second = written()
        assert second[0] != first[0] and [e for p in second[2]["portals"] for e in p["endpoints"]] == ["10.244.0.6:8080"]
        assert runstate.read(path) is not None
    finally:
        await b.stop()
    assert not path.exists()
