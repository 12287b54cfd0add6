"""Links, addresses and routes through rtnetlink (pyroute2), not ``ip`` processes.

The node's Pod network (``agent/podnet.py``) and ``kubesvc up``'s Service-range route need what
iproute2 gives a CNI plugin: a bridge with a fixed MAC, veth pairs whose far end is born in
another namespace, addresses (IPv6 ones ``nodad``), on-link and default routes, a bridge port's
hairpin mode, deletions, and named namespaces. Callers decide *what* to change as a list of
operations (the frozen dataclasses below, pure values); :func:`apply` carries them out with one
netlink socket, in order, as ``ip -batch`` did. Each operation prints as the ``ip -batch`` line
that would do the same (``link add veth1 type veth peer name eth0 netns kubesvc-u1``), which is
what messages and tests show.

A plan runs on a fresh thread inside the namespace it targets (``netns=NAME``), or inside the
*calling thread's* namespace (None), never in whatever namespace another thread of the process is
in (:func:`kubesvc.kernel.netns.on_thread`); the socket is opened there and keeps that namespace.
pyroute2's blocking API drives an asyncio loop of its own, which cannot run on a thread whose loop
is running, and a loop of the default policy would be uvloop's under ``kubesvc up``, which cannot
open a netlink socket: each socket gets a plain selector loop. Namespaces themselves
(``netns add``/``del``) are files under /run/netns, whatever namespace the thread is in
(:mod:`kubesvc.kernel.netns`).

``apply`` stops at the first refusal and raises ``kernel.netlink.NetlinkFailed`` (the package's
one netlink error, a ``CommandFailed`` whose argv is ``("netlink", <the operation>)``, code the
errno, output the kernel's message, ``op`` the operation value); with
``force=True`` it tries every operation and returns the failures, as ``ip -force -batch``.
``Rtnetlink`` is this module's interface; ``kernel/fake/links.py`` its stateful fake.
"""

from __future__ import annotations

import asyncio
import errno as errno_
import ipaddress
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kubesvc.kernel import netns as knetns
from kubesvc.kernel.netlink import NetlinkFailed

IFA_F_NODAD = 0x02
RT_SCOPE_LINK = 253
RTPROT_BOOT = 3  # what ``ip route add`` sets unless told otherwise (and does not print)


def _failure(op: "Op | str", err: BaseException, netns: str | None) -> NetlinkFailed:
    code = getattr(err, "code", None) or getattr(err, "errno", None) or errno_.EIO
    message = getattr(err, "strerror", None) or (os.strerror(code) if code in errno_.errorcode else str(err))
    return NetlinkFailed(op, code, message, netns)


class _Ipr(Protocol):  # what the operations use: pyroute2's IPRoute and an index cache
    def link(self, command: str, **kwargs: Any) -> Any: ...
    def addr(self, command: str, **kwargs: Any) -> Any: ...
    def route(self, command: str, **kwargs: Any) -> Any: ...
    def index(self, name: str) -> int: ...
    def forget(self, name: str) -> None: ...


class _Socket:
    """An IPRoute and the interface indexes looked up for it. A lookup is ``if_nametoindex(3)``
    (an ioctl on a socket made in the calling thread's namespace, which is the IPRoute's: both
    live on the thread that opened them), not an ``RTM_GETLINK`` whose reply pyroute2 decodes
    in full, nor a dump of every link."""

    def __init__(self) -> None:
        from pyroute2 import IPRoute

        self.loop = asyncio.SelectorEventLoop()  # pyroute2 does not close a loop it was given: close() does
        self.ipr = IPRoute(use_event_loop=self.loop)
        self.link, self.addr, self.route = self.ipr.link, self.ipr.addr, self.ipr.route
        self._indexes: dict[str, int] = {}

    def __enter__(self) -> "_Socket":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def index(self, name: str) -> int:
        if name not in self._indexes:
            try:
                self._indexes[name] = socket.if_nametoindex(name)
            except OSError as err:
                raise OSError(errno_.ENODEV, f"Cannot find device \"{name}\"") from err
        return self._indexes[name]

    def forget(self, name: str) -> None:
        self._indexes.pop(name, None)

    def close(self) -> None:
        try:
            self.ipr.close()
        finally:
            self.loop.close()


