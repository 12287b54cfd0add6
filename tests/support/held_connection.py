"""Long-lived TCP connections from inside a namespace, held open and driven by the test.

The sockets are made in the namespace (``socket_in``: a thread enters it with setns(2)), so the
connections come from there while the test process drives them; no helper process to start.
A backend_server ``--echo`` port greets each connection with ``"<name> <source ip>"`` and
answers every line with ``"<name> <line>"``: which backend a connection landed on, and
whether it still works after the endpoints changed underneath.

``reset`` closes with an RST (SO_LINGER 0): the connection leaves no TIME_WAIT behind, on the
client or in IPVS's connection table, whose CLOSE state lasts 10 s instead of 2 minutes.
"""

from __future__ import annotations

import socket
import struct
import time

from tests.support.netns import socket_in


def _connect(ns_name: str, host: str, port: int, timeout: float) -> tuple[socket.socket, str]:
    deadline = time.monotonic() + timeout
    while True:
        sock = socket_in(ns_name, socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.settimeout(1.0)
        try:
            sock.connect((host, port))
            sock.settimeout(5.0)
            return sock, _read_line(sock)
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _read_line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip() or "closed"


class HeldConnections:
    """``count`` connections opened one after another (each once the previous one is
    established); ``greetings`` are the servers' first lines, in opening order."""

    def __init__(self, ns, host: str, port: int, count: int = 1, timeout: float = 5.0):
        self.sockets: list[socket.socket] = []
        self.greetings: list[str] = []
        try:
            for _ in range(count):
                sock, greeting = _connect(ns.name, host, port, timeout)
                self.sockets.append(sock)
                self.greetings.append(greeting)
        except BaseException:
            self.reset()
            raise

    @classmethod
    def open(cls, ns, host: str, port: int, count: int = 1, timeout: float = 5.0) -> "HeldConnections":
        """Connected from inside ``ns`` (a tests.support.netns Netns)."""
        return cls(ns, host, port, count, timeout)

    @property
    def backends(self) -> list[str]:
        """Which backend each connection landed on, in opening order."""
        return [greeting.split()[0] for greeting in self.greetings]

    def say(self, text: str) -> list[str]:
        """``text`` sent on every connection; the answers (``"<name> <text>"``, or ``closed``)."""
        answers = []
        for sock in self.sockets:
            try:
                sock.sendall(text.encode() + b"\n")
                answers.append(_read_line(sock))
            except OSError:
                answers.append("closed")
        return answers

    def reset(self) -> None:
        """Every connection closed with an RST."""
        for sock in self.sockets:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            sock.close()
        self.sockets.clear()
