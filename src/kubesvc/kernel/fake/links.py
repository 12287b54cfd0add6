"""A stateful rtnetlink for the Pod network: named namespaces, the links in each (bridges, veth
pairs, their masters, up or down, hairpin), each link's addresses and each namespace's routes,
behind the interface of ``kernel.links`` (``apply`` of the same operation values, ``link_names``,
``link_info``, ``link_exists``), of ``kernel.netns`` (``names``, ``create``, ``remove``,
``pids_in``, ``kill_all_in``: processes are pids a test ``spawn``s) and of ``agent.podnet``'s
teardown (``FakeHostKernel``).

It refuses what the kernel refuses, with its errno and message (held to the kernel by
``tests/kernel/test_links_fake.py``):

* a link or namespace name already taken: EEXIST; a missing one: ENODEV (``Cannot find device``)
  for links, ENOENT for namespaces; a veth's far end is born in the named namespace, and
  either end's deletion (or its namespace's) takes the other along;
* a master that is not a bridge, hairpin on a link that is no bridge's port: EOPNOTSUPP;
  deleting a bridge frees its ports;
* an address already on the link: EEXIST (``replace`` is idempotent; one address with another
  prefix length is another address); deleting one that is not there: EADDRNOTAVAIL;
* a route out of a link that is down: ENETDOWN; through a gateway no route on that link
  covers: ENETUNREACH (IPv4) or EHOSTUNREACH (IPv6); ``add`` of a destination routed already:
  EEXIST; deleting a route that is not there: ESRCH. An address on a link that is up routes
  its subnet (the kernel's connected route, kept apart from the routes we add);
* ``busy``: names whose deletion the test wants refused with EBUSY.

``apply`` stops at the first refusal with ``NetlinkFailed``, or with ``force`` tries every
operation and returns the failures, as ``kernel.links.apply``.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubesvc.kernel.links import (AddBridge, AddDummy, AddNetns, AddVeth, Address, DelAddress, DelLink, DelNetns, DelRoute, LinkInfo, Op,
                                  Route, SetHairpin, SetUp)
from kubesvc.kernel.netlink import NetlinkFailed

MESSAGES = {errno.EEXIST: "File exists", errno.ENOENT: "No such file or directory", errno.EOPNOTSUPP: "Operation not supported",
            errno.EADDRNOTAVAIL: "Cannot assign requested address", errno.ENETDOWN: "Network is down",
            errno.ENETUNREACH: "Network is unreachable", errno.EHOSTUNREACH: "No route to host", errno.ESRCH: "No such process",
            errno.EBUSY: "Device or resource busy"}


class Refused(Exception):
    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or MESSAGES[code])
        self.code = code


@dataclass(eq=False)
class Link:
    name: str
    kind: str | None = None  # "bridge", "veth", "dummy"; None for lo
    up: bool = False
    master: str | None = None
    hairpin: bool = False
    mac: str | None = None
    addresses: list[str] = field(default_factory=list)  # "a.b.c.d/len", in the order added
    mtu: int = 1500
    peer: tuple["Namespace", str] | None = None  # a veth's other end


@dataclass(frozen=True)
class FakeRoute:
    dst: str  # a network, "10.244.1.1/32", "0.0.0.0/0"
    dev: str
    via: str | None = None
    scope_link: bool = False


@dataclass(eq=False)
class Namespace:
    links: dict[str, Link] = field(default_factory=lambda: {"lo": Link("lo")})
    routes: dict[str, FakeRoute] = field(default_factory=dict)  # by destination: the routes we added
    processes: set[int] = field(default_factory=set)

    def link(self, name: str) -> Link:
        if name not in self.links:
            raise Refused(errno.ENODEV, f'Cannot find device "{name}"')
        return self.links[name]

    def connected(self) -> list[FakeRoute]:
        """The kernel's routes for the subnets of addresses on links that are up."""
        found = []
        for link in self.links.values():
            if link.up:
                for cidr in link.addresses:
                    found.append(FakeRoute(str(ipaddress.ip_interface(cidr).network), link.name))
        return found

    def covers(self, gateway: str, dev: str) -> bool:
        ip = ipaddress.ip_address(gateway)
        return any(r.dev == dev and r.via is None and ip in ipaddress.ip_network(r.dst)
                   for r in [*self.routes.values(), *self.connected()] if ipaddress.ip_network(r.dst).version == ip.version)


