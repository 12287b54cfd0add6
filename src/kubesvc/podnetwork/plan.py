"""What this node's kernel must hold so its Pods reach every other node's Pods: pure decisions.

Two modes, chosen with ``--pod-network``:

``routes`` (flannel's ``host-gw`` backend, kube-router's direct routes): nodes share one L2
segment, so each other node's podCIDR is routed through that node's InternalIP, which a
connected route covers::

    10.244.3.0/24 via 192.168.77.13

A node whose address is on no subnet of ours cannot be a next hop (the kernel refuses it:
``Network is unreachable``); like kube-router without its overlay, we leave it out and say so
(:attr:`Desired.unreachable`).

``vxlan`` (flannel's ``vxlan`` backend): nodes may sit behind routers. Every node has a VXLAN
device (``kernel.vxlan``) whose address is the first address of its podCIDR (the *VTEP
address*, ``10.244.3.0``), and publishes the device's MAC in its own Node's annotations, as
flannel's Kubernetes subnet manager does::

    flannel.alpha.coreos.com/backend-type: vxlan
    flannel.alpha.coreos.com/backend-data: {"VNI":1,"VtepMAC":"02:..."}
    flannel.alpha.coreos.com/public-ip: 192.168.88.13

For each other node that has published its VtepMAC, three entries (flannel's
``handleSubnetEvents``): a permanent neighbour (VTEP address -> VtepMAC), an FDB entry (VtepMAC
-> public IP, where the outer UDP packet goes) and an ``onlink`` route of its podCIDR via its
VTEP address on the device. A node without a VtepMAC yet gets nothing until it has one. The
device's MTU is the uplink's minus 50 (``kernel.vxlan.VXLAN_OVERHEAD``), and so is every Pod
interface's: a full-size Pod packet must still fit once encapsulated.

VXLAN here is IPv4 (flannel runs a second device, ``flannel-v6.1``, for IPv6; we do not): the
IPv6 podCIDR of a dual-stack node is carried by ``routes`` only.

The VtepMAC is derived from the node's name (locally administered), not left to the kernel:
an agent that restarts recreates the same MAC, so the entries the other nodes hold for it stay
valid meanwhile (flannel gets the same effect by reusing a device that survived).

Everything here is a function of the Node objects, this node's name and what the kernel holds:
``peers``, ``desired``, then the operations that turn what is into what should be
(``route_ops``, ``neighbour_ops``, ``fdb_ops``): a node that left loses its entries, a node
whose address, podCIDR or VtepMAC changed is re-programmed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubesvc.kernel.routes import DeleteRoute, PodRoute, ReplaceRoute
from kubesvc.kernel.vxlan import DEFAULT_PORT, DEFAULT_VNI, VXLAN_OVERHEAD, DelFdb, DelNeigh, ReplaceFdb, ReplaceNeigh, VxlanDevice

MODES = ("none", "routes", "vxlan")
DEVICE = f"kubesvc.{DEFAULT_VNI}"

ANNOTATION_PREFIX = "flannel.alpha.coreos.com/"
BACKEND_TYPE = ANNOTATION_PREFIX + "backend-type"
BACKEND_DATA = ANNOTATION_PREFIX + "backend-data"
PUBLIC_IP = ANNOTATION_PREFIX + "public-ip"
SUBNET_MANAGER = ANNOTATION_PREFIX + "kube-subnet-manager"
BACKEND_OF_MODE = {"routes": "host-gw", "vxlan": "vxlan"}


@dataclass(frozen=True)
class Peer:
    """Another node as the Pod network sees it: the address to reach it at (its public-ip
    annotation, else its first InternalIP of each family), its podCIDRs and (vxlan) VtepMAC."""

    name: str
    ips: tuple[str, ...]
    pod_cidrs: tuple[str, ...]
    vtep_mac: str | None = None

    def ip_of(self, version: int) -> str | None:
        return next((ip for ip in self.ips if ipaddress.ip_address(ip).version == version), None)


@dataclass(frozen=True)
class Desired:
    """What the kernel should hold: our routes, and on the VXLAN device ``{VTEP ip: MAC}``
    neighbours and ``{MAC: public ip}`` FDB entries; ``unreachable`` names the peers left out
    (with why)."""

    routes: frozenset[PodRoute] = frozenset()
    neighbours: Mapping[str, str] = field(default_factory=dict)
    fdb: Mapping[str, str] = field(default_factory=dict)
    unreachable: tuple[str, ...] = ()


def _valid_cidrs(values: Iterable[object]) -> tuple[str, ...]:
    found = []
    for value in values:
        try:
            found.append(str(ipaddress.ip_network(str(value))))
        except ValueError:
            continue
    return tuple(found)


def _valid_ip(value: object) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def vtep_mac_of(annotations: Mapping[str, str]) -> str | None:
    """The VtepMAC of flannel's backend-data annotation (None when absent, not vxlan or malformed)."""
    if annotations.get(BACKEND_TYPE) != "vxlan":
        return None
    try:
        data = json.loads(annotations.get(BACKEND_DATA) or "")
    except ValueError:
        return None
    mac = data.get("VtepMAC") if isinstance(data, dict) else None
    if not isinstance(mac, str) or len(mac.split(":")) != 6:
        return None
    try:
        return ":".join(f"{int(part, 16):02x}" for part in mac.split(":"))
    except ValueError:
        return None


