"""Telling pod traffic from everything else (upstream ``pkg/proxy/util/localdetector.go``).

kube-proxy masquerades ClusterIP traffic that does not come from a pod (so replies return
through this node) and lets pod traffic to an ``externalTrafficPolicy: Local`` Service
short-circuit to any endpoint. "From a pod" is decided by ``--detect-local-mode``:

=====================  ============================  ==============================
mode                   iptables (IfLocal/IfNotLocal)  nftables
=====================  ============================  ==============================
ClusterCIDR (default)  ``-s cidr`` / ``! -s cidr``    ``ip saddr cidr`` / ``ip saddr != cidr``
NodeCIDR               same, with the Node's podCIDR  same
BridgeInterface        ``-i br`` / ``! -i br``        ``iif br`` / ``iif != br``
InterfaceNamePrefix    ``-i pfx+`` / ``! -i pfx+``    ``iif pfx*`` / ``iif != pfx*``
=====================  ============================  ==============================

With no CIDR known the detector is not implemented: no "not from a pod → masquerade" rule
and no pod short-circuit in external chains (upstream's no-op detector).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesvc.util.ipnet import parse_cidr_go
from kubesvc.proxy.types import IPV6

CLUSTER_CIDR, NODE_CIDR, BRIDGE_INTERFACE, INTERFACE_NAME_PREFIX = "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"
DETECT_LOCAL_MODES = (CLUSTER_CIDR, NODE_CIDR, BRIDGE_INTERFACE, INTERFACE_NAME_PREFIX)


@dataclass(frozen=True, slots=True)
class LocalDetector:
    """``cidr`` for the CIDR modes, ``interface`` (a name, or a prefix) for the others."""

    cidr: str = ""
    interface: str = ""
    prefix: bool = False
    family: int = 4

    @property
    def implemented(self) -> bool:
        return bool(self.cidr or self.interface)

    def iptables_if_local(self) -> list[str]:
        if self.cidr:
            return ["-s", self.cidr]
        if self.interface:
            return ["-i", self.interface + ("+" if self.prefix else "")]
        return []

    def iptables_if_not_local(self) -> list[str]:
        match = self.iptables_if_local()
        return ["!", *match] if match else []

    def nft_if_local(self) -> str:
        if self.cidr:
            return f"{'ip6' if self.family == IPV6 else 'ip'} saddr {self.cidr}"
        if self.interface:
            return f"iif {self.interface}{'*' if self.prefix else ''}"
        return ""

    def nft_if_not_local(self) -> str:
        if self.cidr:
            return f"{'ip6' if self.family == IPV6 else 'ip'} saddr != {self.cidr}"
        if self.interface:
            return f"iif != {self.interface}{'*' if self.prefix else ''}"
        return ""


NO_OP_DETECTOR = LocalDetector()


def new_local_detector(mode: str, family: int, cluster_cidrs: list[str], node_pod_cidrs: list[str],
                       bridge_interface: str = "", interface_name_prefix: str = "") -> LocalDetector:
    """The detector for one family; CIDRs of the other family are ignored."""
    def of_family(cidrs: list[str]) -> str:
        for cidr in cidrs:
            net = parse_cidr_go(cidr.strip())  # Go's sloppy forms (010.0.0.0/8); a mapped IPv4 CIDR is IPv4
            if net is not None and net.version == family:
                return str(net)
        return ""

    if mode in ("", CLUSTER_CIDR):
        return LocalDetector(cidr=of_family(cluster_cidrs), family=family)
    if mode == NODE_CIDR:
        return LocalDetector(cidr=of_family(node_pod_cidrs), family=family)
    if mode == BRIDGE_INTERFACE:
        return LocalDetector(interface=bridge_interface, family=family)
    if mode == INTERFACE_NAME_PREFIX:
        return LocalDetector(interface=interface_name_prefix, prefix=True, family=family)
    raise ValueError(f"unknown detect-local-mode: {mode!r}")
