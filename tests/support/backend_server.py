"""A Pod's workload for kernel tests: answers every TCP connection and every UDP datagram with
``"<name> <source ip it saw>\\n"``, so a test learns both where a connection landed and whether
the proxy masqueraded it.

    python -m tests.support.backend_server --name web-0 --tcp 8080 --udp 8080 [--echo 9090]

An ``--echo`` port keeps each connection open after that first line and answers every line the
client sends with ``"<name> <line>"``, until the client closes: a long-lived connection, for
tests of what happens to established connections (tests/support/held_connection.py).

Run inside a Pod's network namespace (``ip netns exec``); prints ``ready`` on stdout once both
sockets listen, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Callable


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, name: str):
        self.name = name
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        assert self.transport is not None
        self.transport.sendto(f"{self.name} {addr[0]}\n".encode(), addr)


async def serve(name: str, tcp_ports: list[int], udp_ports: list[int], host: str, echo_ports: list[int] = (),
                ready: Callable[[], None] | None = None) -> None:
    """Serves until cancelled; once every socket listens, calls ``ready`` (default: prints
    ``ready``, what the harness waits for from a process)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            writer.write(f"{name} {peer[0]}\n".encode())
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            writer.write(f"{name} {peer[0]}\n".encode())
            while line := await reader.readline():
                writer.write(f"{name} ".encode() + line)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    loop = asyncio.get_running_loop()
    servers = [await asyncio.start_server(answer, host, port, backlog=1024, reuse_address=True) for port in tcp_ports]
    servers += [await asyncio.start_server(echo, host, port, reuse_address=True) for port in echo_ports]
    for port in udp_ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        await loop.create_datagram_endpoint(lambda: _Udp(name), sock=sock)
    if ready is None:
        print("ready", flush=True)
    else:
        ready()
    await asyncio.gather(*(server.serve_forever() for server in servers)) if servers else await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--tcp", type=int, action="append", default=[], help="TCP port (repeatable)")
    parser.add_argument("--udp", type=int, action="append", default=[], help="UDP port (repeatable)")
    parser.add_argument("--echo", type=int, action="append", default=[], help="TCP port whose connections stay open (repeatable)")
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.name, args.tcp, args.udp, args.host, args.echo))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
