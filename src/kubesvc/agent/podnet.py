"""The Pod network: what kubelet gets from a CNI ``bridge`` plugin with ``host-local`` IPAM.

Kubernetes leaves Pod networking to a plugin. The classic single-node answer (kubelet's old
built-in ``kubenet``, and the reference CNI plugins it wrapped) is:

* **bridge**: one Linux bridge per node (kubenet's ``cbr0``) holding the *gateway*, the first
  address of the node's ``spec.podCIDR``, with the podCIDR's prefix length, so the node has a
  connected route to every Pod. For each Pod, a veth pair: one end becomes the Pod's ``eth0``
  inside the Pod's own network namespace, the other stays on the node as a bridge port.
* **host-local** IPAM: addresses are handed out from the podCIDR and remembered on disk, one
  file per allocated address named after the address and holding its owner
  (``/var/lib/cni/networks/<network>/10.244.1.5``), plus ``last_reserved_ip.<range index>``.
  The next allocation starts *after* the last one and wraps round (round robin), so an address
  just released is not handed to the next Pod while clients may still hold it; the network,
  gateway and (IPv4) broadcast addresses are never handed out; a full range fails with
  ``no IP addresses available in range set: <first>-<last>``.

We do the same, with one deliberate difference in the Pod: its address is a ``/32`` (``/128``)
on ``eth0``, not ``/24``, with two routes::

    <gateway> dev eth0 scope link         # the gateway is on this wire (not inside a /32)
    default via <gateway> dev eth0        # everything else, even a bridge neighbour, via the node

so a Pod reaches even the Pod next to it on the bridge through the node's IP stack, where the
proxy's rules are (the Calico model, and the layout tests/support/netns.py builds). With a /24
the two Pods would talk directly across the bridge, and a Service connection between them would
need ``br_netfilter`` to be un-DNATed on the way back. For this to hold, the node must not tell a
Pod the shortcut: a router forwarding a packet out of the interface it came in on sends an ICMP
redirect ("send to 10.244.1.11 directly"), so ``send_redirects`` is 0 (``all``, ``default``,
the bridge, each veth). IPv6 needs no such switch: a Pod only believes a redirect from its
current next hop's link-local address, and its next hop is the gateway's global address.
The node also forwards (``ip_forward``, and IPv6 ``forwarding`` for a second, IPv6 podCIDR:
dual stack), and ``rp_filter`` is off on the bridge and ``all`` (as the test harness does).

The bridge gets a fixed MAC address at creation (locally administered, derived from its name and
podCIDRs). Without one, Linux gives a bridge the lowest MAC of its ports and changes it when that
port leaves: every Pod's ARP entry for the gateway would then point at a vanished address for
the seconds ARP takes to notice.

Names are deterministic, so a restarted agent finds what it made: the Pod's namespace is
``<netns_prefix><pod uid>`` (``/run/netns/kubesvc-<uid>``), the node end of its veth is
``veth`` + 11 hex digits of sha256(uid) (15 characters, the kernel's limit). Every link is
created in the agent's own namespace, the Pod's end born in the Pod's namespace
(``link add vethX type veth peer name eth0 netns kubesvc-<uid>``); addresses and routes inside
the Pod are set over a netlink socket opened inside it. The agent must share the host's *mount*
namespace: a namespace named by ``ip netns add`` is a bind mount under /run/netns, and from inside
``ip netns exec`` (a private mount namespace) that mount would stay invisible to everyone else;
enter a node's namespace with ``nsenter --net=/run/netns/NODE`` or ``setns(2)`` instead.

What lives under ``state_dir`` (so ``kubesvc down --data-dir`` can undo everything without
knowing the podCIDR)::

    podnet.json                 bridge, netns prefix, the node's namespace name (if it has
                                one), podCIDRs, whether we created the bridge or which
                                addresses we added to someone else's
    networks/<bridge>/<ip>      the uid of the Pod holding <ip> (host-local's layout)
    networks/<bridge>/last_reserved_ip.<n>   the last address handed out from podCIDR n

Decisions are pure functions (names, :func:`next_free_ip`, bridge address plan, the link,
address and route operations, sysctls); the I/O shell goes through the kernel doors it is given
(``NodeNetwork.kernel``, a ``NodeKernel``): each plan to rtnetlink (``kernel.links``, pyroute2,
one socket per plan, no process), sysctls to ``kernel.sysctl``, namespaces and their processes to
``kernel.netns``. Like a CNI runtime, the caller retries a failed :func:`add_pod` (it completes
what exists) or calls :func:`remove_pod` (it deletes what exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from kubesvc.kernel import links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel.links import (AddBridge, AddNetns, AddVeth, Address, DelAddress, DelLink, DelNetns, LinkInfo, Op, Route, SetHairpin,
                                  SetUp)
from kubesvc.kernel.sysctl import Sysctl, SysctlFailed

POD_IFNAME = "eth0"
RECORD_FILE = "podnet.json"
LAST_RESERVED = "last_reserved_ip"
IFNAMSIZ = 15  # the kernel's limit on an interface name, without the NUL
_IFNAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,14}$")
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # pod uids and netns prefixes: file-name safe


class PodNetworkError(Exception):
    """A request the pod network cannot satisfy: bad parameters, a conflicting bridge, a full range."""


class RangeExhausted(PodNetworkError):
    """Every address of a podCIDR is taken (host-local's error message)."""


# ---------------------------------------------------------------------------------------------
# parameters and names


@dataclass
class PodNetwork:
    """One Pod's network: its namespace (``ip netns``), addresses (status.podIPs, podCIDR
    order) and the node end of its veth."""

    netns: str
    ips: list[str]
    host_veth: str


@dataclass(frozen=True)
class NodeKernel:
    """The kernel doors the Pod network goes through, injected as the proxy's modes take theirs:
    rtnetlink (``kernel.links`` itself is one ``Rtnetlink``), the named namespaces
    (``kernel.netns`` itself) and the sysctls of the calling thread's namespace. A test gives
    ``kernel.fake.links.FakeNetwork`` (both of the first two) and ``kernel.fake.sysctl.FakeSysctl``."""

    rtnl: links.Rtnetlink = links  # type: ignore[assignment]
    namespaces: knetns.Namespaces = knetns  # type: ignore[assignment]
    sysctl: Sysctl = field(default_factory=Sysctl)


@dataclass
class NodeNetwork:
    """This node's Pod network: its podCIDRs (one, or an IPv4 and an IPv6 one), the bridge, the
    prefix of every Pod namespace name (unique per agent on one machine), where state lives, and
    the kernel it is made in (``NodeKernel``: the real one unless a test gives fakes)."""

    pod_cidrs: list[str]
    bridge: str = "cbr0"
    netns_prefix: str = "kubesvc-"
    state_dir: Path = field(kw_only=True)
    mtu: int | None = field(default=None, kw_only=True)  # the Pods' interfaces (None: the kernel's); vxlan sets uplink - 50
    kernel: NodeKernel = field(default_factory=NodeKernel, kw_only=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = node_network_problems(self.pod_cidrs, self.bridge, self.netns_prefix)
        if problems:
            raise PodNetworkError("invalid node network: " + "; ".join(problems))
        self.pod_cidrs = [str(ipaddress.ip_network(cidr)) for cidr in self.pod_cidrs]
        self.state_dir = Path(self.state_dir)

    @property
    def gateways(self) -> list[str]:
        """The gateway of each podCIDR (its first address), on the bridge."""
        return [gateway_of(cidr) for cidr in self.pod_cidrs]

    @property
    def bridge_addresses(self) -> list[str]:
        """What the bridge carries: ``<gateway>/<podCIDR prefix length>`` per podCIDR."""
        return [f"{gw}/{ipaddress.ip_network(cidr).prefixlen}" for gw, cidr in zip(self.gateways, self.pod_cidrs)]

    @property
    def ipam_dir(self) -> Path:
        return ipam_dir(self.state_dir, self.bridge)

    def pod(self, pod_uid: str, ips: list[str] | None = None) -> PodNetwork:
        """The names a Pod's network has (raises PodNetworkError for a uid unfit for a name)."""
        if not _TOKEN.match(pod_uid):
            raise PodNetworkError(f"pod uid {pod_uid!r} cannot name a network namespace (letters, digits, '.', '_', '-')")
        return PodNetwork(self.netns_prefix + pod_uid, list(ips or []), host_veth_name(pod_uid))


def node_network_problems(pod_cidrs: list[str], bridge: str, netns_prefix: str) -> list[str]:
    """What is wrong with these parameters (empty: nothing)."""
    problems = []
    if not 1 <= len(pod_cidrs) <= 2:
        problems.append(f"expected one podCIDR, or one per IP family, got {len(pod_cidrs)}")
    versions = []
    for cidr in pod_cidrs:
        try:
            net = ipaddress.ip_network(cidr)
        except ValueError as err:
            problems.append(f"podCIDR {cidr!r}: {err}")
            continue
        versions.append(net.version)
        if net.max_prefixlen - net.prefixlen < 2:
            problems.append(f"podCIDR {cidr} has no address for a Pod besides its gateway")
    if len(set(versions)) < len(versions):
        problems.append("two podCIDRs of one IP family")
    if not _IFNAME.match(bridge):
        problems.append(f"bridge name {bridge!r} is not a valid interface name (at most {IFNAMSIZ} characters)")
    if not _TOKEN.match(netns_prefix):
        problems.append(f"netns prefix {netns_prefix!r} must be non-empty letters, digits, '.', '_', '-'")
    return problems


def host_veth_name(pod_uid: str) -> str:
    """The node end of a Pod's veth: ``veth`` + 11 hex digits of sha256(uid), 15 characters."""
    return "veth" + hashlib.sha256(pod_uid.encode()).hexdigest()[:IFNAMSIZ - 4]


def gateway_of(cidr: str) -> str:
    """The first address of ``cidr`` (what the CNI bridge plugin defaults the gateway to)."""
    return str(ipaddress.ip_network(cidr).network_address + 1)


def bridge_mac(bridge: str, pod_cidrs: Iterable[str]) -> str:
    """A fixed, locally administered unicast MAC for the bridge (02:xx:xx:xx:xx:xx)."""
    digest = hashlib.sha256(" ".join([bridge, *pod_cidrs]).encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def ipam_dir(state_dir: Path, bridge: str) -> Path:
    return Path(state_dir) / "networks" / bridge


# ---------------------------------------------------------------------------------------------
# IPAM decisions (host-local's allocator)


def allocatable_range(cidr: str) -> tuple[int, int]:
    """First and last address host-local hands out from ``cidr``: the network address + 1 to the
    last address, minus the broadcast address for IPv4 (as integers)."""
    net = ipaddress.ip_network(cidr)
    return int(net.network_address) + 1, int(net.broadcast_address) - (1 if net.version == 4 else 0)


def _address(version: int, value: int) -> str:
    return str(ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value))


def next_free_ip(cidr: str, gateway: str, used: Collection[str], last: str | None) -> str:
    """The address host-local hands out next: the first one after ``last`` (the last reserved;
    from the start if it is not in range), wrapping round, that is neither the gateway nor in
    ``used``. Raises RangeExhausted when there is none."""
    net = ipaddress.ip_network(cidr)
    first, end = allocatable_range(cidr)
    taken = {int(ip) for ip in map(ipaddress.ip_address, [*used, gateway]) if ip.version == net.version}
    start = first
    if last is not None:
        previous = ipaddress.ip_address(last)
        if previous.version == net.version and first <= int(previous) < end:
            start = int(previous) + 1
    size = end - first + 1
    for step in range(max(0, min(size, len(taken) + 1))):  # len(taken)+1 candidates hold a free one, if any
        candidate = first + (start - first + step) % size
        if candidate not in taken:
            return _address(net.version, candidate)
    raise RangeExhausted(f"no IP addresses available in range set: {_address(net.version, first)}-{_address(net.version, end)}")


def in_cidr(ip: str, cidr: str) -> bool:
    address, net = ipaddress.ip_address(ip), ipaddress.ip_network(cidr)
    return address.version == net.version and address in net


def ips_of(pod_uid: str, allocations: Mapping[str, str], pod_cidrs: list[str]) -> list[str]:
    """The addresses ``pod_uid`` holds, podCIDR order first (addresses outside every podCIDR, from
    an earlier configuration, last)."""
    mine = [ip for ip, owner in allocations.items() if owner == pod_uid]

    def order(ip: str) -> tuple[int, int, int]:
        index = next((i for i, cidr in enumerate(pod_cidrs) if in_cidr(ip, cidr)), len(pod_cidrs))
        address = ipaddress.ip_address(ip)
        return index, address.version, int(address)

    return sorted(mine, key=order)


# ---------------------------------------------------------------------------------------------
# the bridge: plan and kernel input


def plan_bridge_addresses(bridge: str, existing: LinkInfo | None, wanted: list[str]) -> list[str]:
    """Which of ``wanted`` to add to the bridge. Mirrors the bridge plugin's ``ensureAddr``: an
    address already there is kept; any other IPv4 address, or an IPv6 address overlapping the
    wanted one, is a conflict (PodNetworkError), as is a link of that name that is no bridge."""
    if existing is None:
        return list(wanted)
    if existing.kind != "bridge":
        raise PodNetworkError(f"{bridge!r} already exists but is not a bridge")
    missing = []
    for want in wanted:
        want_if = ipaddress.ip_interface(want)
        have = [ipaddress.ip_interface(a) for a in existing.addresses]
        if want_if in have:
            continue
        for other in have:
            if other.version == want_if.version and (other.version == 4 or other.ip in want_if.network or want_if.ip in other.network):
                raise PodNetworkError(f"{bridge!r} already has an IP address different from {want}")
        missing.append(want)
    return missing


def bridge_ops(bridge: str, mac: str, create: bool, addresses: list[str]) -> list[Op]:
    """Making the bridge (if ``create``), adding ``addresses`` (IPv6 without DAD), setting it up."""
    ops: list[Op] = [AddBridge(bridge, mac)] if create else []
    ops += [Address(bridge, a, nodad=True) for a in addresses]
    return ops + [SetUp(bridge)]


def node_sysctls(bridge: str, versions: Collection[int]) -> dict[str, str]:
    """The node's sysctls (``kernel.sysctl`` keys, ``net/ipv4/ip_forward``) for routing between Pods through itself."""
    settings = {"net/ipv4/ip_forward": "1"}
    for scope in ("all", "default", bridge):
        settings[f"net/ipv4/conf/{scope}/send_redirects"] = "0"
    for scope in ("all", bridge):
        settings[f"net/ipv4/conf/{scope}/rp_filter"] = "0"
    if 6 in versions:
        settings["net/ipv6/conf/all/forwarding"] = "1"
    return settings


# ---------------------------------------------------------------------------------------------
# a Pod: kernel input


def node_side_ops(bridge: str, pod: PodNetwork, have_netns: bool, have_veth: bool, mtu: int | None = None) -> list[Op]:
    """Run in the node's namespace: the Pod's namespace and veth (what is missing of them, both
    ends with ``mtu`` if given) and the veth on the bridge, up. A veth left from a namespace
    deleted by name (its processes keep the old one alive) is replaced."""
    ops: list[Op] = []
    if have_veth and not have_netns:
        ops.append(DelLink(pod.host_veth))
        have_veth = False
    if not have_netns:
        ops.append(AddNetns(pod.netns))
    if not have_veth:
        ops.append(AddVeth(pod.host_veth, POD_IFNAME, pod.netns, mtu))
    # hairpin mode (kubelet's hairpin-veth): with bridge netfilter on, a Pod's connection to a
    # Service that DNATs back to the Pod itself must leave through the port it came in by
    return ops + [SetUp(pod.host_veth, master=bridge), SetHairpin(pod.host_veth)]


def pod_side_ops(ips: list[str], gateways: list[str]) -> list[Op]:
    """Run in the Pod's namespace: lo and eth0 up, each address as a host address (/32, /128),
    the gateway on-link and the default route through it. ``replace`` everywhere, so running it
    again changes nothing."""
    ops: list[Op] = [SetUp("lo"), SetUp(POD_IFNAME)]
    for ip, gw in zip(ips, gateways):
        v6 = ipaddress.ip_address(ip).version == 6
        ops += [Address(POD_IFNAME, f"{ip}/{128 if v6 else 32}", replace=True, nodad=True),
                Route(gw, POD_IFNAME, scope_link=not v6),
                Route("::/0" if v6 else "0.0.0.0/0", POD_IFNAME, via=gw)]
    return ops


def pod_removal_ops(pod: PodNetwork, have_netns: bool, have_veth: bool) -> list[Op]:
    """Run in the node's namespace, deleting what exists of a Pod's network (the veth first:
    deleting it takes eth0 at once, whoever still holds the namespace)."""
    return ([DelLink(pod.host_veth)] if have_veth else []) + ([DelNetns(pod.netns)] if have_netns else [])


def pods_from_state(netns_prefix: str, pod_cidrs: list[str], allocations: Mapping[str, str]) -> dict[str, PodNetwork]:
    """Every Pod the state knows: each uid holding an address. ``add_pod`` reserves the address
    before it makes the namespace and ``remove_pod`` releases it only after the namespace is
    gone, so every namespace of ours has one; a namespace that merely shares our prefix
    belongs to another agent (or another ``kubesvc up``) and is never touched."""
    uids = dict.fromkeys(allocations.values())
    return {uid: PodNetwork(netns_prefix + uid, ips_of(uid, allocations, pod_cidrs), host_veth_name(uid))
            for uid in uids if _TOKEN.match(uid)}


# ---------------------------------------------------------------------------------------------
# state files


class IPStore:
    """host-local's disk store: ``<dir>/<ip>`` holds its owner's uid, ``<dir>/last_reserved_ip.<n>``
    the last address reserved in range ``n``. A reservation creates its file exclusively, so
    two writers never hold one address."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def allocations(self) -> dict[str, str]:
        """``{ip: uid}`` for every address file."""
        found = {}
        if not self.dir.is_dir():
            return found
        for entry in self.dir.iterdir():
            # FileNotFoundError: released between the listing and the read (two removals of
            # Pods on this node at once); it is nobody's any more
            with contextlib.suppress(ValueError, FileNotFoundError):
                ipaddress.ip_address(entry.name)
                found[entry.name] = entry.read_text().split("\n", 1)[0].strip()
        return found

    def last_reserved(self, index: int) -> str | None:
        try:
            text = (self.dir / f"{LAST_RESERVED}.{index}").read_text().strip()
            ipaddress.ip_address(text)
            return text
        except (OSError, ValueError):
            return None

    def reserve(self, ip: str, pod_uid: str, index: int) -> bool:
        """Record ``ip`` as ``pod_uid``'s; False if another holds it already."""
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.dir / ip, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(pod_uid)
        _write_atomically(self.dir / f"{LAST_RESERVED}.{index}", ip)
        return True

    def release(self, ips: Iterable[str]) -> None:
        for ip in ips:
            (self.dir / ip).unlink(missing_ok=True)

    def allocate(self, pod_uid: str, pod_cidrs: list[str], gateways: list[str]) -> list[str]:
        """``pod_uid``'s address in each podCIDR: the one it holds, or the next free one. On
        failure, what this call reserved is released (host-local does the same)."""
        reserved: list[str] = []
        try:
            return [self._allocate_in(index, cidr, gw, pod_uid, reserved) for index, (cidr, gw) in enumerate(zip(pod_cidrs, gateways))]
        except BaseException:
            self.release(reserved)
            raise

    def _allocate_in(self, index: int, cidr: str, gateway: str, pod_uid: str, reserved: list[str]) -> str:
        while True:
            allocations = self.allocations()
            held = [ip for ip in ips_of(pod_uid, allocations, [cidr]) if in_cidr(ip, cidr)]
            if held:
                return held[0]
            ip = next_free_ip(cidr, gateway, allocations.keys(), self.last_reserved(index))
            if self.reserve(ip, pod_uid, index):
                reserved.append(ip)
                return ip


@dataclass
class NodeRecord:
    """podnet.json: what teardown needs without knowing the node's configuration."""

    bridge: str
    netns_prefix: str
    node_netns: str | None
    pod_cidrs: list[str]
    created_bridge: bool
    added_addresses: list[str]


def read_record(state_dir: Path) -> NodeRecord | None:
    try:
        return NodeRecord(**json.loads((Path(state_dir) / RECORD_FILE).read_text()))
    except FileNotFoundError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def next_record(net: NodeNetwork, previous: NodeRecord | None, existing: LinkInfo | None, adding: list[str],
                node_netns: str | None) -> NodeRecord:
    """The record after ensuring ``net``: a bridge we created earlier stays ours (a restarted
    agent finds it existing), as do addresses we added to someone else's bridge."""
    if previous is not None and (previous.bridge, previous.netns_prefix) != (net.bridge, net.netns_prefix):
        raise PodNetworkError(f"{net.state_dir} holds the pod network of bridge {previous.bridge!r}, netns prefix "
                              f"{previous.netns_prefix!r}: tear it down before using bridge {net.bridge!r}, prefix {net.netns_prefix!r}")
    created = existing is None or (previous is not None and previous.created_bridge)
    added = [] if created else list(dict.fromkeys([*(previous.added_addresses if previous else []), *adding]))
    return NodeRecord(net.bridge, net.netns_prefix, node_netns, list(net.pod_cidrs), created, added)


# ---------------------------------------------------------------------------------------------
# the shell: what exists here, the kernel's door


def _write_sysctls(sysctl: Sysctl, settings: Mapping[str, str]) -> None:
    for key, value in settings.items():
        try:
            sysctl.write(key, value)
        except SysctlFailed as err:
            raise PodNetworkError(f"sysctl {key.replace('/', '.')}={value}: {err.stderr}") from err


class TeardownKernel(Protocol):
    """What teardown asks of the kernel (a fake in tests)."""

    def netns_names(self) -> list[str]: ...
    def current_netns(self) -> str | None: ...
    def kill_all_in(self, netns: str) -> object: ...
    def link_names(self, netns: str | None) -> set[str]: ...
    def apply(self, ops: Sequence[Op], netns: str | None) -> list[str]: ...


class HostKernel:
    """The real kernel: ``kernel.netns`` and ``kernel.links`` (every plan forced, as ``ip -force -batch``)."""

    netns_names = staticmethod(knetns.names)
    current_netns = staticmethod(knetns.current_name)
    kill_all_in = staticmethod(knetns.kill_all_in)
    link_names = staticmethod(links.link_names)

    @staticmethod
    def apply(ops: Sequence[Op], netns: str | None) -> list[str]:
        return links.apply(ops, netns, force=True)


# ---------------------------------------------------------------------------------------------
# the API


async def ensure_node_network(net: NodeNetwork) -> None:
    """The bridge with its gateway addresses (created, or adopted if it exists), up, and the
    node's sysctls. Records what is ours in ``state_dir`` before touching the kernel."""
    await knetns.on_thread_async(None, _ensure_node_network, net)


def _ensure_node_network(net: NodeNetwork) -> None:
    """``ensure_node_network``'s work, on a thread in the agent's namespace."""
    kernel = net.kernel
    existing = kernel.rtnl.link_info(net.bridge)
    adding = plan_bridge_addresses(net.bridge, existing, net.bridge_addresses)
    record = next_record(net, read_record(net.state_dir), existing, adding, kernel.namespaces.current_name())
    net.state_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(net.state_dir / RECORD_FILE, json.dumps(asdict(record), indent=1) + "\n")
    kernel.rtnl.apply(bridge_ops(net.bridge, bridge_mac(net.bridge, net.pod_cidrs), existing is None, adding))
    _write_sysctls(kernel.sysctl, node_sysctls(net.bridge, {ipaddress.ip_network(c).version for c in net.pod_cidrs}))


async def add_pod(net: NodeNetwork, pod_uid: str) -> PodNetwork:
    """The Pod's namespace, veth, addresses and routes; what exists already (after an agent
    restart) is reused, so calling it again returns the same PodNetwork. Raises RangeExhausted
    when the podCIDR is full, ``NetlinkFailed`` (a CommandFailed) when the kernel refuses.
    All of it (the address files too) runs on a thread: the caller's event loop keeps serving
    while Pods are set up, several at once (``IPStore.reserve`` is exclusive, so concurrent
    allocations never share an address)."""
    return await knetns.on_thread_async(None, _add_pod, net, pod_uid)


def _add_pod(net: NodeNetwork, pod_uid: str) -> PodNetwork:
    """``add_pod``'s work, on a thread in the agent's namespace: the addresses, then one plan
    here and one in the Pod's namespace."""
    pod = net.pod(pod_uid)
    pod.ips = IPStore(net.ipam_dir).allocate(pod_uid, net.pod_cidrs, net.gateways)
    kernel = net.kernel
    kernel.rtnl.apply(node_side_ops(net.bridge, pod, kernel.namespaces.exists(pod.netns), kernel.rtnl.link_exists(pod.host_veth),
                                   net.mtu))
    _write_sysctls(kernel.sysctl, {f"net/ipv4/conf/{pod.host_veth}/send_redirects": "0"})
    kernel.rtnl.apply(pod_side_ops(pod.ips, net.gateways), pod.netns)
    return pod


async def kill_processes_in(netns: str) -> None:
    """SIGKILL every process inside network namespace ``netns`` (``ip netns pids``: a walk of
    /proc, on a thread)."""
    await asyncio.to_thread(knetns.kill_all_in, netns)


async def remove_pod(net: NodeNetwork, pod_uid: str) -> None:
    """Kill what still runs in the Pod's namespace (it would otherwise live on in an anonymous
    namespace nothing can find), delete its veth and namespace, release its addresses. Idempotent.
    Runs on a thread, as ``add_pod``."""
    await knetns.on_thread_async(None, _remove_pod, net, pod_uid)


def _remove_pod(net: NodeNetwork, pod_uid: str) -> None:
    """``remove_pod``'s work, on a thread in the agent's namespace."""
    pod, kernel = net.pod(pod_uid), net.kernel
    if kernel.namespaces.exists(pod.netns):
        kernel.namespaces.kill_all_in(pod.netns)
    kernel.rtnl.apply(pod_removal_ops(pod, kernel.namespaces.exists(pod.netns), kernel.rtnl.link_exists(pod.host_veth)))
    store = IPStore(net.ipam_dir)
    store.release(ips_of(pod_uid, store.allocations(), net.pod_cidrs))


def existing_pods(net: NodeNetwork) -> dict[str, PodNetwork]:
    """``{uid: PodNetwork}`` for every Pod with an address or a namespace of ours: for an agent
    restart (add_pod them again) and garbage collection (remove_pod those whose Pod is gone)."""
    return pods_from_state(net.netns_prefix, net.pod_cidrs, IPStore(net.ipam_dir).allocations())


async def teardown_node_network(net: NodeNetwork) -> list[str]:
    """Undo everything recorded in ``net.state_dir`` (see :func:`teardown_sync`), from a thread
    in the event loop thread's namespace."""
    return await knetns.on_thread_async(None, teardown_sync, net.state_dir)


def teardown_sync(state_dir: Path, kernel: TeardownKernel = HostKernel()) -> list[str]:
    """Undo everything recorded in ``state_dir``, from any namespace (``kubesvc down``): kill
    what runs in each Pod namespace (SIGKILL), delete every veth, each Pod namespace, the bridge
    if we created it (else the addresses we added), then the state files (kept if anything
    failed, so it can run again). Every deletion is tried even when one fails. Returns the
    errors (empty: clean)."""
    state_dir = Path(state_dir)
    record = read_record(state_dir)
    if record is None:
        return []
    here = kernel.current_netns()
    netns_names = kernel.netns_names()
    allocations = IPStore(ipam_dir(state_dir, record.bridge)).allocations()
    pods = list(pods_from_state(record.netns_prefix, record.pod_cidrs, allocations).values())
    live = [pod.netns for pod in pods if pod.netns in netns_names]
    for name in live:
        for _ in range(2):  # once more for anything forked meanwhile
            kernel.kill_all_in(name)
    errors: list[str] = []
    elsewhere = record.node_netns if record.node_netns and record.node_netns != here else None
    if elsewhere is None or elsewhere in netns_names:  # a vanished node namespace took its links along
        try:
            found = kernel.link_names(elsewhere)
        except Exception as err:  # noqa: BLE001 - reported; the namespaces are still removed
            errors.append(f"listing the links of {elsewhere or 'this namespace'}: {err}")
        else:
            errors += _forced(kernel, node_teardown_ops(record, pods, found), elsewhere)
    errors += _forced(kernel, [DelNetns(name) for name in live], None)
    return errors or _remove_state(state_dir, record.bridge)  # on errors the state stays, for another try


def _forced(kernel: TeardownKernel, ops: list[Op], netns: str | None) -> list[str]:
    """Every one of ``ops`` tried (``ip -force -batch``); the failures."""
    return kernel.apply(ops, netns) if ops else []


def node_teardown_ops(record: NodeRecord, pods: Iterable[PodNetwork], found: set[str]) -> list[Op]:
    """Deleting, of what exists (``found``: the link names), every Pod's veth and the bridge if
    we created it (else the addresses we added to it)."""
    ops: list[Op] = [DelLink(pod.host_veth) for pod in pods if pod.host_veth in found]
    if record.bridge in found:
        ops += [DelLink(record.bridge)] if record.created_bridge else [DelAddress(record.bridge, a) for a in record.added_addresses]
    return ops


def _remove_state(state_dir: Path, bridge: str) -> list[str]:
    errors = []
    directory = ipam_dir(state_dir, bridge)
    paths = sorted(directory.iterdir()) if directory.is_dir() else []
    for path in [*paths, directory, directory.parent, Path(state_dir) / RECORD_FILE]:
        try:
            if path.is_dir():
                if path == directory.parent and any(path.iterdir()):
                    continue  # another bridge's state
                path.rmdir()
            else:
                path.unlink(missing_ok=True)
        except OSError as err:
            errors.append(f"removing {path}: {err.strerror}")
    return errors