class Borrowed:
    """A socket kept open elsewhere (``kernel.netlink``'s cached one for a namespace, used on the
    netlink thread, which is *not* inside that namespace) as what the operations use: an index is
    asked of that socket (``RTM_GETLINK`` by name), since ``if_nametoindex`` would answer for the
    thread's namespace; remembered for this adapter's life (one call). Closing it is the owner's."""

    def __init__(self, ipr: Any) -> None:
        self.ipr = ipr
        self.link, self.addr, self.route = ipr.link, ipr.addr, ipr.route
        self._indexes: dict[str, int] = {}

    def index(self, name: str) -> int:
        if name not in self._indexes:
            found = self.ipr.link_lookup(ifname=name)
            if not found:
                raise OSError(errno_.ENODEV, f"Cannot find device \"{name}\"")
            self._indexes[name] = found[0]
        return self._indexes[name]

    def forget(self, name: str) -> None:
        self._indexes.pop(name, None)

    def close(self) -> None:
        pass


def _is_v6(address: str) -> bool:
    return ":" in address


# ---------------------------------------------------------------------------------------------
# operations: values, each printing as its ip -batch line


@dataclass(frozen=True)
class AddNetns:
    name: str

    def __str__(self) -> str:
        return f"netns add {self.name}"

    def run(self, ipr: _Ipr | None) -> None:
        knetns.create(self.name)


@dataclass(frozen=True)
class DelNetns:
    name: str

    def __str__(self) -> str:
        return f"netns del {self.name}"

    def run(self, ipr: _Ipr | None) -> None:
        knetns.remove(self.name)


@dataclass(frozen=True)
class AddBridge:
    name: str
    mac: str

    def __str__(self) -> str:
        return f"link add {self.name} address {self.mac} type bridge"

    def run(self, ipr: _Ipr) -> None:
        ipr.link("add", ifname=self.name, kind="bridge", address=self.mac)


@dataclass(frozen=True)
class AddVeth:
    """A veth pair: ``name`` here, ``peer`` born inside namespace ``peer_netns``; ``mtu`` (None:
    the kernel's 1500) is given to both ends, since a peer does not inherit it (the Pod network
    in ``vxlan`` mode: the uplink's MTU minus the encapsulation)."""

    name: str
    peer: str
    peer_netns: str
    mtu: int | None = None

    def __str__(self) -> str:
        mtu = f" mtu {self.mtu}" if self.mtu else ""
        return f"link add {self.name}{mtu} type veth peer name {self.peer}{mtu} netns {self.peer_netns}"

    def run(self, ipr: _Ipr) -> None:
        mtu = {"mtu": self.mtu} if self.mtu else {}
        ipr.link("add", ifname=self.name, kind="veth", peer={"ifname": self.peer, "net_ns_fd": knetns.netns_path(self.peer_netns), **mtu},
                 **mtu)


@dataclass(frozen=True)
class AddDummy:
    """A dummy link, left down (upstream ``EnsureDummyDevice``): the IPVS proxier's ``kube-ipvs0``,
    holding every Service IP so the node accepts packets for them (needs ``CONFIG_DUMMY``)."""

    name: str

    def __str__(self) -> str:
        return f"link add {self.name} type dummy"

    def run(self, ipr: _Ipr) -> None:
        ipr.link("add", ifname=self.name, kind="dummy")


@dataclass(frozen=True)
class DelLink:
    name: str

    def __str__(self) -> str:
        return f"link del {self.name}"

    def run(self, ipr: _Ipr) -> None:
        ipr.link("del", index=ipr.index(self.name))
        ipr.forget(self.name)


@dataclass(frozen=True)
class SetUp:
    """Link ``name`` up, made a port of bridge ``master`` first if one is given."""

    name: str
    master: str | None = None

    def __str__(self) -> str:
        return f"link set {self.name}" + (f" master {self.master}" if self.master else "") + " up"

    def run(self, ipr: _Ipr) -> None:
        extra = {"master": ipr.index(self.master)} if self.master else {}
        ipr.link("set", index=ipr.index(self.name), state="up", **extra)


@dataclass(frozen=True)
class SetHairpin:
    """Hairpin mode on bridge port ``name`` (``IFLA_BRPORT_MODE``)."""

    name: str

    def __str__(self) -> str:
        return f"link set {self.name} type bridge_slave hairpin on"

    def run(self, ipr: _Ipr) -> None:
        ipr.link("set", index=ipr.index(self.name), kind="bridge_slave", mode=1)


@dataclass(frozen=True)
class Address:
    """``cidr`` on ``dev``: added (EEXIST if there), or ``replace``d; with ``nodad`` (IPv6 only:
    ``IFA_F_NODAD``) usable at once, without duplicate address detection. The Pod network asks
    for it; the IPVS proxier's binding on ``kube-ipvs0`` does not (upstream ``EnsureAddressBind``
    sets no flags)."""

    dev: str
    cidr: str
    replace: bool = False
    nodad: bool = False

    def __str__(self) -> str:
        nodad = self.nodad and _is_v6(self.cidr)
        return f"address {'replace' if self.replace else 'add'} {self.cidr} dev {self.dev}" + (" nodad" if nodad else "")

    def run(self, ipr: _Ipr) -> None:
        iface = ipaddress.ip_interface(self.cidr)
        flags = {"flags": IFA_F_NODAD} if self.nodad and iface.version == 6 else {}
        ipr.addr("replace" if self.replace else "add", index=ipr.index(self.dev), address=str(iface.ip),
                 prefixlen=iface.network.prefixlen, **flags)