def peer_of(node: Mapping) -> Peer:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    annotations = meta.get("annotations") or {}
    internal = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
    ips: list[str] = []
    public = _valid_ip(annotations.get(PUBLIC_IP)) if PUBLIC_IP in annotations else None
    for ip in [public, *map(_valid_ip, internal)]:
        if ip and all(ipaddress.ip_address(ip).version != ipaddress.ip_address(have).version for have in ips):
            ips.append(ip)
    cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    return Peer(meta.get("name", ""), tuple(ips), _valid_cidrs(cidrs), vtep_mac_of(annotations))


def peers(nodes: Iterable[Mapping], self_name: str) -> list[Peer]:
    """Every other node, by name."""
    return sorted((peer_of(n) for n in nodes if (n.get("metadata") or {}).get("name") != self_name), key=lambda p: p.name)


def vtep_address(pod_cidr: str) -> str:
    """A node's VTEP address: the first address of its podCIDR (flannel gives the device the
    subnet's network address as a /32)."""
    return str(ipaddress.ip_network(pod_cidr).network_address)


def vtep_mac(node_name: str) -> str:
    """This node's VtepMAC: locally administered unicast, from its name (stable across restarts)."""
    digest = hashlib.sha256(f"kubesvc-vtep {node_name}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def in_networks(ip: str, networks: Iterable[str]) -> bool:
    address = ipaddress.ip_address(ip)
    return any(address.version == n.version and address in n for n in map(ipaddress.ip_network, networks))


def desired(mode: str, others: Iterable[Peer], local_networks: Iterable[str] = (), device: str = DEVICE) -> Desired:
    """The routes (and for vxlan the neighbours and FDB entries) for reaching ``others``.
    ``local_networks``: the subnets of the uplink (``routes`` only routes through addresses on them)."""
    local_networks = list(local_networks)
    routes: set[PodRoute] = set()
    neighbours: dict[str, str] = {}
    fdb: dict[str, str] = {}
    unreachable: list[str] = []
    for peer in others:
        for cidr in peer.pod_cidrs:
            version = ipaddress.ip_network(cidr).version
            ip = peer.ip_of(version)
            if mode == "routes":
                if ip is None:
                    unreachable.append(f"{peer.name}: no IPv{version} address for podCIDR {cidr}")
                elif not in_networks(ip, local_networks):
                    unreachable.append(f"{peer.name}: {ip} is not on this node's network (routes mode needs one L2 segment)")
                else:
                    routes.add(PodRoute(cidr, ip))
            elif mode == "vxlan" and version == 4:
                if ip is None or peer.vtep_mac is None:
                    unreachable.append(f"{peer.name}: no {'IPv4 address' if ip is None else 'VtepMAC'} published yet")
                    continue
                vtep = vtep_address(cidr)
                routes.add(PodRoute(cidr, vtep, device, True))
                neighbours[vtep] = peer.vtep_mac
                fdb[peer.vtep_mac] = ip
    return Desired(frozenset(routes), neighbours, fdb, tuple(unreachable))


def route_ops(current: Iterable[PodRoute], want: Iterable[PodRoute]) -> tuple[list[ReplaceRoute], list[DeleteRoute]]:
    """The routes to replace (missing or different) and to delete (a destination no longer wanted)."""
    current, want = set(current), set(want)
    wanted_dsts = {r.dst for r in want}
    return ([ReplaceRoute(r) for r in sorted(want - current)],
            [DeleteRoute(r.dst) for r in sorted(current) if r.dst not in wanted_dsts])


def neighbour_ops(dev: str, current: Mapping[str, str], want: Mapping[str, str]) -> tuple[list[ReplaceNeigh], list[DelNeigh]]:
    return ([ReplaceNeigh(dev, ip, mac) for ip, mac in sorted(want.items()) if current.get(ip, "").lower() != mac.lower()],
            [DelNeigh(dev, ip) for ip in sorted(current) if ip not in want])


def fdb_ops(dev: str, current: Mapping[str, str], want: Mapping[str, str]) -> tuple[list[ReplaceFdb], list[DelFdb]]:
    current = {mac.lower(): ip for mac, ip in current.items()}
    return ([ReplaceFdb(dev, mac, ip) for mac, ip in sorted(want.items()) if current.get(mac.lower()) != ip],
            [DelFdb(dev, mac, ip) for mac, ip in sorted(current.items()) if mac not in {m.lower() for m in want}])


def sync_ops(mode: str, want: Desired, routes: Iterable[PodRoute], neighbours: Mapping[str, str], fdb: Mapping[str, str],
             device: str = DEVICE) -> list:
    """One plan, in flannel's order: a new node's neighbour and FDB entries before its route (the
    route is usable the moment it exists), a leaving node's route before its entries."""
    replace_routes, delete_routes = route_ops(routes, want.routes)
    if mode != "vxlan":
        return [*delete_routes, *replace_routes]
    add_neigh, del_neigh = neighbour_ops(device, neighbours, want.neighbours)
    add_fdb, del_fdb = fdb_ops(device, fdb, want.fdb)
    return [*delete_routes, *del_neigh, *del_fdb, *add_neigh, *add_fdb, *replace_routes]


def vxlan_device(node_name: str, local_ip: str, uplink: str, uplink_mtu: int, device: str = DEVICE, vni: int = DEFAULT_VNI,
                 port: int = DEFAULT_PORT) -> VxlanDevice:
    return VxlanDevice(device, vni, local_ip, uplink, port, uplink_mtu - VXLAN_OVERHEAD, vtep_mac(node_name))


def pod_mtu(mode: str, uplink_mtu: int) -> int | None:
    """The MTU of the Pods' interfaces: the uplink's minus the VXLAN overhead in ``vxlan`` mode;
    None (the kernel's default) otherwise."""
    return uplink_mtu - VXLAN_OVERHEAD if mode == "vxlan" else None


def self_annotations(mode: str, public_ip: str, mac: str | None, vni: int = DEFAULT_VNI) -> dict[str, str]:
    """What this node publishes on its own Node (flannel's annotations)."""
    found = {BACKEND_TYPE: BACKEND_OF_MODE[mode], PUBLIC_IP: public_ip, SUBNET_MANAGER: "true"}
    found[BACKEND_DATA] = json.dumps({"VNI": vni, "VtepMAC": mac}, separators=(",", ":")) if mode == "vxlan" else "null"
    return found
