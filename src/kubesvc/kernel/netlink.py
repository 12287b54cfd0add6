"""rtnetlink through pyroute2: this namespace's addresses (what Go's ``net.InterfaceAddrs()`` gives
kube-proxy in upstream ``pkg/proxy/util``'s ``RealNetwork``) and the few link/address changes the
IPVS proxier makes on its dummy device (upstream ``pkg/proxy/ipvs/util/netlink_linux.go``:
``EnsureDummyDevice``, ``EnsureAddressBind``, ``UnbindAddress``, ``DeleteDummyDevice``, over
vishvananda/netlink). The link and address changes are ``kernel.links`` operation values
(``AddDummy``, ``DelLink``, ``Address``, ``DelAddress``), the same the Pod network's plans use,
run here on the cached socket; like upstream they name the device, not its index.

kube-proxy needs the addresses for ``--nodeport-addresses``: a NodePort (and a health-check node
port) is accepted only on the local addresses inside those CIDRs. They are read at every sync of
each family, so the lookup must be cheap: one ``RTM_GETADDR`` dump of that family only (the
kernel filters by ``ifa_family``) on a netlink socket kept open, about a millisecond and no
process (``ip -j addr`` cost a fork and exec each time).

Threading: pyroute2's blocking API drives an asyncio loop of its own, which cannot run inside an
already running loop (the proxy's), and a loop made by the default policy would be uvloop's in
the proxy, which cannot open a netlink socket. So every netlink call of this package runs on one
thread of ours (``call``/``call_async``), and each socket gets a plain selector loop made for it.
A socket for a named network namespace is opened while the netlink thread is inside it
(setns, then back; no ``ip netns exec``) and keeps that namespace for its life.
The other netlink families (IPVS in ``kernel.ipvs``, conntrack in ``kernel.conntrack``) use the
same thread.

Failures raise ``NetlinkFailed``, a ``CommandFailed`` whose argv is the request
(``("netlink", "addr", "add", ...)``, or ``("netlink", <operation>)`` for ``kernel.links``'s
operation values), whose code is the errno and whose output is the kernel's message: the one
error of every netlink door of the package (rtnetlink here and in ``kernel.links``, IPVS,
conntrack). Parsing the kernel's messages (``parse_addresses``) is pure, tested on plain dicts.
"""

from __future__ import annotations

import asyncio
import errno as errno_
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from kubesvc.kernel import IPV4, IPV6
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.netns import entered

T = TypeVar("T")

_AF = {IPV4: socket.AF_INET, IPV6: socket.AF_INET6}
_FAMILY_OF_AF = {socket.AF_INET: IPV4, socket.AF_INET6: IPV6}
SCOPE_LINK = 253  # RT_SCOPE_LINK: fe80::/10, 169.254.0.0/16 as the kernel assigns them
SCOPE_HOST = 254  # RT_SCOPE_HOST: loopback


class NetlinkFailed(CommandFailed):
    """The kernel refused a netlink request: ``argv`` is ``("netlink", *request)`` (a tuple of
    words, or one operation value of ``kernel.links`` printed as its ``ip -batch`` line, kept as
    ``op``), ``returncode`` the errno, ``stderr`` the kernel's message, ``input_text`` the request
    as one line; ``netns`` where it ran (None: the caller's)."""

    def __init__(self, request: Sequence[str] | object, code: int, message: str, netns: str | None = None):
        words = tuple(request) if isinstance(request, (tuple, list)) else (str(request),)
        self.op, self.netns = request, netns
        line = " ".join(words)
        super().__init__(("netlink", *words), code, "", message, line)
        where = f" (netns {netns})" if netns else ""
        self.args = (f"{line}{where}: {message}",)

    def __str__(self) -> str:
        return self.args[0]


# ---- the netlink thread ---------------------------------------------------------------------------

_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="netlink")
_after_fork: list[Callable[[], None]] = []  # what each socket cache forgets in a forked child


def _forked() -> None:
    """In a forked child: the netlink thread did not come along (a submit would wait forever) and
    the sockets are the parent's; start afresh."""
    global _thread
    _thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="netlink")
    for forget in _after_fork:
        forget()


os.register_at_fork(after_in_child=_forked)


def on_fork(forget: Callable[[], None]) -> None:
    """Have a forked child call ``forget`` (a socket cache's ``clear``)."""
    _after_fork.append(forget)


