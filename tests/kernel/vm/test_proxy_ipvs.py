"""``kubesvc proxy --proxy-mode ipvs`` on a kernel that has IPVS: virtual servers, real servers,
schedulers, persistence, NodePorts and graceful termination, proven by traffic and read back
from the kernel with the administrator's tools (``ipvsadm -Ln`` and ``/proc/net/ip_vs_conn`` in
the node's namespace), not the proxy's own netlink code.

This machine's kernel has no IPVS, so these tests run inside a throw-away VM booting Debian's
stock kernel (scripts/vm-ipvs.sh; tests/kernel/test_proxy_ipvs_vm.py starts it and checks the
result). They are collected only where ``KUBESVC_IPVS_TESTS=1`` (tests/kernel/conftest.py):
the VM sets it, and so can a developer whose own kernel has IPVS.

Each test's Pods serve ``tcp`` 8080 (answer and close) and an ``echo`` port 9090 whose
connections stay open (tests/support/held_connection.py), so a test can hold established
connections through a virtual server while the endpoints change underneath.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from dataclasses import dataclass, field

from kubesvc.client.rest import SERVICES
from tests.kernel.helpers import all_from, assert_spread
from tests.support.held_connection import HeldConnections
from tests.support.netns import wait_until
from tests.support.slowdown import scaled

MODES = ["ipvs"]
NODE_COUNT = 1
SYNC_PERIOD = 10  # the periodic resync: drift repair and the re-check of draining real servers
TCP_TIMEOUT, UDP_TIMEOUT = 600, 11  # IPVS's defaults: 900 s, 300 s
PROXY_FLAGS = ("--ipvs-min-sync-period=1s", f"--ipvs-sync-period={SYNC_PERIOD}s", "--ipvs-scheduler=rr",
               f"--ipvs-tcp-timeout={TCP_TIMEOUT}s", f"--ipvs-udp-timeout={UDP_TIMEOUT}s", "--v=2")
ECHO = 9090
PORTS = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
         {"name": "echo", "port": ECHO, "targetPort": ECHO, "protocol": "TCP"}]
NAMES = {"web-a", "web-b", "web-c"}


# ---- the kernel's IPVS table, as ipvsadm shows it ---------------------------------------------------

@dataclass
class RealServer:
    forward: str
    weight: int
    active: int
    inactive: int


@dataclass
class VirtualServer:
    scheduler: str
    persistent: int | None  # the persistence timeout in seconds (ClientIP affinity), None without
    reals: dict[tuple[str, int], RealServer] = field(default_factory=dict)


def _endpoint(text: str) -> tuple[str, int]:
    address, port = text.rsplit(":", 1)
    return address.strip("[]"), int(port)


def ipvs_table(node) -> dict[tuple[str, str, int], VirtualServer]:
    """{(protocol, address, port): VirtualServer} in ``node``'s namespace, from ``ipvsadm -Ln``
    (the administrator's tool, not the proxy's netlink code)."""
    table: dict[tuple[str, str, int], VirtualServer] = {}
    current = None
    for line in node.ns.run("ipvsadm", "-Ln").stdout.splitlines()[3:]:
        words = line.split()
        if words[0] == "->":
            current.reals[_endpoint(words[1])] = RealServer(words[2], int(words[3]), int(words[4]), int(words[5]))
        else:
            ip, port = _endpoint(words[1])
            persistent = int(words[words.index("persistent") + 1]) if "persistent" in words else None
            current = table[(words[0], ip, port)] = VirtualServer(words[2], persistent)
    return table


def ipvs_connections(node) -> list[dict]:
    """/proc/net/ip_vs_conn: one dict per IPVS connection entry (IPv4)."""
    entries = []
    for line in node.ns.run("cat", "/proc/net/ip_vs_conn").stdout.splitlines()[1:]:
        words = line.split()
        if len(words) < 9 or ":" in words[1]:
            continue
        ip = lambda text: str(ipaddress.IPv4Address(int(text, 16)))  # noqa: E731
        entries.append({"protocol": words[0], "client": ip(words[1]), "vip": ip(words[3]), "vport": int(words[4], 16),
                        "dest": ip(words[5]), "state": words[7], "expires": int(words[8])})
    return entries


def virtual_server(node, ip: str, port: int, protocol: str = "TCP") -> VirtualServer | None:
    return ipvs_table(node).get((protocol, ip, port))


def weights(node, ip: str, port: int, protocol: str = "TCP") -> dict[str, int] | None:
    """{endpoint IP: weight} of one virtual server (None: no such virtual server)."""
    vs = virtual_server(node, ip, port, protocol)
    return None if vs is None else {rs_ip: rs.weight for (rs_ip, _), rs in vs.reals.items()}


async def wait_for_kernel(kt, what: str, predicate, timeout: float = 20):
    """Until ``predicate()`` (reading the kernel) holds; its value. On timeout the IPVS table
    and the proxy's log."""
    (node,) = kt.nodes
    try:
        return await asyncio.to_thread(wait_until, predicate, scaled(timeout), what)
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- ipvsadm -Ln ---\n{node.ns.run('ipvsadm', '-Ln').stdout}\n"
                             f"{kt.env.diagnostics(rules=False)}") from None


