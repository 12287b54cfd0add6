"""Pod traffic leaving the cluster network is masqueraded; Pod-to-Pod traffic keeps its source.

Flannel's ``--ip-masq`` rules (``pkg/trafficmngr/nftables``, the same four as its iptables
``MasqRules``), per family, with ``<cluster>`` the cluster CIDR and ``<pods>`` this node's podCIDR::

    ip saddr <cluster> ip daddr <cluster> return                       # Pod to Pod: untouched
    ip saddr <cluster> ip daddr != 224.0.0.0/4 masquerade fully-random # Pod to the world
    ip saddr != <cluster> ip daddr <pods> return                        # to our own Pods: untouched
    ip saddr != <cluster> ip daddr <cluster> masquerade fully-random   # the node to remote Pods

The last one makes a remote Pod answer the node through the Pod network: the node's packet to
another node's Pod leaves with a source that node can route back (in ``vxlan`` mode the VXLAN
device's VTEP address). Multicast is never masqueraded.

They live in a table of our own, ``kubesvc-pod-network`` (``ip`` and ``ip6``), in a NAT chain
at the ``postrouting`` hook, priority ``srcnat`` (100). Each apply rewrites the whole table in
one transaction (``add table``, ``flush table``, chain, rules), so a restarted agent replaces
what an earlier one left; ``stop`` deletes the table. kube-proxy's masquerading (its own table,
marked packets) is independent: whichever NAT rule a connection meets first decides it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

TABLE = "kubesvc-pod-network"
CHAIN = "postrouting"
SRCNAT_PRIORITY = 100
MULTICAST = {4: "224.0.0.0/4", 6: "ff00::/8"}
FAMILY = {4: "ip", 6: "ip6"}


def families(cluster_cidrs: Iterable[str]) -> list[int]:
    return sorted({ipaddress.ip_network(c).version for c in cluster_cidrs})


def rules(version: int, cluster_cidrs: Iterable[str], pod_cidrs: Iterable[str]) -> list[str]:
    """The rule bodies of one family (see the module docstring), one block per cluster CIDR."""
    match = FAMILY[version]
    clusters = [c for c in map(ipaddress.ip_network, cluster_cidrs) if c.version == version]
    pods = [p for p in map(ipaddress.ip_network, pod_cidrs) if p.version == version]
    found = []
    for cluster in clusters:
        found += [f"{match} saddr {cluster} {match} daddr {cluster} return",
                  f"{match} saddr {cluster} {match} daddr != {MULTICAST[version]} masquerade fully-random"]
        found += [f"{match} saddr != {cluster} {match} daddr {pod} return" for pod in pods]
        found.append(f"{match} saddr != {cluster} {match} daddr {cluster} masquerade fully-random")
    return found


def transaction(version: int, cluster_cidrs: Iterable[str], pod_cidrs: Iterable[str]) -> str:
    """The ``nft -f`` text that makes the table hold exactly these rules."""
    family = FAMILY[version]
    lines = [f"add table {family} {TABLE}", f"flush table {family} {TABLE}",
             f"add chain {family} {TABLE} {CHAIN} {{ type nat hook postrouting priority {SRCNAT_PRIORITY} ; }}"]
    lines += [f"add rule {family} {TABLE} {CHAIN} {rule}" for rule in rules(version, cluster_cidrs, pod_cidrs)]
    return "\n".join(lines) + "\n"