def call(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` on the netlink thread, blocking until it returns."""
    return _thread.submit(fn, *args).result()


async def call_async(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` on the netlink thread without blocking the event loop."""
    return await asyncio.wrap_future(_thread.submit(fn, *args))


def _make(factory: Callable[..., T], kwargs: dict) -> T:
    sock = factory(use_event_loop=asyncio.SelectorEventLoop(), **kwargs)
    if asyncio.iscoroutinefunction(getattr(sock, "setup_endpoint", None)):  # an Async* class: open it now
        sock.event_loop.run_until_complete(sock.setup_endpoint())
    return sock


def open_socket(factory: Callable[..., T], netns: str | None = None, **kwargs) -> T:
    """An open pyroute2 socket (``IPRoute``, ``IPVS``, ``AsyncConntrack``...) with a plain
    selector loop of its own, bound to ``netns`` (None: ours). Called on the netlink thread
    (pyroute2 ties the loop to the thread that made it), which enters ``netns`` only while the
    socket is made."""
    if netns is None:
        return _make(factory, kwargs)
    return entered(netns, _make, factory, kwargs)


def failed(request: Sequence[str], err: BaseException) -> NetlinkFailed:
    """``err`` from pyroute2 (a ``NetlinkError`` carries ``code``) as a ``NetlinkFailed``."""
    code = getattr(err, "code", None) or getattr(err, "errno", None) or errno_.EIO
    return NetlinkFailed(request, code, str(err) or errno_.errorcode.get(code, "netlink error"))


_routes: dict[str | None, Any] = {}  # netns -> IPRoute, touched on the netlink thread only
on_fork(_routes.clear)


def _iproute(netns: str | None):
    ipr = _routes.get(netns)
    if ipr is None:
        from pyroute2 import IPRoute

        ipr = _routes[netns] = open_socket(IPRoute, netns)
    return ipr


def _close(sock) -> None:
    try:
        if sock is not None:
            sock.close()
    except Exception:  # noqa: BLE001 - closing a broken socket
        pass


def _route_call(request: Sequence[str], netns: str | None, fn: Callable[[Any], T]) -> T:
    """``fn(ipr)`` as a function for ``call``; on a failure the socket is dropped (the next call
    opens a fresh one) unless the kernel refused the request, and the failure raised as ``NetlinkFailed``."""
    def body() -> T:
        try:
            return fn(_iproute(netns))
        except Exception as err:  # noqa: BLE001 - pyroute2's errors: translated once, here
            named = isinstance(err, NetlinkFailed)  # by ``kernel.links``, naming its operation
            if getattr(err.__cause__ if named else err, "code", None) is None:  # not the kernel's refusal: a broken socket
                _close(_routes.pop(netns, None))
            if named:
                raise
            raise failed(request, err) from err
    return body


# ---- addresses ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Address:
    """One interface address: ``index`` is the interface's, ``family`` 4 or 6, ``scope`` the
    kernel's (0 global, 253 link, 254 host)."""

    index: int
    family: int
    address: str
    prefixlen: int
    scope: int = 0


def parse_addresses(messages: Iterable[Mapping[str, Any]], family: int | None = None) -> list[Address]:
    """``RTM_NEWADDR`` messages (pyroute2's ``ifaddrmsg``, or dicts with the same keys:
    ``family``, ``index``, ``prefixlen``, ``scope``, ``IFA_LOCAL``/``IFA_ADDRESS``) as
    ``Address`` values in the kernel's order, optionally one family (4 or 6) only. The local
    address is ``IFA_LOCAL`` (on a point-to-point link ``IFA_ADDRESS`` is the peer), else
    ``IFA_ADDRESS`` (IPv6 sends only that)."""
    result: list[Address] = []
    for msg in messages:
        fam = _FAMILY_OF_AF.get(msg.get("family"))
        if fam is None or (family is not None and fam != family):
            continue
        address = msg.get("IFA_LOCAL") or msg.get("IFA_ADDRESS")
        if address:
            result.append(Address(msg.get("index") or 0, fam, address, msg.get("prefixlen") or 0, msg.get("scope") or 0))
    return result


def unique_ips(addresses: Iterable[Address]) -> list[str]:
    """The IPs in order, each once (an address on two interfaces)."""
    return list(dict.fromkeys(a.address for a in addresses))


def addresses(family: int | None = None, netns: str | None = None) -> list[Address]:
    """Every interface address here (loopback included), one family or both."""
    kwargs = {"family": _AF[family]} if family is not None else {}
    return call(_route_call(("addr", "dump"), netns, lambda ipr: parse_addresses(ipr.get_addr(**kwargs), family)))


async def addresses_async(family: int | None = None, netns: str | None = None) -> list[Address]:
    kwargs = {"family": _AF[family]} if family is not None else {}
    return await call_async(_route_call(("addr", "dump"), netns, lambda ipr: parse_addresses(ipr.get_addr(**kwargs), family)))


def local_addresses(family: int | None = None) -> list[str]:
    """The IPs of every interface here (loopback included); raises ``NetlinkFailed``."""
    return unique_ips(addresses(family))


async def local_addresses_async(family: int | None = None) -> list[str]:
    """``local_addresses`` without blocking the event loop."""
    return unique_ips(await addresses_async(family))


# ---- links and their addresses (the IPVS dummy device) -------------------------------------------
# Link and address changes are ``kernel.links`` operation values run on the cached socket (``links.Borrowed``),
# so a refusal names the ``ip -batch`` line as a Pod network plan's does.


def _session(ipr, netns: str | None):
    from kubesvc.kernel import links  # links imports this module (its error)

    return links.Session(netns, links.Borrowed(ipr))


def _link_index(ipr, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None


async def link_index(name: str, netns: str | None = None) -> int | None:
    """The interface index of ``name``, None when there is no such link."""
    return await call_async(_route_call(("link", "get", name), netns, lambda ipr: _link_index(ipr, name)))


async def ensure_dummy(name: str, netns: str | None = None) -> int:
    """The index of dummy link ``name``, created (``links.AddDummy``: down, as upstream leaves it)
    when missing."""
    def body(ipr) -> int:
        from kubesvc.kernel.links import AddDummy

        session = _session(ipr, netns)
        if not session.link_exists(name):
            session.apply([AddDummy(name)])
            session.socket.forget(name)
        return session.socket.index(name)
    return await call_async(_route_call(("link", "add", name, "type", "dummy"), netns, body))


def delete_link_sync(name: str, netns: str | None = None) -> bool:
    """Delete link ``name`` (``links.DelLink``); False when it did not exist."""
    def body(ipr) -> bool:
        from kubesvc.kernel.links import DelLink

        session = _session(ipr, netns)
        if not session.link_exists(name):
            return False
        session.apply([DelLink(name)])
        return True
    return call(_route_call(("link", "del", name), netns, body))


def link_exists_sync(name: str, netns: str | None = None) -> bool:
    return call(_route_call(("link", "get", name), netns, lambda ipr: _session(ipr, netns).link_exists(name)))


def host_prefix(address: str) -> int:
    return 128 if ":" in address else 32


async def add_address(dev: str, address: str, netns: str | None = None) -> None:
    """Bind ``address`` as a host route (/32, /128) to link ``dev`` (``links.Address``; no
    ``nodad``, as upstream's ``EnsureAddressBind``); already bound is fine."""
    def body(ipr) -> None:
        from kubesvc.kernel.links import Address as AddressOp

        try:
            _session(ipr, netns).apply([AddressOp(dev, f"{address}/{host_prefix(address)}")])
        except NetlinkFailed as err:
            if err.returncode != errno_.EEXIST:
                raise
    await call_async(_route_call(("addr", "add", f"{address}/{host_prefix(address)}", "dev", dev), netns, body))


async def del_address(dev: str, address: str, netns: str | None = None) -> None:
    """Unbind ``address`` from link ``dev`` (``links.DelAddress``, upstream ``UnbindAddress``);
    not bound is fine."""
    def body(ipr) -> None:
        from kubesvc.kernel.links import DelAddress

        try:
            _session(ipr, netns).apply([DelAddress(dev, f"{address}/{host_prefix(address)}")])
        except NetlinkFailed as err:
            if err.returncode not in (errno_.EADDRNOTAVAIL, errno_.ENOENT, errno_.ESRCH):
                raise
    await call_async(_route_call(("addr", "del", f"{address}/{host_prefix(address)}", "dev", dev), netns, body))


class Links:
    """The link and address calls of one namespace as an object, for the IPVS proxier's dummy
    device (``kernel.fake.netlink.FakeLinks`` is its in-memory twin)."""

    def __init__(self, netns: str | None = None):
        self.netns = netns

    async def ensure_dummy(self, name: str) -> int:
        return await ensure_dummy(name, self.netns)

    async def addresses(self, family: int | None = None) -> list[Address]:
        return await addresses_async(family, self.netns)

    async def add_address(self, dev: str, address: str) -> None:
        await add_address(dev, address, self.netns)

    async def del_address(self, dev: str, address: str) -> None:
        await del_address(dev, address, self.netns)