def _all_answered(result: dict) -> bool:
    return result["answered"] == result["count"]


async def three_backends(kt, name: str = "web", *, answering=all_from(NAMES), **spec):
    """Pods web-a/b/c (8080 and the echo port), a client Pod, and a Service over them, once
    the client's connections are ``answering`` as they should."""
    (node,) = kt.nodes
    labels = {"app": name}
    pods = await asyncio.gather(*(kt.pod(node, f"web-{suffix}", labels, echo=(ECHO,)) for suffix in "abc"))
    client = await kt.client_pod(node, "client", serve=False)  # a Python process less: they start slowly here
    svc = await kt.service(name, labels, ports=PORTS, **spec)
    vip = svc["spec"]["clusterIP"]
    await kt.until(client, "tcp", vip, 80, 30, answering, what=f"{name} through IPVS")
    return list(pods), client, svc, vip


def by_ip(pods) -> dict[str, str]:
    return {pod.ip: pod.name for pod in pods}


# ---- tests --------------------------------------------------------------------------------------

async def test_clusterip_is_a_virtual_server_with_the_endpoints_as_real_servers(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)

    vs = virtual_server(node, vip, 80)
    assert vs is not None and vs.scheduler == "rr" and vs.persistent is None, ipvs_table(node)
    assert {(ip, port): (rs.forward, rs.weight) for (ip, port), rs in vs.reals.items()} == {
        (pod.ip, 8080): ("Masq", 1) for pod in pods}, vs
    assert set(weights(node, vip, ECHO)) == {pod.ip for pod in pods}
    dummy = node.ns.run("ip", "-o", "-4", "addr", "show", "dev", "kube-ipvs0").stdout
    assert f" {vip}/32 " in dummy, f"the ClusterIP must be bound to kube-ipvs0: {dummy!r}"

    # rr, one connection at a time: strict rotation, from a Pod and from the node itself
    for where in (client, node):
        result = await kt.probe(where, "tcp", vip, 80, 30, concurrency=1)
        assert result["names"] == {name: 10 for name in NAMES}, f"round robin from {where.name}: {result}"
    # masquerade only what needs it: a Pod's connection keeps its source IP
    assert set(result["sources"]) != {client.ip}
    from_pod = await kt.probe(client, "tcp", vip, 80, 6, concurrency=1)
    assert set(from_pod["sources"]) == {client.ip}, from_pod

    # any other port of a Service IP is refused at once (KUBE-IPVS-FILTER), not left to time out
    other = await kt.probe(client, "tcp", vip, 81, 3, timeout=2)
    assert other["refused"] == 3, other

    udp = await kt.service("dns", {"app": "web"}, ports=[{"name": "dns", "port": 53, "targetPort": 8080, "protocol": "UDP"}])
    uvip = udp["spec"]["clusterIP"]
    got = await kt.until(client, "udp", uvip, 53, 30, all_from(NAMES), what="UDP through IPVS")
    assert_spread(got, NAMES, 5, "UDP round robin")
    assert virtual_server(node, uvip, 53, "UDP").scheduler == "rr"
    # --ipvs-udp-timeout reached the kernel: the flows just made expire within it
    flows = [c for c in ipvs_connections(node) if c["protocol"] == "UDP" and c["vip"] == uvip]
    assert flows and all(c["expires"] <= UDP_TIMEOUT for c in flows), flows