class FakeNetwork:
    """The namespaces: ``host`` (the caller's, unnamed unless ``here`` names one) and ``named``
    (``/run/netns``). ``apply``/``link_names``/``link_info`` take ``netns`` as ``kernel.links``."""

    def __init__(self, here: str | None = None):
        self.host = Namespace()
        self.named: dict[str, Namespace] = {}
        self.here = here
        if here is not None:
            self.named[here] = self.host
        self.busy: set[str] = set()
        self._pids = itertools.count(1000)

    def ns(self, netns: str | None = None) -> Namespace:
        if netns is None:
            return self.host
        if netns not in self.named:
            raise FileNotFoundError(errno.ENOENT, f"No such file or directory: '/run/netns/{netns}'")
        return self.named[netns]

    def spawn(self, netns: str) -> int:
        """A process living in ``netns`` (for ``kill_all_in``)."""
        pid = next(self._pids)
        self.ns(netns).processes.add(pid)
        return pid

    # -- kernel.links

    def apply(self, ops: Sequence[Op], netns: str | None = None, *, force: bool = False) -> list[str]:
        ns = self.ns(netns)
        errors = []
        for op in ops:
            try:
                self._run(op, ns)
            except Refused as err:
                failure = NetlinkFailed(op, err.code, str(err), netns)
                if not force:
                    raise failure from None
                errors.append(str(failure))
        return errors

    def link_names(self, netns: str | None = None) -> set[str]:
        return set(self.ns(netns).links)

    def link_info(self, name: str, netns: str | None = None) -> LinkInfo | None:
        link = self.ns(netns).links.get(name)
        return LinkInfo(link.kind, tuple(link.addresses)) if link else None

    def link_exists(self, name: str, netns: str | None = None) -> bool:
        return name in self.ns(netns).links

    def routes(self, netns: str | None = None) -> set[FakeRoute]:
        return set(self.ns(netns).routes.values())

    # -- kernel.netns.Namespaces (and agent.podnet's names for two of them)

    def names(self) -> list[str]:
        return sorted(self.named)

    netns_names = names

    def exists(self, name: str) -> bool:
        return name in self.named

    def create(self, name: str) -> None:
        """``ip netns add``: ``FileExistsError`` if the name is taken."""
        try:
            self._run(AddNetns(name), self.host)
        except Refused as err:
            raise FileExistsError(err.code, f"File exists: '/run/netns/{name}'") from None

    def remove(self, name: str) -> None:
        """``ip netns del``: ``FileNotFoundError`` if there is no such name."""
        try:
            self._run(DelNetns(name), self.host)
        except Refused as err:
            raise OSError(err.code, str(err)) from None

    def current_name(self) -> str | None:
        return self.here

    current_netns = current_name

    def pids_in(self, name: str) -> list[int]:
        return sorted(self.ns(name).processes)

    def kill_all_in(self, netns: str) -> list[int]:
        ns = self.ns(netns)
        killed = sorted(ns.processes)
        ns.processes.clear()
        return killed

    # -- the operations

    def _run(self, op: Op, ns: Namespace) -> None:
        if isinstance(op, AddNetns):
            if op.name in self.named:
                raise Refused(errno.EEXIST)
            self.named[op.name] = Namespace()
        elif isinstance(op, DelNetns):
            if op.name not in self.named:
                raise Refused(errno.ENOENT, f"umount /run/netns/{op.name}: No such file or directory")
            if op.name in self.busy:
                raise Refused(errno.EBUSY)
            gone = self.named.pop(op.name)
            if gone.processes:  # a process keeps it alive, nameless, with its links
                return
            for link in list(gone.links.values()):
                self._delete(gone, link)
        elif isinstance(op, AddBridge):
            self._new(ns, op.name)
            ns.links[op.name] = Link(op.name, "bridge", mac=op.mac)
        elif isinstance(op, AddDummy):
            self._new(ns, op.name)
            ns.links[op.name] = Link(op.name, "dummy")
        elif isinstance(op, AddVeth):
            self._new(ns, op.name)
            if op.peer_netns not in self.named:
                raise Refused(errno.ENOENT)
            far = self.named[op.peer_netns]
            self._new(far, op.peer)
            ns.links[op.name] = Link(op.name, "veth", peer=(far, op.peer), mtu=op.mtu or 1500)
            far.links[op.peer] = Link(op.peer, "veth", peer=(ns, op.name), mtu=op.mtu or 1500)
        elif isinstance(op, DelLink):
            link = ns.link(op.name)
            if op.name in self.busy:
                raise Refused(errno.EBUSY)
            self._delete(ns, link)
        elif isinstance(op, SetUp):
            link = ns.link(op.name)
            if op.master:
                master = ns.link(op.master)
                if master.kind != "bridge" or master is link:
                    raise Refused(errno.EOPNOTSUPP)
                link.master = op.master
            link.up = True
        elif isinstance(op, SetHairpin):
            link = ns.link(op.name)
            if link.master is None:
                raise Refused(errno.EOPNOTSUPP)
            link.hairpin = True
        elif isinstance(op, Address):
            link = ns.link(op.dev)
            cidr = str(ipaddress.ip_interface(op.cidr))
            if cidr in link.addresses:
                if not op.replace:
                    raise Refused(errno.EEXIST)
                return
            link.addresses.append(cidr)
        elif isinstance(op, DelAddress):
            link = ns.link(op.dev)
            cidr = str(ipaddress.ip_interface(op.cidr))
            if cidr not in link.addresses:
                raise Refused(errno.EADDRNOTAVAIL)
            link.addresses.remove(cidr)
        elif isinstance(op, Route):
            self._route(op, ns)
        elif isinstance(op, DelRoute):
            dst = str(ipaddress.ip_network(op.dst))
            if dst not in ns.routes:
                raise Refused(errno.ESRCH)
            del ns.routes[dst]
        else:
            raise NotImplementedError(f"the links fake does not model {op}")

    @staticmethod
    def _new(ns: Namespace, name: str) -> None:
        if name in ns.links:
            raise Refused(errno.EEXIST)

    def _delete(self, ns: Namespace, link: Link) -> None:
        ns.links.pop(link.name, None)
        ns.routes = {dst: r for dst, r in ns.routes.items() if r.dev != link.name}
        for port in ns.links.values():
            if port.master == link.name:
                port.master, port.hairpin = None, False
        if link.peer is not None:
            far, name = link.peer
            link.peer = None
            if far.links.get(name) is not None:
                far.links[name].peer = None
                self._delete(far, far.links[name])

    @staticmethod
    def _route(op: Route, ns: Namespace) -> None:
        link = ns.link(op.dev)
        dst = str(ipaddress.ip_network(op.dst))
        if not link.up:
            raise Refused(errno.ENETDOWN)
        if op.via and not ns.covers(op.via, op.dev):
            raise Refused(errno.EHOSTUNREACH if ipaddress.ip_address(op.via).version == 6 else errno.ENETUNREACH)
        if dst in ns.routes and not op.replace:
            raise Refused(errno.EEXIST)
        ns.routes[dst] = FakeRoute(dst, op.dev, op.via, op.scope_link)


class FakeHostKernel:
    """``agent.podnet``'s teardown view of a ``FakeNetwork`` (its ``HostKernel``: every plan forced)."""

    def __init__(self, network: FakeNetwork):
        self.network = network
        self.netns_names, self.current_netns = network.netns_names, network.current_netns
        self.kill_all_in, self.link_names = network.kill_all_in, network.link_names

    def apply(self, ops: Sequence[Op], netns: str | None) -> list[str]:
        return self.network.apply(ops, netns, force=True)
