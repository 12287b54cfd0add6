"""The TCP relay's own event loop: one thread, one edge-triggered epoll set, no asyncio.

Upstream's userspace proxy runs a goroutine pair per connection on Go's netpoller; HAProxy runs
one epoll loop per thread. In Python the cheapest equivalent is one thread blocked in
``epoll_wait`` on every relayed socket and listening socket, calling each socket's handler
directly: no event loop layered on another (uvloop's own epoll around ours cost a second
``epoll_wait`` and a dispatch per batch), no callbacks scheduled per event. The proxy's asyncio
loop keeps the decisions (which listeners exist, which endpoint a connection gets) and hands
the relay only listening sockets and an endpoint chooser.

Threading rules (one relay thread per process, started on first use):

* only the relay thread touches what the loop owns (its epoll set, handlers, timers, and the
  sockets registered in it); another thread asks with ``call(fn)``, which runs ``fn`` on the
  relay thread between two batches of events (what it closes is closed when it returns) and
  waits for its result. So a descriptor closed
  for one connection can never be reused, while an event for it is still to be handed out, by
  a socket another thread opened;
* within a batch of events, ``close`` defers closing to the batch's end for the same reason;
* a handler that raises is logged and the loop goes on (one broken connection must not stop
  every other).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("kubesvc.proxy.userspace")
_monotonic = time.monotonic

MAX_EVENTS = 256  # per epoll_wait (the rest wait for the next one; level or edge, none is lost)


class Timer:
    __slots__ = ("when", "fn")

    def __init__(self, when: float, fn: Callable[[], None] | None):
        self.when, self.fn = when, fn

    def cancel(self) -> None:
        self.fn = None


class RelayLoop:
    """The relay thread's loop. ``register``/``close``/``later``/``call_at`` are for the relay
    thread only (handlers and ``call`` run there); ``call`` is for any thread."""

    def __init__(self) -> None:
        self.ep = select.epoll()
        self.handlers: dict[int, Callable[[int], None]] = {}
        self.dispatching = False
        self.closing: list = []  # sockets closed during a batch: closed at its end
        self.resume: list = []  # directions that left bytes unread: resumed after the next batch
        self.timers: list[tuple[float, int, Timer]] = []
        # The clock read once per batch, when epoll_wait returns: what the batch's handlers and
        # timers go by (a clock read costs about as much as a system call on a VM).
        self.now = _monotonic()
        self.seq = itertools.count()
        self.calls: deque = deque()
        self.wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.ep.register(self.wakeup, select.EPOLLIN)
        self.handlers[self.wakeup] = self._woken
        self.thread = threading.Thread(target=self._run, name="userspace-relay", daemon=True)
        self.thread.start()

    # ---- for the relay thread ----

    def register(self, sock, handler: Callable[[int], None], events: int) -> None:
        fd = sock.fileno()
        self.ep.register(fd, events)
        self.handlers[fd] = handler

    def unregister(self, sock) -> None:
        fd = sock.fileno()
        self.handlers.pop(fd, None)
        self.ep.unregister(fd)

    def close(self, sock) -> None:
        """Close ``sock`` (closing removes it from the epoll set, whether it was registered or
        not); within a batch of events, at the batch's end, so that no descriptor number is
        reused by a new socket while an event for the old one is still to be handed out."""
        self.handlers.pop(sock.fileno(), None)  # (only this socket can hold its number while open)
        if self.dispatching:
            self.closing.append(sock)
        else:
            sock.close()

    def later(self, pump) -> None:
        """Call ``pump.readable(0)`` after the next batch of events (it left bytes unread: no new
        edge would come for them)."""
        self.resume.append(pump)

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        """Run ``fn`` at ``when`` (``time.monotonic``; the relay thread's handlers count from
        ``now``)."""
        timer = Timer(when, fn)
        heapq.heappush(self.timers, (when, next(self.seq), timer))
        return timer

    # ---- for any thread ----

    def call(self, fn: Callable, *args):
        """Run ``fn(*args)`` on the relay thread and return its result (or raise its exception);
        at once when called there."""
        if threading.get_ident() == self.thread.ident:
            return fn(*args)
        done = threading.Event()
        outcome: list = []
        self.calls.append((fn, args, outcome, done))
        os.eventfd_write(self.wakeup, 1)
        done.wait()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    # ---- the thread ----

    def _woken(self, events: int) -> None:
        try:
            os.eventfd_read(self.wakeup)
        except BlockingIOError:
            pass

    def _run_calls(self) -> None:
        """Between batches (not dispatching): what a call closes is closed when it returns."""
        calls = self.calls
        while calls:
            fn, args, outcome, done = calls.popleft()
            try:
                outcome.append((True, fn(*args)))
            except BaseException as err:  # handed to the caller
                outcome.append((False, err))
            done.set()

    def _expire(self) -> None:
        timers = self.timers
        now = self.now
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)[2]
            fn, timer.fn = timer.fn, None
            if fn is not None:
                try:
                    fn()
                except Exception:
                    log.exception("userspace relay: a timer failed")

    def _run(self) -> None:
        poll, handlers, timers, heappop = self.ep.poll, self.handlers, self.timers, heapq.heappop
        now = self.now
        while True:
            # epoll_wait blocks until the earliest timer, counted from the last batch's clock
            # (late by at most that batch's dispatch, a fraction of a millisecond next to dial
            # timeouts of 250 ms and more): no clock read before it
            timeout = -1
            if self.resume:
                timeout = 0
            elif timers:
                while timers and timers[0][2].fn is None:
                    heappop(timers)
                if timers:
                    timeout = timers[0][0] - now
                    if timeout < 0:
                        timeout = 0
            events = poll(timeout, MAX_EVENTS)
            self.now = now = _monotonic()
            self.dispatching = True
            try:
                for fd, mask in events:
                    handler = handlers.get(fd)
                    if handler is not None:
                        try:
                            handler(mask)
                        except Exception:
                            log.exception("userspace relay: an event handler failed")
                if self.resume:
                    resume, self.resume = self.resume, []
                    for pump in resume:
                        try:
                            pump.readable(0)
                        except Exception:
                            log.exception("userspace relay: an event handler failed")
                if timers and timers[0][0] <= now:
                    self._expire()
            finally:
                self.dispatching = False
                if self.closing:
                    closing, self.closing = self.closing, []
                    for sock in closing:
                        sock.close()
            if self.calls:
                self._run_calls()


_loop: RelayLoop | None = None
_loop_lock = threading.Lock()


def relay_loop() -> RelayLoop:
    """The process's relay loop (started on first use)."""
    global _loop
    if _loop is None:
        with _loop_lock:
            if _loop is None:
                _loop = RelayLoop()
    return _loop
