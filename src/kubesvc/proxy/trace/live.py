"""``kubesvc trace`` on a node: read this node's live state through ``kernel/`` and put the walk
and the Kubernetes objects behind it together.

``read_node`` lists the ``kube-proxy`` tables of both families (``nft -j list table`` and
``nft list table``), the ``nat`` and ``filter`` tables of iptables and ip6tables
(``iptables-save``) and the node's own addresses (the kernel's ``fib … type local`` and
``--dst-type LOCAL``). The mode is the one whose rules are there: our nftables table, else
``KUBE-SERVICES`` in iptables' nat table, else userspace mode's ``KUBE-PORTALS-CONTAINER`` with the
portals its proxy published (``userspace.py``, ``kernel/runstate.py``); ``mode`` forces one.
``report`` is pure: the walk (``nftables.trace``, ``iptables.trace`` or ``userspace.walk``) of one
new connection, the Service port its chains name,
each DNAT candidate with its probability, Pod and node (from the Service's EndpointSlices when
the API was read), the endpoints that are not candidates and why (``objects.excluded_because``),
and a verdict:

* ``DNAT``: delivered to the candidates (one of them per connection);
* ``REDIRECT``: to a listener of the userspace proxy (``listener``), which connects to one of
  the candidates;
* ``REJECT`` / ``DROP``: refused, or dropped (a source range, a ``Local`` policy with no local
  endpoint, an unallocated ClusterIP);
* ``NONE``: nothing of ours applied; the packet is routed as it is (not a Service address).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from dataclasses import dataclass, field

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.iptables import Iptables
from kubesvc.kernel.iptables_save import Dump, parse_dump
from kubesvc.kernel.netlink import addresses_async, unique_ips
from kubesvc.kernel.nftables import NFTables
from kubesvc.kernel import ipset as kernel_ipset
from kubesvc.kernel import runstate
from kubesvc.proxy.trace import iptables, ipvs, nftables, objects, userspace

# The stand-in address for "a client outside the cluster" (TEST-NET-3 / the documentation
# prefix: never a node's, a Pod's or a Service's).
EXTERNAL = {4: "203.0.113.1", 6: "2001:db8::1"}


@dataclass
class NodeState:
    tables: dict[int, nftables.Table | None]  # family → the live table (None: absent)
    addresses: list[str]
    dumps: dict[int, Dump | None] = field(default_factory=dict)  # family → iptables' nat and filter
    portals: dict[int, dict | None] = field(default_factory=dict)  # family → the userspace proxy's published state
    ipsets: ipvs.Sets | None = None  # IPVS mode: ``ipset save``
    ipvs_tables: dict[int, dict | None] = field(default_factory=dict)  # family → the IPVS table (None: unreadable)


@dataclass
class Objects:
    """What the API said (all optional: without a kubeconfig only the kernel's names are used)."""

    service: dict | None = None
    slices: list[dict] = field(default_factory=list)
    node: str | None = None
    node_labels: dict = field(default_factory=dict)
    source_pod: str | None = None
    source_ip: str | None = None
    # IPVS mode's rules name no Service: the one the API says owns the address and port
    service_port: dict | None = None


async def read_node(*, netns: str | None = None) -> NodeState:
    tables: dict[int, nftables.Table | None] = {}
    for family in (IPV4, IPV6):
        nft = NFTables(family, netns=netns, in_process=False)
        objs = await nft.list_table()
        tables[family] = nftables.table_from_listing(objs, await nft.list_table_text()) if objs else None
    dumps: dict[int, Dump | None] = {}
    for family in (IPV4, IPV6):
        ipt = Iptables(family, netns=netns)
        try:
            dumps[family] = parse_dump(await ipt.save("nat") + await ipt.save("filter"))
        except (CommandFailed, ValueError):  # no ip6tables here, or a dump we cannot read: not this mode
            dumps[family] = None
    portals = {family: runstate.read(runstate.state_path(userspace.KIND, family, netns)) if userspace.is_userspace(dumps[family])
               else None for family in (IPV4, IPV6)}
    state = NodeState(tables, unique_ips(await addresses_async(netns=netns)), dumps, portals)
    if any(ipvs.is_ipvs(d) for d in dumps.values()):
        state.ipsets = ipvs.Sets(ipvs.parse_ipset_save(await kernel_ipset.save(netns)))
        state.ipvs_tables = await asyncio.to_thread(_read_ipvs, netns)
    return state


def _read_ipvs(netns: str | None) -> dict[int, dict | None]:
    """The IPVS table of each family through the netlink reader (None where it cannot be read:
    no ``ip_vs`` in this kernel)."""
    from kubesvc.kernel.ipvs import NetlinkIpvs
    try:
        reader = NetlinkIpvs(netns)
    except CommandFailed:
        return {IPV4: None, IPV6: None}
    try:
        return {family: reader.dump(family) for family in (IPV4, IPV6)}
    except CommandFailed:
        return {IPV4: None, IPV6: None}
    finally:
        reader.close()


def mode_of(state: NodeState, family: int) -> str:
    """``nftables`` if our table is there, else ``iptables`` if our nat chains are, ``userspace``
    if its portal chains are, else ``none``."""
    if state.tables.get(family) is not None:
        return "nftables"
    dump = state.dumps.get(family)
    if ipvs.is_ipvs(dump):
        return "ipvs"
    if dump is not None and dump.chain("nat", "KUBE-SERVICES") is not None:
        return "iptables"
    return "userspace" if userspace.is_userspace(dump) else "none"


def family_of(ip: str) -> int:
    return IPV6 if ipaddress.ip_address(ip).version == 6 else IPV4


def report(state: NodeState, source: str, dest: str, port: int, protocol: str, *, from_node: bool = False,
           objs: Objects | None = None, mode: str | None = None) -> dict:
    """The JSON form of ``kubesvc trace`` (see the module docstring)."""
    objs = objs or Objects()
    family = family_of(dest)
    mode = mode or mode_of(state, family)
    if mode == "ipvs":
        walk = ipvs.walk(state.dumps.get(family), state.ipsets, state.ipvs_tables.get(family), source, protocol.lower(), dest, port,
                         state.addresses, from_node=from_node)
    elif mode == "userspace":
        walk = userspace.walk(state.dumps.get(family), state.portals.get(family), source, protocol.lower(), dest, port,
                              state.addresses, from_node=from_node)
    elif mode == "iptables":
        walk = iptables.trace(state.dumps.get(family), source, protocol.lower(), dest, port, state.addresses, from_node=from_node)
    else:
        walk = nftables.trace(state.tables.get(family) if mode == "nftables" else None, source, protocol.lower(), dest, port,
                              state.addresses, from_node=from_node)
    chains = [s["chain"] for s in walk.steps if s["rule"] is None]
    service_port = objects.service_port_of(chains, walk.comments, protocol) or (objs.service_port if mode == "ipvs" else None)
    endpoints = objects.slice_endpoints(objs.slices, service_port["port"] if service_port else None)
    by_address = {e["address"]: e for e in endpoints}
    candidates = []
    for endpoint, chance in walk.candidates:
        ip, number = objects.host_port(endpoint)
        ep = by_address.get(ip) or {}
        candidates.append({"endpoint": endpoint, "probability": chance, "pod": ep.get("pod"), "node": ep.get("node"),
                           "slice": ep.get("slice")})
    excluded = []
    if service_port and objs.slices:
        chosen = {objects.host_port(e)[0] for e, _ in walk.candidates}
        spec = (objs.service or {}).get("spec") or {}
        cluster_ips = set(spec.get("clusterIPs") or [spec.get("clusterIP")])
        internal = ipaddress.ip_address(dest).compressed in cluster_ips
        policy = spec.get("internalTrafficPolicy" if internal else "externalTrafficPolicy") or "Cluster"
        any_ready = any(e["ready"] for e in endpoints)
        draining = {objects.host_port(r["endpoint"])[0] for r in (walk.ipvs or {}).get("realServers", ()) if not r["weight"]}
        for ep in endpoints:
            if ep["address"] in chosen or family_of(ep["address"]) != family:
                continue
            reason = objects.excluded_because(ep, any_ready=any_ready, local_policy=policy == "Local", node=objs.node,
                                              node_labels=objs.node_labels)
            if ep["address"] in draining:
                reason += "; its IPVS real server is draining (weight 0: kept for its connections, no new ones)"
            excluded.append({"endpoint": ep["address"], "pod": ep["pod"], "node": ep["node"], "slice": ep["slice"], "reason": reason})
    return {
        "mode": mode,
        "source": {"ip": source, "pod": objs.source_pod, "fromNode": from_node},
        "destination": {"ip": dest, "port": port, "protocol": protocol.upper()},
        "node": objs.node,
        "steps": walk.steps,
        "service": service_port,
        "candidates": candidates,
        "affinity": walk.affinity,
        "masquerade": walk.masquerade,
        "verdict": walk.verdict or "NONE",
        "excluded": excluded,
        **({"listener": walk.listener} if walk.listener is not None else {}),
        **({"ipvs": walk.ipvs} if mode == "ipvs" else {}),
    }


_STICKY_RULE = re.compile(r"ip6? saddr @affinity-\S+ .*dnat (?:ip6? )?to (\S+)")


def compare_probe(rep: dict, kernel: list[dict]) -> dict:
    """The kernel's own trace of a real packet (``kernel/nftrace.py``) beside the walk: the rules
    that matched, in order, on both sides; ``agrees`` when they are the same list. The walk is
    a new client's; a client the kernel already remembers (an element of an ``affinity-…`` set:
    ``ip saddr @affinity-X … dnat to E``) takes that rule instead of the random choice, so its
    trace agrees when it is the walk's up to that rule and E is one of the walk's candidates
    (``sticky``: the endpoint its ClientIP affinity sent it to), and what it matched on later
    hooks ends the walk too."""
    walked = [(s["chain"], s["rule"]) for s in rep["steps"] if s["rule"] is not None]
    traced = [(s["chain"], s["rule"]) for s in kernel if s["rule"] is not None]
    at = next((i for i, (_, rule) in enumerate(traced) if _STICKY_RULE.search(rule)), None) if rep.get("affinity") else None
    if at is not None:
        endpoint = _STICKY_RULE.search(traced[at][1]).group(1)
        candidates = {c["endpoint"] for c in rep.get("candidates") or []}
        after = traced[at + 1:]  # on later hooks (the masquerade), as for any of the candidates
        agrees = traced[:at] == walked[:at] and endpoint in candidates and (not after or walked[-len(after):] == after)
        return {"steps": kernel, "agrees": agrees, "sticky": endpoint}
    return {"steps": kernel, "agrees": bool(traced) and walked == traced}


def compare_probe_iptables(rep: dict, kernel: list[dict]) -> dict:
    """iptables (and userspace) mode's probe (``kernel/xtrace.py``) beside the walk. The kernel
    follows one ``-m statistic`` branch where the walk follows all of them, so the walk agrees
    when every rule the kernel matched is a rule the walk matched, in the same order, and the
    kernel's outcome is the walk's: its DNAT target one of the candidates, or the same
    DROP/REJECT, or neither (``NONE``); in userspace mode the redirect to the walk's listener."""
    walked = [(s["chain"], s["rule"]) for s in rep["steps"] if s["rule"] is not None]
    # (a rule without a target, a comment only, is not a step of the walk: it does nothing)
    traced = [(s["chain"], s["rule"]) for s in kernel if s["rule"] is not None and " -j " in s["rule"]]
    it = iter(walked)
    in_order = all(step in it for step in traced)  # a subsequence: each found after the one before
    verdict, target = "NONE", None
    for s in kernel:
        words = (s["rule"] or "").split()
        if "-j" in words:
            jump = words[words.index("-j") + 1]
            if jump == "DNAT" and "--to-destination" in words:
                verdict, target = "DNAT", words[words.index("--to-destination") + 1]
            elif jump == "REDIRECT" and "--to-ports" in words:
                verdict, target = "REDIRECT", words[words.index("--to-ports") + 1]
            elif jump in ("DROP", "REJECT"):
                verdict = jump
    listener = rep.get("listener")
    if listener is not None and verdict == "DNAT" and target.rpartition(":")[2] == str(listener["proxyPort"]):
        verdict, target = "REDIRECT", str(listener["proxyPort"])  # userspace's host portal: a DNAT to the node's listener
    if listener is not None:
        outcome = verdict == rep["verdict"] == "REDIRECT" and target == str(listener["proxyPort"])
    else:
        outcome = verdict == rep["verdict"] and (target is None or target in {c["endpoint"] for c in rep["candidates"]})
    return {"steps": kernel, "verdict": verdict, "endpoint": target, "agrees": bool(traced) and in_order and outcome}


def text(rep: dict) -> list[str]:
    """The human form: one line per chain entered and per rule that matched, then the outcome."""
    d, s = rep["destination"], rep["source"]
    who = f" (Pod {s['pod']})" if s.get("pod") else (" (this node)" if s.get("fromNode") else "")
    lines = [f"{d['protocol'].lower()} {s['ip']}{who} -> {d['ip']}:{d['port']}   [{rep['mode']}]"]
    hook = chain = None
    for step in rep["steps"]:
        if step["hook"] != hook:
            hook, chain = step["hook"], None
            lines.append(f"  {hook}:")
        if step["rule"] is None:
            chain = step["chain"]
            lines.append(f"    chain {chain}")
            continue
        if step["chain"] != chain:  # back in the chain that jumped
            chain = step["chain"]
            lines.append(f"    chain {chain} (continued)")
        lines.append(f"      matched: {step['rule']}")
    if rep["service"]:
        sp = rep["service"]
        # ServicePortName.String(): the port's name after a colon, nothing for an unnamed port
        port_name = f":{sp['port']}" if sp["port"] else ""
        lines.append(f"  Service port: {sp['namespace']}/{sp['name']}{port_name} ({sp['protocol']})")
    verdict = rep["verdict"]
    listener = rep.get("listener")
    if verdict == "REDIRECT":
        portal = f" (listener of {listener['service']}, {listener['kind']} portal)" if listener["service"] else \
            (" (no listener of the proxy's published portals has it)" if listener["published"] else
             " (the proxy publishes no portals here: not root, or an older proxy)")
        lines.append(f"  redirected to the proxy's port {listener['proxyPort']}{portal}")
        if listener.get("session"):
            sess = listener["session"]
            lines.append(f"  this client's ClientIP session (idle {sess['idleSeconds']:g}s) sends it to {sess['endpoint']}")
        if rep["candidates"]:
            lines.append("  the proxy connects to one of (round robin" + (f", next: {listener['next']}" if listener.get("next") else "") + "):")
    if rep.get("ipvs"):
        vs = rep["ipvs"]
        persistent = f", persistent {vs['persistentSeconds']}s" if vs["persistentSeconds"] is not None else ""
        lines.append(f"  IPVS virtual server {vs['virtualServer']}, scheduler {vs['scheduler']}{persistent}" +
                     ("" if vs["realServers"] else ": no real server (ICMP port unreachable)"))
        lines += [f"    real server {r['endpoint']} weight {r['weight']}" + (" (draining: no new connections)" if not r["weight"] else "")
                  for r in vs["realServers"]]
    if verdict in ("DNAT", "REDIRECT") and rep["candidates"]:
        if verdict == "DNAT":
            lines.append("  delivered to one of:")
        for c in rep["candidates"]:
            behind = ", ".join(x for x in (f"Pod {c['pod']}" if c["pod"] else "", f"node {c['node']}" if c["node"] else "",
                                           f"slice {c['slice']}" if c["slice"] else "") if x)
            lines.append(f"    {c['endpoint']:<24} {c['probability']:6.1%}" + (f"   {behind}" if behind else ""))
    elif verdict == "NONE":
        lines.append("  not ours: no rule of the proxy applies; the packet is routed unchanged")
    else:
        lines.append(f"  verdict: {verdict}")
    if rep["affinity"]:
        lines.append("  ClientIP affinity: a client seen before goes back to its endpoint")
    if verdict in ("DNAT", "REDIRECT") and rep["candidates"]:
        lines.append("  masqueraded (the endpoint sees a node address)" if rep["masquerade"] else "  not masqueraded (the endpoint sees the client's address)")
    for e in rep["excluded"]:
        lines.append(f"  excluded {e['endpoint']}" + (f" (Pod {e['pod']})" if e["pod"] else "") + f": {e['reason']}")
    if "probe" in rep:
        probe = rep["probe"]
        same = f"a returning client: its ClientIP affinity sent it to {probe['sticky']}" if probe.get("sticky") else \
            "the same rules matched" if "verdict" not in probe else \
            f"the rules it matched are the walk's, and so is its outcome ({probe['verdict']}" + (f" to {probe['endpoint']})" if probe["endpoint"] else ")")
        lines.append("  the kernel's trace of a real packet " + (f"agrees: {same}" if probe["agrees"] else "differs:"))
        if not probe["agrees"]:
            lines += [f"    {s['chain']}: {s['rule']} (verdict {s['verdict']})" for s in probe["steps"] if s["rule"] is not None]
    return lines
