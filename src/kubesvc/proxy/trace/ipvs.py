"""``kubesvc trace`` in IPVS mode: iptables and ipsets mark and filter, IPVS picks.

How a new connection to a Service crosses a node in IPVS mode (``proxy/ipvs/rules.py``; upstream
``pkg/proxy/ipvs``), in the kernel's hook order:

1. **nat PREROUTING** (the node's own connections: **nat OUTPUT**) → ``KUBE-SERVICES``: no DNAT
   here, only ``-m set --match-set KUBE-CLUSTER-IP dst,dst`` and friends that mark the packet
   for masquerade (``KUBE-MARK-MASQ``) and ``ACCEPT``;
2. every Service address is bound to ``kube-ipvs0``, so routing says *local*: **filter INPUT**
   (priority 0): ``KUBE-PROXY-FIREWALL`` (LoadBalancer source ranges: ``DROP``),
   ``KUBE-NODE-PORT`` (health check ports), ``KUBE-IPVS-FILTER`` (``REJECT`` a new connection
   to a port of a Service address that is no virtual server);
3. **IPVS** on LOCAL_IN (priority 99, after filter; for the node's own connections on LOCAL_OUT
   at -99, *before* filter OUTPUT): the virtual server (address, protocol, port) picks a real
   server by its scheduler among those of weight > 0 (weight 0: draining, graceful
   termination) and NATs to it; ``persistent`` (ClientIP affinity) sends a client back to its
   real server within the timeout. A virtual server with no real server to pick answers ICMP
   port unreachable (``ip_vs_leave``): the client sees a refusal, a ``REJECT``;
4. **nat POSTROUTING** with the real server as destination: ``KUBE-POSTROUTING`` masquerades
   what was marked and hairpin traffic (``KUBE-LOOP-BACK``: endpoint, port, and source the
   endpoint itself).

The walk reads the node's ``iptables-save`` (``trace/iptables.py``, which matches sets through
``Sets``), ``ipset save`` and the IPVS table through the project's netlink reader
(``kernel/ipvs.py``, ``NetlinkIpvs.dump``; ``kernel/fake/ipvs.py`` in tests). Each candidate's
probability is its share of the weights (``rr`` ignores the weights' size; a hashing scheduler,
``sh``/``dh``/``mh``, sends one client always to the same one: the share is over many clients).
"""

from __future__ import annotations

import ipaddress

from kubesvc.kernel.iptables_save import Dump
from kubesvc.proxy.trace.iptables import _Tracer
from kubesvc.proxy.trace.nftables import TEST_LOCAL, Walk, _canonical

FLAG_PERSISTENT = 0x1  # IP_VS_SVC_F_PERSISTENT
RR_LIKE = ("rr",)  # schedulers that rotate over every real server of weight > 0, whatever its size
DIMENSIONS = {"hash:ip": ("ip",), "hash:ip,port": ("ip", "port"), "hash:ip,port,ip": ("ip", "port", "ip"),
              "hash:ip,port,net": ("ip", "port", "net"), "bitmap:port": ("port",)}


