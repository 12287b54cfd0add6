"""Listening sockets as Go's ``net.Listen("tcp", host:port)`` makes them, so every kubesvc
server binds as its upstream binary does: an unspecified host (``""``, ``0.0.0.0``, ``::``)
is one dual-stack socket where the kernel allows IPv6, ``SO_REUSEADDR`` is set, and the socket
is non-blocking for asyncio."""

from __future__ import annotations

import errno
import socket


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket as Go's ``net.Listen("tcp", host:port)`` makes it: an unspecified
    host (``""``, ``0.0.0.0``, ``::``) is one dual-stack IPv6 socket where the kernel allows it,
    else IPv4 ``0.0.0.0``; ``SO_REUSEADDR`` is set."""
    if host in ("", "0.0.0.0", "::"):
        try:
            return _bound(socket.AF_INET6, "::", port, dual_stack=True)
        except OSError as err:
            if err.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT):
                raise
        return _bound(socket.AF_INET, "0.0.0.0", port)
    return _bound(socket.AF_INET6 if ":" in host else socket.AF_INET, host, port)


def _bound(family: int, host: str, port: int, dual_stack: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
