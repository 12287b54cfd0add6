"""Pods' servers as threads of the test process, for the IPVS VM: a ``backend_server`` process
costs about 4.5 s of emulated CPU to start (Python, asyncio) and every test makes three or more.

A :class:`ThreadedServer` runs ``tests.support.backend_server``'s own ``serve`` (the same answers:
``"<name> <source ip>"`` per connection or datagram, the echo ports held open) on an event loop
in a thread that entered the Pod's network namespace (``call_in_netns``), so every socket it
makes lives there: the traffic crosses the same veth, bridge and IPVS rules as a process's
would. ``close`` ends it and aborts every socket it still has, connections held open included
(what killing the process did), so the namespace goes with ``ip netns del``.

``pods_as_threads`` (a context) makes ``Cluster.add_pod``'s server such a thread and
``remove_pod``/``close`` stop it (tests/kernel/vm/conftest.py applies it to every VM test).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import pytest

from tests.support import backend_server
from tests.support.netns import Cluster, Pod, call_in_netns
from tests.support.slowdown import scaled

START_TIMEOUT = 15  # seconds (scaled) for the sockets to listen


class ThreadedServer:
    """``backend_server.serve(name, ...)`` in namespace ``ns_name``, on a thread of this process."""

    def __init__(self, ns_name: str, name: str, *, tcp=(8080,), udp=(8080,), echo=(), host: str = "0.0.0.0"):
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None
        listening = threading.Event()

        def run() -> None:
            try:
                call_in_netns(ns_name, self._serve, list(tcp), list(udp), list(echo), host, listening.set)
            except BaseException as exc:  # noqa: BLE001 - reported by the constructor or close()
                self.error = exc
            finally:
                listening.set()

        self.thread = threading.Thread(target=run, name=f"pod-{name}", daemon=True)
        self.thread.start()
        if not listening.wait(scaled(START_TIMEOUT)) or self.error is not None:
            self.close()
            raise AssertionError(f"the server of Pod {name} in {ns_name} did not start: {self.error!r}")

    def _serve(self, tcp, udp, echo, host, ready) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(_quiet_cancellation)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(backend_server.serve(self.name, tcp, udp, host, echo, ready=ready))
            # the connection handlers (held echo connections) outlive the servers: cancel them,
            # then abort every transport left (UDP socket, connections) as a killed process would
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for transport in list(loop._transports.values()):  # noqa: SLF001 - the loop's own registry of open sockets
                transport.abort()
            for _ in range(3):  # abort() closes the socket from a callback
                loop.run_until_complete(asyncio.sleep(0))
        finally:
            loop.close()

    def close(self, timeout: float = 10) -> None:
        if self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self.loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(self.loop)])
            self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the server of Pod {self.name} did not stop within {timeout}s")


def _quiet_cancellation(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """asyncio's stream callback reports each connection handler cancelled by ``close``."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


_servers: dict[int, ThreadedServer] = {}  # id(Pod) -> its server


def _start_server(cluster: Cluster, pod: Pod, *, tcp=(8080,), udp=(8080,), echo=(), wait: bool = True) -> None:
    _servers[id(pod)] = ThreadedServer(pod.ns.name, pod.name, tcp=tcp, udp=udp, echo=echo)


def _stop_server(pod: Pod) -> None:
    server = _servers.pop(id(pod), None)
    if server is not None:
        server.close()


@contextlib.contextmanager
def pods_as_threads() -> Iterator[None]:
    remove_pod, close = Cluster.remove_pod, Cluster.close

    def remove_pod_and_server(cluster: Cluster, pod: Pod) -> None:
        _stop_server(pod)
        remove_pod(cluster, pod)

    def close_with_servers(cluster: Cluster) -> None:
        for pod in list(cluster.pods):
            _stop_server(pod)
        close(cluster)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Cluster, "start_server", _start_server)
        patch.setattr(Cluster, "remove_pod", remove_pod_and_server)
        patch.setattr(Cluster, "close", close_with_servers)
        yield
