"""Leader election with a coordination.k8s.io/v1 Lease (client-go's ``tools/leaderelection``).

Several copies of a controller-manager may run for availability, but only one may act at a
time. They agree through one Lease object (by default ``kube-system/kube-controller-manager``)
whose spec is the *election record*::

    holderIdentity        who leads ("" once released)          e.g. "host-a_5b0c…"
    leaseDurationSeconds  how long candidates must wait          15
    acquireTime           when the holder took it (MicroTime)    2026-01-01T00:00:00.000000Z
    renewTime             the holder's last renewal (MicroTime)  2026-01-01T00:03:12.418203Z
    leaseTransitions      how often the holder has changed       3

A candidate that finds no Lease creates one naming itself. A candidate that finds a Lease held
by someone else waits; it may take over once the record has stayed *unchanged* for
``leaseDurationSeconds``, or at once when ``holderIdentity`` is empty (the holder released it).
The leader renews (rewrites ``renewTime``) every ``retry_period``. Every write is a PUT carrying
the ``metadata.resourceVersion`` last read, so when two candidates race for an expired Lease the
apiserver accepts exactly one and answers 409 Conflict to the other: two candidates never both
win the same record.

**Observed time, not remote time.** A candidate never compares ``renewTime`` with its own wall
clock: the timestamp was written by another machine whose clock may be skewed by minutes. It
only uses the *fact that the record changed*: it remembers, on its own monotonic clock, when it
last saw the record differ from what it saw before (``observed_time``), and considers the lease
expired when ``observed_time + leaseDurationSeconds`` has passed. So arbitrary clock *offsets*
between machines are harmless; only clock *rates* must roughly agree.

**Why the leader stops before anyone else can start.** The leader counts its renew deadline
from the *start* of its last successful write. Any other candidate saw that write after it
began, so it waits at least ``leaseDuration`` from a later moment. With
``renew_deadline < lease_duration`` the old leader has stopped (its work cancelled) before the
earliest moment another one can take over; the gap is the tolerance for clock-rate skew and
scheduling delay. (This is no fencing: work the leader started must itself be cancellable.)

**Timing** (kube-controller-manager's ``--leader-elect-*`` flags, defaults in brackets):
``lease_duration`` [15 s] how long followers wait without seeing a change; ``renew_deadline``
[10 s] how long the leader keeps trying to renew before it gives up leading; ``retry_period``
[2 s] the pause between attempts. Candidates pause ``retry_period * (1 + 1.2 * random())``
between acquire attempts (``JitterFactor`` 1.2), so they do not hammer the apiserver in step.
The constructor checks, as upstream's ``NewLeaderElector`` does, with its messages::

    lease_duration > renew_deadline > retry_period * 1.2,   all > 0

``leaseDurationSeconds`` is whole seconds; a fractional ``lease_duration`` (tests) is rounded
*up* in the record, so followers never wait less than configured (upstream truncates; for the
whole-second values every real configuration uses, the two agree).

**Lifecycle** of ``LeaderElector.run(lead)``:

1. acquire: try every jittered retry period until this candidate holds the Lease;
2. lead: start ``lead()`` as a task, renew every ``retry_period``;
3. stop, one of three ways, always cancelling and awaiting the ``lead`` task first, then (with
   ``release_on_cancel``) releasing the Lease -- ``holderIdentity: ""``,
   ``leaseDurationSeconds: 1`` -- so a follower takes over within one retry period instead of
   a whole lease duration:

   * ``lead()`` returned: ``run`` returns its value; ``lead()`` raised: ``run`` re-raises it;
   * ``run`` was cancelled: ``CancelledError`` propagates after the release;
   * no renewal succeeded within ``renew_deadline``: log ``leaderelection lost`` and raise
     ``LeadershipLost`` (the controller-manager then exits non-zero, as upstream's does).

Decisions read the injected ``Clock`` (``monotonic()`` for observed time and deadlines,
``now()`` for the MicroTime stamps); pauses are real ``asyncio`` sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kubesvc.client.rest import LEASES, ClientError, RestClient, is_conflict, is_not_found
from kubesvc.util.clock import Clock, RealClock
from kubesvc.util.golang import rfc3339_micro

log = logging.getLogger("kubesvc.leaderelection")

JITTER_FACTOR = 1.2

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_NAME = "kube-controller-manager"
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0

T = TypeVar("T")


class LeadershipLost(Exception):
    """The leader could not renew its Lease within ``renew_deadline``; its ``lead`` task has
    been cancelled. The process should exit (non-zero), as kube-controller-manager does."""


def default_identity() -> str:
    """The identity kube-controller-manager uses: ``<hostname>_<uuid>`` (unique per process,
    so a restarted process is a new candidate, not the old leader)."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def validate_timing(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """Raise ``ValueError`` unless ``lease_duration > renew_deadline > retry_period * 1.2 > 0``
    (checks and messages in upstream ``NewLeaderElector``'s order)."""
    if lease_duration <= renew_deadline:
        raise ValueError("leaseDuration must be greater than renewDeadline")
    if renew_deadline <= JITTER_FACTOR * retry_period:
        raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
    if lease_duration <= 0:
        raise ValueError("leaseDuration must be greater than zero")
    if renew_deadline <= 0:
        raise ValueError("renewDeadline must be greater than zero")
    if retry_period <= 0:
        raise ValueError("retryPeriod must be greater than zero")


@dataclass(frozen=True)
class LeaderElectionRecord:
    """The election state held in a Lease's spec (resourcelock's ``LeaderElectionRecord``).

    Times are kept as the MicroTime strings the server renders: they are only ever compared
    for equality (has the record changed?), never against a local clock.
    """

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    leader_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict) -> LeaderElectionRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            leader_transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        """The whole Lease spec for this record (upstream replaces the spec wholesale)."""
        return {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.leader_transitions,
        }