@dataclass(frozen=True)
class DelAddress:
    dev: str
    cidr: str

    def __str__(self) -> str:
        return f"address del {self.cidr} dev {self.dev}"

    def run(self, ipr: _Ipr) -> None:
        iface = ipaddress.ip_interface(self.cidr)
        ipr.addr("del", index=ipr.index(self.dev), address=str(iface.ip), prefixlen=iface.network.prefixlen)


@dataclass(frozen=True)
class Route:
    """A route to ``dst`` (an address or CIDR; ``0.0.0.0/0``, ``::/0`` the default) out of
    ``dev``, through ``via`` if given; ``scope_link`` for an on-link IPv4 host route. ``replace``
    (the default) is idempotent; otherwise ``add`` (EEXIST if there)."""

    dst: str
    dev: str
    via: str | None = None
    scope_link: bool = False
    replace: bool = True

    def __str__(self) -> str:
        return (f"route {'replace' if self.replace else 'add'} {self.dst}" + (f" via {self.via}" if self.via else "")
                + f" dev {self.dev}" + (" scope link" if self.scope_link else ""))

    def run(self, ipr: _Ipr) -> None:
        network = ipaddress.ip_network(self.dst)
        extra: dict[str, Any] = {"gateway": self.via} if self.via else {}
        if self.scope_link:
            extra["scope"] = RT_SCOPE_LINK
        ipr.route("replace" if self.replace else "add", dst=str(network), oif=ipr.index(self.dev), proto=RTPROT_BOOT, **extra)


@dataclass(frozen=True)
class DelRoute:
    dst: str

    def __str__(self) -> str:
        return f"route del {self.dst}"

    def run(self, ipr: _Ipr) -> None:
        ipr.route("del", dst=str(ipaddress.ip_network(self.dst)))


Op = AddNetns | DelNetns | AddBridge | AddVeth | AddDummy | DelLink | SetUp | SetHairpin | Address | DelAddress | Route | DelRoute


def render(ops: Iterable[Op]) -> list[str]:
    """The ``ip -batch`` lines doing what ``ops`` do."""
    return [str(op) for op in ops]


# ---------------------------------------------------------------------------------------------
# running them


class Session:
    """One netlink socket for several plans and lookups, opened lazily in the namespace of the
    thread that uses it first. For a function that already runs on a thread of its own (one that
    ``kernel.netns.on_thread`` gave it, with no event loop running): ``with Session() as s:
    s.apply(...)``; a plan with only namespace operations opens no socket. ``socket`` may be one
    opened elsewhere (a ``Borrowed``), whatever thread runs the session."""

    def __init__(self, netns: str | None = None, socket: "_Socket | Borrowed | None" = None):
        self.netns = netns  # for messages only: the socket belongs to the opening thread's namespace
        self._socket = socket

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    @property
    def socket(self) -> "_Socket | Borrowed":
        if self._socket is None:
            self._socket = _Socket()
        return self._socket

    def apply(self, ops: Sequence[Op], *, force: bool = False) -> list[str]:
        """``ops`` in order; ``NetlinkFailed`` at the first refusal, or (``force``) every failure returned."""
        errors: list[str] = []
        for op in ops:
            try:
                op.run(None if isinstance(op, (AddNetns, DelNetns)) else self.socket)
            except Exception as err:  # noqa: BLE001 - pyroute2's and the OS's refusals, translated once here
                failure = err if isinstance(err, NetlinkFailed) else _failure(op, err, self.netns)
                if not force:
                    raise failure from err
                errors.append(str(failure))
        return errors

    def link_exists(self, name: str) -> bool:
        """Whether there is a link ``name`` (one lookup by name, not a dump of every link)."""
        try:
            self.socket.index(name)
        except OSError as err:
            if err.errno == errno_.ENODEV:
                return False
            raise _failure(f"link show dev {name}", err, self.netns) from err
        except Exception as err:  # noqa: BLE001 - pyroute2's refusals
            raise _failure(f"link show dev {name}", err, self.netns) from err
        return True