async def test_endpoint_changes_and_drift_are_repaired(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)
    a, b, c = pods

    await kt.set_ready(a, False)  # not ready: out of the real servers (it had only closed connections on port 80)
    await kt.until(client, "tcp", vip, 80, 30, all_from({"web-b", "web-c"}), what="the unready endpoint left out")
    await kt.set_ready(a, True)
    await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="the endpoint back")

    # someone deletes the virtual server behind the proxy's back: the periodic resync restores it
    script = ("import socket; from pyroute2 import IPVS, IPVSService; "
              f"IPVS().service('del', service=IPVSService(addr='{vip}', port=80, protocol=socket.IPPROTO_TCP))")
    node.ns.run(sys.executable, "-c", script, timeout=scaled(60))
    assert virtual_server(node, vip, 80) is None, "the test's own deletion did not take"
    restored = await wait_for_kernel(kt, "the deleted virtual server restored by the resync",
                                     lambda: weights(node, vip, 80) == {p.ip: 1 for p in pods}, timeout=SYNC_PERIOD + 10)
    assert restored
    await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="traffic after the resync")


async def test_graceful_termination_keeps_established_connections_at_weight_zero(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt)
    held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO)
    try:
        (gone_name,) = held.backends
        gone = next(p for p in pods if p.name == gone_name)
        stay = NAMES - {gone_name}
        await kt.delete_pod(gone, keep_running=True)  # the Pod's endpoint goes; its process still serves

        # TCP real server with a live connection: kept, at weight 0, until the connection ends
        drained = await wait_for_kernel(kt, "the removed endpoint drained at weight 0 on the echo port",
                                        lambda: weights(node, vip, ECHO) == {**{p.ip: 1 for p in pods if p is not gone}, gone.ip: 0})
        assert drained
        rs = virtual_server(node, vip, ECHO).reals[(gone.ip, ECHO)]
        assert rs.active == 1, rs
        (entry,) = [c for c in ipvs_connections(node) if c["vport"] == ECHO and c["dest"] == gone.ip]
        assert entry["state"] == "ESTABLISHED" and 0 < entry["expires"] <= TCP_TIMEOUT, f"--ipvs-tcp-timeout: {entry}"
        # ... while on port 80, where it had no connection left open... (its TIME_WAIT ones count:
        # IPVS keeps them 2 minutes), new connections never reach it
        result = await kt.until(client, "tcp", vip, 80, 30, all_from(stay), what="new connections only to the others")
        assert_spread(result, stay, 5, "after the endpoint went")
        more = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 2)
        assert set(more.backends) == stay, f"new connections to a draining real server: {more.backends}"
        more.reset()
        assert held.say("still there") == [f"{gone_name} still there"], "the established connection must survive"

        held.reset()  # RST: IPVS forgets the connection within its CLOSE timeout (10 s)
        await wait_for_kernel(kt, "the drained real server deleted once its connection is gone",
                              lambda: set(weights(node, vip, ECHO) or {}) == {p.ip for p in pods if p is not gone},
                              timeout=10 + SYNC_PERIOD + 10)
    finally:
        held.reset()


async def test_client_ip_affinity_is_ipvs_persistence(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt, "sticky", answering=_all_answered, sessionAffinity="ClientIP",
                                                  sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    vs = virtual_server(node, vip, 80)
    assert vs.persistent == 60, vs
    result = await kt.probe(client, "tcp", vip, 80, 20, concurrency=1)
    assert result["answered"] == 20 and len(result["names"]) == 1, f"one client, one backend: {result}"
    held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 3)
    try:
        assert len(set(held.backends)) == 1, f"persistent: every connection of the client to one backend: {held.backends}"

        svc = {**svc, "spec": {**svc["spec"], "sessionAffinity": "None"}}
        svc["spec"].pop("sessionAffinityConfig", None)
        await kt.client.resource(SERVICES).update(svc)
        await wait_for_kernel(kt, "persistence switched off in place", lambda: virtual_server(node, vip, 80).persistent is None)
        await kt.until(client, "tcp", vip, 80, 30, all_from(NAMES), what="spread again without affinity")
        answers = held.say("edited")
        assert answers == [f"{name} edited" for name in held.backends], f"connections survive editing the virtual server: {answers}"
    finally:
        held.reset()