class LeaderElector:
    """One candidate for the Lease ``namespace/name``; see the module docstring.

    ``is_leader()`` is true exactly while this candidate's ``lead`` task runs under a held
    lease (between acquiring and stopping); ``leader_identity`` is the holder this candidate
    last observed in the record ("" when released or not yet seen).
    """

    def __init__(
        self,
        client: RestClient,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        name: str = DEFAULT_NAME,
        identity: str,
        lease_duration: float = DEFAULT_LEASE_DURATION,
        renew_deadline: float = DEFAULT_RENEW_DEADLINE,
        retry_period: float = DEFAULT_RETRY_PERIOD,
        clock: Clock = RealClock(),
        release_on_cancel: bool = True,
    ):
        validate_timing(lease_duration, renew_deadline, retry_period)
        if not identity:
            raise ValueError("Lock identity is empty")
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self._clock = clock
        self._leases = client.resource(LEASES)
        self._duration_seconds = max(1, math.ceil(lease_duration))
        # The Lease object as last read or written: its resourceVersion is the precondition
        # of the next PUT.
        self._lease: dict | None = None
        self._observed = LeaderElectionRecord()
        self._observed_time = clock.monotonic()
        self._reported_leader = ""
        self._leading = False
        self._random = random.Random()

    # -- state ---------------------------------------------------------------------------------

    @property
    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def is_leader(self) -> bool:
        """True while this candidate leads (its ``lead`` task runs under a held lease)."""
        return self._leading

    @property
    def leader_identity(self) -> str:
        """The holder named in the last observed record ("" if released or never seen)."""
        return self._observed.holder_identity

    @property
    def observed_record(self) -> LeaderElectionRecord:
        return self._observed

    def _holds_record(self) -> bool:
        """The last observed record names this candidate (upstream ``IsLeader``)."""
        return self._observed.holder_identity == self.identity

    def _lease_valid(self) -> bool:
        """The observed record has changed within its own ``leaseDurationSeconds``, measured
        on this candidate's monotonic clock."""
        return self._observed_time + self._observed.lease_duration_seconds > self._clock.monotonic()

    def _set_observed(self, record: LeaderElectionRecord) -> None:
        self._observed = record
        self._observed_time = self._clock.monotonic()
        holder = record.holder_identity
        if holder != self._reported_leader:
            self._reported_leader = holder
            if holder:
                log.info("new leader elected: %s", holder)

    # -- one attempt ---------------------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """One attempt to take (or, when held, renew) the Lease; True if this candidate now
        holds it. Never raises for API or connection errors (they count as a failed attempt)."""
        stamp = rfc3339_micro(self._clock.now())
        desired = LeaderElectionRecord(self.identity, self._duration_seconds, stamp, stamp, 0)

        # 1. Fast path: the holder renews optimistically against the version it last wrote.
        if self._holds_record() and self._lease_valid() and self._lease is not None:
            renewal = replace(desired, acquire_time=self._observed.acquire_time, leader_transitions=self._observed.leader_transitions)
            try:
                await self._update(renewal)
                return True
            except ClientError as err:
                log.error("Failed to update lock optimistically: %s, falling back to slow path", err)

        # 2. Read the record, or create it.
        try:
            lease = await self._leases.get(self.name, self.namespace)
        except ClientError as err:
            if not is_not_found(err):
                log.error("error retrieving resource lock %s: %s", self.describe, err)
                return False
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": desired.to_spec()}
            try:
                created = await self._leases.create(body, self.namespace)
            except ClientError as err:
                log.error("error initially creating leader election record: %s", err)
                return False
            self._lease = created
            self._set_observed(LeaderElectionRecord.from_lease(created))
            return True

        # 3. A changed record restarts the observed-time clock; a held, unexpired one is left be.
        self._lease = lease
        record = LeaderElectionRecord.from_lease(lease)
        if record != self._observed:
            self._set_observed(record)
        if record.holder_identity and self._lease_valid() and not self._holds_record():
            log.debug("lock is held by %s and has not yet expired", record.holder_identity)
            return False

        # 4. Take it over (a new holder counts a transition) or renew it.
        if self._holds_record():
            desired = replace(desired, acquire_time=record.acquire_time, leader_transitions=record.leader_transitions)
        else:
            desired = replace(desired, leader_transitions=record.leader_transitions + 1)
        try:
            await self._update(desired)
        except ClientError as err:
            log.error("Failed to update lock: %s", err)
            return False
        return True

    async def _update(self, record: LeaderElectionRecord) -> None:
        """PUT ``record`` as the spec of the Lease last seen, guarded by its resourceVersion."""
        assert self._lease is not None
        body = {**self._lease, "spec": record.to_spec()}
        updated = await self._leases.update(body, self.namespace)
        self._lease = updated
        self._set_observed(LeaderElectionRecord.from_lease(updated))

    async def release(self) -> bool:
        """Give the Lease up if this candidate holds it (holderIdentity "", 1 s duration), so a
        follower can take it at once. True if released or not held."""
        if not self._holds_record() or self._lease is None:
            return True
        stamp = rfc3339_micro(self._clock.now())
        record = LeaderElectionRecord("", 1, stamp, stamp, self._observed.leader_transitions)
        try:
            async with asyncio.timeout(self.renew_deadline):
                try:
                    await self._update(record)
                except ClientError as err:
                    # a renewal cut off by the cancellation may have been written without its
                    # answer reaching us: the Lease is then still ours at a newer version; read it
                    # and release that one (another holder's is left alone)
                    if not is_conflict(err):
                        raise
                    lease = await self._leases.get(self.name, self.namespace)
                    if LeaderElectionRecord.from_lease(lease).holder_identity != self.identity:
                        return True
                    self._lease = lease
                    await self._update(record)
        except (ClientError, asyncio.TimeoutError) as err:
            log.error("Failed to release lock: %s", err if isinstance(err, ClientError) else "timed out")
            return False
        log.info("released lease %s", self.describe)
        return True

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, lead: Callable[[], Awaitable[T]]) -> T:
        """Acquire the Lease, run ``lead()`` while renewing it, then stop (module docstring).

        Returns what ``lead()`` returned; re-raises what it raised; raises ``LeadershipLost``
        when renewal failed for ``renew_deadline``; propagates cancellation. In every case the
        ``lead`` task has finished and (with ``release_on_cancel``) the Lease was released.
        """
        log.info("attempting to acquire leader lease %s...", self.describe)
        acquired_at = await self._acquire()
        log.info("successfully acquired lease %s", self.describe)
        self._leading = True
        lead_task = asyncio.ensure_future(lead())
        try:
            renewing = await self._renew(lead_task, acquired_at + self.renew_deadline)
        except BaseException:
            await self._stop(lead_task)
            _consume(lead_task)
            raise
        if not renewing:
            log.error("failed to renew lease %s within %gs; leaderelection lost", self.describe, self.renew_deadline)
        await self._stop(lead_task)
        if renewing:
            return lead_task.result()
        _consume(lead_task)
        raise LeadershipLost(f"{self.identity} failed to renew lease {self.describe} within {self.renew_deadline:g}s")

    async def _acquire(self) -> float:
        """Try until this candidate holds the Lease; the monotonic start of the winning try."""
        while True:
            started = self._clock.monotonic()
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that
                # arrives as the request completes, and a cancelled candidate would go on for good
                async with asyncio.timeout(self.renew_deadline):
                    won = await self.try_acquire_or_renew()
            except asyncio.TimeoutError:
                log.error("attempt to acquire lease %s timed out", self.describe)
                won = False
            if won:
                return started
            log.debug("failed to acquire lease %s", self.describe)
            await asyncio.sleep(self.retry_period * (1 + JITTER_FACTOR * self._random.random()))

    async def _renew(self, lead_task: asyncio.Future, deadline: float) -> bool:
        """Renew every ``retry_period`` until ``lead_task`` finishes (True) or no renewal has
        succeeded by ``deadline`` = start of the last successful write + ``renew_deadline``
        (False). Every wait and every request is cut off at the deadline."""
        while True:
            pause = min(self.retry_period, deadline - self._clock.monotonic())
            if pause > 0:
                done, _ = await asyncio.wait({lead_task}, timeout=pause)
                if done:
                    return True
            started = self._clock.monotonic()
            remaining = deadline - started
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    renewed = await self.try_acquire_or_renew()
            except asyncio.TimeoutError:
                return False
            if renewed:
                deadline = started + self.renew_deadline
            elif not self._holds_record():
                # Another candidate holds the record: it saw ours expire, so we have lost
                # already (upstream keeps failing until the deadline; stopping now is sooner).
                return False
            if lead_task.done():
                return True

    async def _stop(self, lead_task: asyncio.Future) -> None:
        """Stop leading: cancel and await ``lead``, then release if configured."""
        self._leading = False
        if not lead_task.done():
            lead_task.cancel()
            await asyncio.wait({lead_task})
        if self.release_on_cancel:
            await self.release()


def _consume(task: asyncio.Future) -> None:
    """Mark a finished task's outcome as seen (no "exception was never retrieved" warning)."""
    if task.done() and not task.cancelled():
        task.exception()