class Rtnetlink(Protocol):
    """What the Pod network asks of rtnetlink, one namespace or another: this module itself is
    one (``from kubesvc.kernel import links``), ``kernel.fake.links.FakeNetwork`` its stateful fake."""

    def apply(self, ops: Sequence[Op], netns: str | None = None, *, force: bool = False) -> list[str]: ...
    def link_names(self, netns: str | None = None) -> set[str]: ...
    def link_info(self, name: str, netns: str | None = None) -> "LinkInfo | None": ...
    def link_exists(self, name: str, netns: str | None = None) -> bool: ...


def _apply_here(ops: Sequence[Op], netns: str | None, force: bool) -> list[str]:
    with Session(netns) as session:
        return session.apply(ops, force=force)


def apply(ops: Sequence[Op], netns: str | None = None, *, force: bool = False) -> list[str]:
    """Carry out ``ops`` in order inside ``netns`` (None: the calling thread's namespace).
    Raises ``NetlinkFailed`` at the first refusal, or with ``force`` returns every failure."""
    if not ops:
        return []
    return knetns.on_thread(netns, _apply_here, list(ops), netns, force)


async def apply_async(ops: Sequence[Op], netns: str | None = None, *, force: bool = False) -> list[str]:
    """``apply`` without blocking the event loop (None: the loop thread's namespace)."""
    if not ops:
        return []
    return await knetns.on_thread_async(netns, _apply_here, list(ops), netns, force)


# ---------------------------------------------------------------------------------------------
# what exists


@dataclass(frozen=True)
class LinkInfo:
    """A link's kind (``bridge``, ``veth``; None for a plain device) and its addresses
    (``a.b.c.d/len``, IPv6 link-local ones left out)."""

    kind: str | None
    addresses: tuple[str, ...]


def parse_link_info(link: Any, addresses: Iterable[Any]) -> LinkInfo:
    """A ``LinkInfo`` from pyroute2's ``ifinfmsg`` and the ``ifaddrmsg`` of that link (or dicts
    with the same keys: ``IFLA_LINKINFO``/``IFLA_INFO_KIND``, ``family``, ``prefixlen``,
    ``IFA_LOCAL``/``IFA_ADDRESS``)."""
    info = link.get("IFLA_LINKINFO")
    kind = info.get("IFLA_INFO_KIND") if info else None
    found = []
    for msg in addresses:
        local = msg.get("IFA_LOCAL") or msg.get("IFA_ADDRESS")
        if local and not local.lower().startswith("fe80:"):
            found.append(f"{local}/{msg['prefixlen']}")
    return LinkInfo(kind, tuple(found))


def _query(request: str, fn, *args):
    """``fn(ipr, *args)`` on a fresh socket; a refusal raised as ``NetlinkFailed`` naming ``request``."""
    try:
        with _Socket() as sock:
            return fn(sock, *args)
    except Exception as err:  # noqa: BLE001 - pyroute2's and the OS's refusals, translated once here
        raise _failure(request, err, None) from err


def _info(sock: _Socket, name: str) -> LinkInfo | None:
    try:
        index = sock.index(name)
    except OSError:
        return None
    return parse_link_info(sock.ipr.get_links(index)[0], sock.ipr.get_addr(index=index))


def _link_info(name: str) -> LinkInfo | None:
    return _query(f"address show dev {name}", _info, name)


def _link_names() -> set[str]:
    return _query("link show", lambda sock: {link.get("IFLA_IFNAME") for link in sock.ipr.get_links()})


def link_info(name: str, netns: str | None = None) -> LinkInfo | None:
    """Link ``name``'s kind and addresses, None if there is no such link."""
    return knetns.on_thread(netns, _link_info, name)


async def link_info_async(name: str, netns: str | None = None) -> LinkInfo | None:
    return await knetns.on_thread_async(netns, _link_info, name)


def link_names(netns: str | None = None) -> set[str]:
    """The names of every link (``ip link show``)."""
    return knetns.on_thread(netns, _link_names)


async def link_names_async(netns: str | None = None) -> set[str]:
    return await knetns.on_thread_async(netns, _link_names)


def _link_exists(name: str) -> bool:
    try:
        socket.if_nametoindex(name)  # an ioctl in the thread's namespace: no netlink socket
    except OSError:
        return False
    return True


def link_exists(name: str, netns: str | None = None) -> bool:
    """Whether there is a link ``name``."""
    return knetns.on_thread(netns, _link_exists, name)


def _routable(ip: str) -> bool:
    from pyroute2.netlink.exceptions import NetlinkError

    with _Socket() as sock:
        try:
            return bool(sock.route("get", dst=ip))
        except NetlinkError:
            return False


def routable(ip: str, netns: str | None = None) -> bool:
    """Whether there is a route to ``ip`` (``ip route get`` succeeds)."""
    return knetns.on_thread(netns, _routable, ip)
