"""Long-lived TCP connections, held open inside a namespace and driven from the test.

    python -m tests.support.held_connection 10.96.0.10 9090 [--count 3] [--timeout 5]

opens ``--count`` connections one after another (each retrying refusals and timeouts until
``--timeout``; the next opened only once the previous one is established), printing the first
line each server sends (backend_server's ``--echo`` port: ``"<name> <source ip>"``). Then for
every line on stdin it sends the line on every connection and prints each answer
(``"<name> <line>"``, or ``closed`` if that server has gone), one per line. A ``reset`` line
closes them all with an RST (SO_LINGER 0: no TIME_WAIT left behind, on the client or in
IPVS); end of input closes them normally.

:class:`HeldConnections` is the test's side: open them in a namespace, ``say``, ``reset``.
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import time


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((host, port), timeout=1.0)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    streams = []
    for _ in range(args.count):
        sock = _connect(args.host, args.port, args.timeout)
        sock.settimeout(None)
        stream = sock.makefile("rwb")
        streams.append((sock, stream))
        print(stream.readline().decode().strip() or "closed", flush=True)
    for line in sys.stdin:
        if line.strip() == "reset":
            for sock, _ in streams:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            break
        for _, stream in streams:
            try:
                stream.write(line.encode())
                stream.flush()
                answer = stream.readline().decode().strip()
            except OSError:
                answer = ""
            print(answer or "closed", flush=True)
    for sock, stream in streams:
        stream.close()
        sock.close()


class HeldConnections:
    """The connections as a test holds them: ``greetings`` are the servers' first lines."""

    def __init__(self, process: subprocess.Popen, count: int):
        self.process = process
        self.greetings = [self._line() for _ in range(count)]

    @classmethod
    def open(cls, ns, host: str, port: int, count: int = 1, timeout: float = 5.0) -> "HeldConnections":
        """Connected from inside ``ns`` (a tests.support.netns Netns)."""
        process = ns.popen(*ns.python("tests.support.held_connection", host, str(port), "--count", str(count), "--timeout", str(timeout)),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return cls(process, count)

    @property
    def backends(self) -> list[str]:
        """Which backend each connection landed on, in opening order."""
        return [greeting.split()[0] for greeting in self.greetings]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            raise AssertionError(f"held connections ended (exit {self.process.wait()})")
        return line

    def say(self, text: str) -> list[str]:
        """``text`` sent on every connection; the answers (``"<name> <text>"``, or ``closed``)."""
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        return [self._line() for _ in self.greetings]

    def reset(self) -> None:
        """Every connection closed with an RST; waits for the process to end."""
        if self.process.poll() is not None:
            return
        assert self.process.stdin is not None
        self.process.stdin.write("reset\n")
        self.process.stdin.close()
        self.process.wait(timeout=30)


if __name__ == "__main__":
    main()
