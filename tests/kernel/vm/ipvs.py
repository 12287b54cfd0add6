"""What the IPVS tests (tests/kernel/vm/) share: the kernel's IPVS table read back with the
administrator's tools (``ipvsadm -Ln``, ``/proc/net/ip_vs_conn``, in the node's namespace), not
the proxy's own netlink code; three backends behind a Service; the proxy flags.

Each test's Pods serve ``tcp`` 8080 (answer and close) and an ``echo`` port 9090 whose
connections stay open (tests/support/held_connection.py), so a test can hold established
connections through a virtual server while the endpoints change underneath.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field

from tests.kernel.helpers import all_from
from tests.support.netns import wait_until
from tests.support.slowdown import scaled

MODES = ["ipvs"]
NODE_COUNT = 1
# The periodic resync: drift repair and the re-check of draining real servers. Each one starts
# the save and restore tools (iptables, ip6tables, ipset: ~2 s of emulated CPU), so every 30 s
# rather than 10; the two tests that wait for one allow for the longer period.
SYNC_PERIOD = 30
TCP_TIMEOUT, UDP_TIMEOUT = 600, 11  # IPVS's defaults: 900 s, 300 s
PROXY_FLAGS = ("--ipvs-min-sync-period=1s", f"--ipvs-sync-period={SYNC_PERIOD}s", "--ipvs-scheduler=rr",
               f"--ipvs-tcp-timeout={TCP_TIMEOUT}s", f"--ipvs-udp-timeout={UDP_TIMEOUT}s", "--v=2")
ECHO = 9090
PORTS = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
         {"name": "echo", "port": ECHO, "targetPort": ECHO, "protocol": "TCP"}]
NAMES = {"web-a", "web-b", "web-c"}
POLL_INTERVAL = 1.0  # seconds between two looks at the kernel's IPVS table (wait_for_kernel)
# Per attempt, for a probe every attempt of which must be answered: the probe's 1 s default is
# native time (at load 6 one UDP answer of 30 took longer in the VM, and the test failed).
ANSWER_TIMEOUT = scaled(1)


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
    and the proxy's log. Polled every second: each look is an ``ipvsadm`` process, about half a
    second of emulated CPU."""
    (node,) = kt.nodes
    try:
        return await asyncio.to_thread(wait_until, predicate, scaled(timeout), what, POLL_INTERVAL)
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- ipvsadm -Ln ---\n{node.ns.run('ipvsadm', '-Ln').stdout}\n"
                             f"{kt.env.diagnostics(rules=False)}") from None


def all_answered(result: dict) -> bool:
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