def parse_ipset_save(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``ipset save`` → {set name: (type, members as listed)}."""
    sets: dict[str, tuple[str, set[str]]] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "create":
            sets[words[1]] = (words[2], set())
        elif len(words) >= 3 and words[0] == "add" and words[1] in sets:
            sets[words[1]][1].add(words[2])
    return {name: (kind, frozenset(members)) for name, (kind, members) in sets.items()}


class Sets:
    """The node's ipsets, matched as ``-m set --match-set NAME FLAGS`` matches a packet."""

    def __init__(self, sets: dict[str, tuple[str, frozenset[str]]]):
        self.sets = sets

    def matches(self, name: str, flags: str, packet: _Tracer) -> bool:
        found = self.sets.get(name)
        if found is None:
            return False  # (a rule naming a missing set cannot exist in the kernel)
        kind, members = found
        dims = DIMENSIONS.get(kind)
        if dims is None:
            raise ValueError(f"ipset type {kind} of {name} is not modelled")
        wanted = flags.split(",")
        return any(self._member(dims, wanted, member, packet) for member in members)

    @staticmethod
    def _member(dims, flags, member: str, packet: _Tracer) -> bool:
        parts = member.split(",")
        for dim, flag, part in zip(dims, flags, parts):
            if dim in ("ip", "net"):
                ip = ipaddress.ip_address(packet.source if flag == "src" else packet.dest)
                net = ipaddress.ip_network(part, strict=False)
                if ip.version != net.version or ip not in net:
                    return False
            else:  # [proto:]port; only destination ports are ever matched here
                proto, sep, number = part.rpartition(":")
                if flag == "src" or (sep and proto != packet.protocol) or int(number) != int(packet.port):
                    return False
        return len(parts) >= len(dims)


def describe(key, service, dests) -> str:
    """One virtual server as ``ipvsadm -Ln`` shows it, on one line."""
    persistent = f" persistent {service.timeout}" if service.flags & FLAG_PERSISTENT else ""
    reals = ", ".join(f"{d.address}:{d.port} weight {d.weight}" for d in dests.values()) or "no real servers"
    return f"{key.protocol} {key.address}:{key.port} {service.scheduler}{persistent} -> {reals}"


def _shares(scheduler: str, dests) -> list[tuple[str, float]]:
    live = [d for d in dests.values() if d.weight > 0]
    total = len(live) if scheduler in RR_LIKE else sum(d.weight for d in live)
    out = []
    for d in live:
        endpoint = f"[{d.address}]:{d.port}" if ":" in d.address else f"{d.address}:{d.port}"
        out.append((endpoint, round((1 if scheduler in RR_LIKE else d.weight) / total, 6)))
    return out


def walk(dump: Dump | None, sets: Sets | None, table, source: str, protocol: str, dest: str, port: int | str, node_ips=(), *,
         from_node: bool = False) -> Walk:
    """The walk of a new connection (see the module docstring). ``table``: the IPVS table of
    this family as ``NetlinkIpvs.dump`` returns it ({ServiceKey: (Service, {rs: Destination})})."""
    local = frozenset(_canonical(ip) for ip in (*TEST_LOCAL, *node_ips))
    t = _Tracer(dump or Dump(), _canonical(source), protocol, _canonical(dest), str(port), local, sets=sets or Sets({}))
    verdict, ipvs = "", None
    if dump is None or dump.table("nat") is None:
        return Walk([], [], False, "", [], [], [], "")
    t.hook = "output" if from_node else "prerouting"
    t.run_chain("nat", "OUTPUT" if from_node else "PREROUTING")

    def run_filter(chain: str) -> str | None:
        if dump.chain("filter", chain) is None:
            return None
        t.hook = chain.lower()
        return t.run_chain("filter", chain)

    def run_ipvs(hook: str) -> None:
        nonlocal verdict, ipvs
        found = next(((k, v) for k, v in (table or {}).items() if _canonical(k.address) == t.dest and k.port == int(t.port)
                      and k.protocol.lower() == protocol), None)
        if found is None:
            return
        key, (service, dests) = found
        t.steps.append({"hook": hook, "chain": "IPVS", "rule": None})
        text = describe(key, service, dests)
        t.steps.append({"hook": hook, "chain": "IPVS", "rule": text})
        t.matches.append(text)
        ipvs = {"virtualServer": str(key), "scheduler": service.scheduler,
                "persistentSeconds": service.timeout if service.flags & FLAG_PERSISTENT else None,
                "realServers": [{"endpoint": f"{d.address}:{d.port}", "weight": d.weight, "active": d.active,
                                 "inactive": d.inactive} for d in dests.values()]}
        if service.flags & FLAG_PERSISTENT:
            t.affinity.append(f"{key} persistent {service.timeout}s")
        t.candidates = _shares(service.scheduler, dests)
        if not t.candidates:  # ip_vs_leave: ICMP port unreachable
            verdict = "REJECT"
            t.outputs.append("REJECT")
            return
        t.outputs += [e for e, _ in t.candidates]
        first = t.candidates[0][0]
        t.dest, t.port, t.dnatted = _canonical(first.rpartition(":")[0].strip("[]")), first.rpartition(":")[2], True

    if from_node:
        if t.dest in local:
            run_ipvs("output")
        ended = run_filter("OUTPUT")
    else:
        ended = run_filter("INPUT" if t.dest in local else "FORWARD")
        if ended not in ("drop", "reject") and t.dest in local:
            run_ipvs("input")
    if ended in ("drop", "reject"):
        verdict = ended.upper()
    elif verdict != "REJECT" and (from_node or t.dnatted or t.dest not in local):
        t.hook = "postrouting"
        t.run_chain("nat", "POSTROUTING")
    candidates = [] if verdict else t.candidates
    verdict = verdict or ("DNAT" if candidates else "")
    return Walk(t.steps, candidates, t.masquerade and bool(candidates), verdict, t.affinity, t.matches, t.comments,
                ", ".join(t.outputs), ipvs=ipvs)


def is_ipvs(dump: Dump | None) -> bool:
    """Whether ``dump`` (iptables-save) holds IPVS mode's filter chain."""
    return dump is not None and dump.chain("filter", "KUBE-IPVS-FILTER") is not None