async def test_nodeport_is_a_virtual_server_per_node_ip(kt):
    (node,) = kt.nodes
    pods, client, svc, vip = await three_backends(kt, "np", type="NodePort")
    node_port = svc["spec"]["ports"][0]["nodePort"]
    await wait_for_kernel(kt, f"a virtual server on the node's IP {node.lan_ip}:{node_port} with the three endpoints",
                          lambda: set(weights(node, node.lan_ip, node_port) or {}) == {p.ip for p in pods})
    result = await kt.until(kt.external, "tcp", node.lan_ip, node_port, 30, all_from(NAMES), what="NodePort from outside")
    assert_spread(result, NAMES, 5, "NodePort")
    assert kt.external.ip not in result["sources"], f"externalTrafficPolicy Cluster masquerades: {result['sources']}"
    members = node.ns.run("ipset", "list", "KUBE-NODE-PORT-TCP").stdout
    assert f"\n{node_port}\n" in members + "\n", members


def _one_backend(result: dict) -> bool:
    return result["answered"] == result["count"] and len(result["names"]) == 1


# The schedulers upstream documents besides rr (the default, strict rotation: the first test).
# The others (wrr, wlc, lblc, lblcr, mh) reach the kernel the same way, a name in the virtual
# server (tests/proxy/ipvs); each proxy start costs about half a minute under emulation.
SCHEDULER_SWEEP = ("lc", "sed", "nq", "sh", "dh")


async def test_each_scheduler_balances_as_it_should(kt):
    """One proxy start per ``--ipvs-scheduler``: the virtual server's scheduler is edited in
    place, and traffic shows it. lc/sed/nq send each new connection to the least loaded server,
    so three held connections land on three backends; sh hashes the source (one client → one
    backend); dh hashes the destination (one VIP → one backend, from any client)."""
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    pods, client, svc, vip = await three_backends(kt)
    flags = list(proxy.extra)
    failures = []
    try:
        for scheduler in SCHEDULER_SWEEP:
            proxy.extra = [f for f in flags if not f.startswith("--ipvs-scheduler=")] + [f"--ipvs-scheduler={scheduler}"]
            await asyncio.to_thread(proxy.restart)
            await wait_for_kernel(kt, f"the virtual server's scheduler edited to {scheduler}",
                                  lambda: {virtual_server(node, vip, port).scheduler for port in (80, ECHO)} == {scheduler})
            if scheduler in ("lc", "sed", "nq"):
                held = await asyncio.to_thread(HeldConnections.open, client.ns, vip, ECHO, 3)
                held.reset()
                result = {"held": held.backends}
                ok = set(held.backends) == NAMES
            elif scheduler == "sh":
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1)
                ok = _one_backend(result)
            else:  # dh
                result = await kt.probe(client, "tcp", vip, 80, 12, concurrency=1)
                from_node = await kt.probe(node, "tcp", vip, 80, 12, concurrency=1)
                ok = _one_backend(result) and from_node["names"] == result["names"]
                result = {"client": result, "node": from_node}
            if not ok:
                failures.append(f"{scheduler}: {result}")
    finally:
        proxy.extra = flags
        await asyncio.to_thread(proxy.restart)
    assert not failures, "\n".join(failures)


async def test_cleanup_removes_everything_ipvs_mode_made(kt):
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    await three_backends(kt)
    proxy.stop()
    result = proxy.cleanup(timeout=scaled(60))
    assert result.returncode == 0, result.stdout + result.stderr
    assert ipvs_table(node) == {}
    assert node.ns.run("ip", "link", "show", "kube-ipvs0", check=False).returncode != 0
    sets = node.ns.run("ipset", "list", "-n").stdout.split()
    assert not [s for s in sets if s.startswith("KUBE-")], sets
    nat = node.ns.run("iptables-save", "-t", "nat").stdout
    assert "KUBE-NODE-PORT" not in nat and "KUBE-LOAD-BALANCER" not in nat, nat
