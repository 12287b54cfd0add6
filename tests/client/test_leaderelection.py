"""Leader election with a Lease.

Three layers: the timing checks; single attempts (``try_acquire_or_renew``) against an in-memory
Lease store with a ``FakeClock``, for the exact observed-time rule and the optimistic-concurrency
race; and whole ``run()`` lifecycles against the real apiserver -- two candidates sampled for
"never two leaders", hand-over on release, a leader cut off from the apiserver by a network
partition, a foreign holder that keeps renewing, and remote timestamps that lie.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import json
import re
import socket
import time
import uuid

import pytest

from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.leaderelection import (
    LeaderElectionRecord,
    LeaderElector,
    LeadershipLost,
    default_identity,
    validate_timing,
)
from kubesvc.client.rest import LEASES, ApiError, RestClient
from kubesvc.util.clock import FakeClock
from kubesvc.util.golang import rfc3339_micro
from tests.support import cluster

# -- timing checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "message"),
    [
        (10.0, 10.0, 2.0, "leaseDuration must be greater than renewDeadline"),
        (5.0, 10.0, 2.0, "leaseDuration must be greater than renewDeadline"),
        (15.0, 2.4, 2.0, "renewDeadline must be greater than retryPeriod*JitterFactor"),
        (15.0, 2.0, 2.0, "renewDeadline must be greater than retryPeriod*JitterFactor"),
        (-1.0, -2.0, -3.0, "leaseDuration must be greater than zero"),
        (1.0, 0.0, -1.0, "renewDeadline must be greater than zero"),
        (1.0, 0.5, 0.0, "retryPeriod must be greater than zero"),
    ],
    ids=["lease-equals-renew", "lease-below-renew", "renew-equals-retry-jitter", "renew-below-retry-jitter",
         "lease-negative", "renew-zero", "retry-zero"],
)
def test_timing_is_validated(lease, renew, retry, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_timing(lease, renew, retry)
    with pytest.raises(ValueError, match=re.escape(message)):
        LeaderElector(FakeClient(), identity="a", lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_defaults_are_kube_controller_managers():
    elector = LeaderElector(FakeClient(), identity="a")
    assert (elector.namespace, elector.name) == ("kube-system", "kube-controller-manager")
    assert (elector.lease_duration, elector.renew_deadline, elector.retry_period) == (15.0, 10.0, 2.0)
    assert elector.release_on_cancel


def test_empty_identity_is_rejected():
    with pytest.raises(ValueError, match="Lock identity is empty"):
        LeaderElector(FakeClient(), identity="")


def test_default_identity_is_hostname_underscore_uuid():
    first, second = default_identity(), default_identity()
    host, _, tail = first.rpartition("_")
    assert host == socket.gethostname()
    uuid.UUID(tail)
    assert first != second


# -- single attempts against an in-memory Lease store ------------------------------------------


class FakeLeases:
    """Leases with the apiserver's optimistic concurrency: a PUT must carry the current
    resourceVersion. Each call yields once, so concurrent attempts interleave like requests."""

    def __init__(self):
        self.objects: dict[tuple[str, str], dict] = {}
        self.revision = 0
        self.writes = 0

    def _stamp(self, obj: dict) -> dict:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        return copy.deepcopy(obj)

    async def get(self, name, namespace):
        await asyncio.sleep(0)
        if (namespace, name) not in self.objects:
            raise ApiError(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        return copy.deepcopy(self.objects[(namespace, name)])

    async def create(self, obj, namespace):
        await asyncio.sleep(0)
        key = (namespace, obj["metadata"]["name"])
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", "already exists")
        self.writes += 1
        self.objects[key] = copy.deepcopy({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})
        return self._stamp(self.objects[key])

    async def update(self, obj, namespace):
        await asyncio.sleep(0)
        key = (namespace, obj["metadata"]["name"])
        current = self.objects.get(key)
        if current is None:
            raise ApiError(404, "NotFound", "not found")
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
        self.writes += 1
        self.objects[key] = copy.deepcopy(obj)
        return self._stamp(self.objects[key])

    def put_spec(self, name: str, namespace: str = "kube-system", **spec) -> None:
        """Another party writes the Lease (creating it if missing)."""
        key = (namespace, name)
        obj = self.objects.setdefault(key, {"metadata": {"name": name, "namespace": namespace}, "spec": {}})
        obj["spec"] = {**obj["spec"], **spec}
        self._stamp(obj)

    def spec(self, name: str = "kube-controller-manager", namespace: str = "kube-system") -> dict:
        return self.objects[(namespace, name)]["spec"]


class FakeClient:
    def __init__(self):
        self.leases = FakeLeases()

    def resource(self, resource):
        assert resource is LEASES
        return self.leases


def _elector(client, identity, clock, **kw) -> LeaderElector:
    timing = dict(lease_duration=10.0, renew_deadline=5.0, retry_period=1.0)
    return LeaderElector(client, identity=identity, clock=clock, **{**timing, **kw})


async def test_a_missing_lease_is_created_naming_the_candidate():
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    stamp = rfc3339_micro(clock.now())
    assert client.leases.spec() == {"holderIdentity": "a", "leaseDurationSeconds": 10, "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}
    assert elector.leader_identity == "a"


async def test_renewal_moves_renew_time_and_keeps_acquire_time_and_transitions():
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    acquired = rfc3339_micro(clock.now())
    clock.advance(1.5)
    assert await elector.try_acquire_or_renew()
    spec = client.leases.spec()
    assert (spec["acquireTime"], spec["renewTime"], spec["leaseTransitions"]) == (acquired, rfc3339_micro(clock.now()), 0)


@pytest.mark.parametrize(
    "renew_time",
    ["2000-01-01T00:00:00.000000Z", "2100-01-01T00:00:00.000000Z"],
    ids=["remote-clock-behind", "remote-clock-ahead"],
)
async def test_takeover_waits_the_lease_duration_from_local_observation(renew_time):
    """Remote timestamps are never compared with the local clock: a record far in the past is
    not expired at first sight, one far in the future expires all the same."""
    client, clock = FakeClient(), FakeClock()
    client.leases.put_spec("kube-controller-manager", holderIdentity="ghost", leaseDurationSeconds=7,
                           renewTime=renew_time, acquireTime=renew_time, leaseTransitions=4)
    elector = _elector(client, "a", clock)
    assert not await elector.try_acquire_or_renew()
    assert elector.leader_identity == "ghost"
    clock.advance(6.9)
    assert not await elector.try_acquire_or_renew()
    clock.advance(0.2)
    assert await elector.try_acquire_or_renew()
    spec = client.leases.spec()
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("a", 5, 10)
    assert spec["acquireTime"] == spec["renewTime"] == rfc3339_micro(clock.now())


async def test_a_holder_that_keeps_renewing_is_never_displaced():
    client, clock = FakeClient(), FakeClock()
    client.leases.put_spec("kube-controller-manager", holderIdentity="foreign", leaseDurationSeconds=3, renewTime="t0")
    elector = _elector(client, "a", clock)
    for step in range(1, 40):  # 20 s of the foreign holder renewing every 0.5 s
        clock.advance(0.5)
        client.leases.put_spec("kube-controller-manager", renewTime=f"t{step}")
        assert not await elector.try_acquire_or_renew()
    clock.advance(2.9)  # it stops renewing: the last change was seen 2.9 s ago
    assert not await elector.try_acquire_or_renew()
    clock.advance(0.2)
    assert await elector.try_acquire_or_renew()
    assert client.leases.spec()["leaseTransitions"] == 1


async def test_a_released_lease_is_taken_at_once():
    client, clock = FakeClient(), FakeClock()
    client.leases.put_spec("kube-controller-manager", holderIdentity="", leaseDurationSeconds=1, leaseTransitions=2)
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    assert (client.leases.spec()["holderIdentity"], client.leases.spec()["leaseTransitions"]) == ("a", 3)


async def test_release_clears_the_holder_and_shortens_the_lease():
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    clock.advance(3)
    assert await elector.release()
    stamp = rfc3339_micro(clock.now())
    assert client.leases.spec() == {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}
    writes = client.leases.writes
    assert await elector.release()  # not held any more: nothing to write
    assert client.leases.writes == writes


async def test_release_after_a_renewal_whose_answer_was_lost_still_clears_the_holder():
    """A renewal cut off by the cancellation can be written while its answer never arrives: the
    Lease is still ours at a newer resourceVersion than the one last seen. The release reads it
    and clears that one (CI saw the Lease left held by the cancelled candidate)."""
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    client.leases.put_spec("kube-controller-manager", renewTime="2026-11-27T15:00:00.000000Z")  # our renewal, answer lost
    assert client.leases.spec()["holderIdentity"] == "a"
    assert await elector.release()
    assert (client.leases.spec()["holderIdentity"], client.leases.spec()["leaseDurationSeconds"]) == ("", 1)


async def test_release_leaves_a_lease_another_candidate_took_meanwhile():
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    client.leases.put_spec("kube-controller-manager", holderIdentity="b", leaseTransitions=1)
    writes = client.leases.writes
    assert await elector.release()
    assert client.leases.spec()["holderIdentity"] == "b" and client.leases.writes == writes


@pytest.mark.parametrize("start", ["missing", "expired"], ids=["race-to-create", "race-to-take-over"])
async def test_concurrent_candidates_never_both_win(start):
    client, clock = FakeClient(), FakeClock()
    electors = [_elector(client, f"c{i}", clock) for i in range(5)]
    if start == "expired":
        client.leases.put_spec("kube-controller-manager", holderIdentity="old", leaseDurationSeconds=1, renewTime="t")
        assert not any(await asyncio.gather(*(e.try_acquire_or_renew() for e in electors)))
        clock.advance(2)
    results = await asyncio.gather(*(e.try_acquire_or_renew() for e in electors))
    assert results.count(True) == 1
    winner = electors[results.index(True)].identity
    assert client.leases.spec()["holderIdentity"] == winner


async def test_the_holder_stops_renewing_once_another_holds_the_record():
    client, clock = FakeClient(), FakeClock()
    elector = _elector(client, "a", clock)
    assert await elector.try_acquire_or_renew()
    # Someone else took over (it saw our lease expire): our optimistic PUT conflicts, and the
    # re-read record is held by another, unexpired, so the attempt fails.
    client.leases.put_spec("kube-controller-manager", holderIdentity="b", renewTime="later")
    assert not await elector.try_acquire_or_renew()
    assert elector.leader_identity == "b"


# -- whole lifecycles against the real apiserver -----------------------------------------------

LEASE = 3.0
RENEW = 1.5
RETRY = 0.2
TIMING = dict(lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY)


# the shared poll, with this module's shorter default wait and finer steps
eventually = functools.partial(cluster.eventually, timeout=10.0, interval=0.01)


class Lead:
    """A ``lead`` callback that records when it ran and was stopped."""

    def __init__(self):
        self.started: float | None = None
        self.stopped: float | None = None
        self.cancelled = False

    @property
    def active(self) -> bool:
        return self.started is not None and self.stopped is None

    async def __call__(self):
        self.started = time.monotonic()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.stopped = time.monotonic()


class Sampler:
    """Samples who leads every few milliseconds, by the electors and by their lead tasks."""

    def __init__(self, electors: list[LeaderElector], leads: list[Lead]):
        self.electors, self.leads = electors, leads
        self.samples: list[tuple[int, int]] = []
        self._task: asyncio.Task | None = None

    async def _loop(self):
        while True:
            self.samples.append((sum(e.is_leader() for e in self.electors), sum(lead.active for lead in self.leads)))
            await asyncio.sleep(0.005)

    def __enter__(self):
        self._task = asyncio.create_task(self._loop())
        return self

    def __exit__(self, *exc):
        self._task.cancel()

    def assert_never_two(self):
        assert len(self.samples) > 100
        assert max(max(s) for s in self.samples) == 1, "two candidates led at once"


class Partition:
    """A TCP relay to the apiserver that can be cut: afterwards every byte either way is
    dropped, so requests hang as across a network partition (no refusal, no reset)."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.cut = False
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader, writer):
        self._writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.append(up_writer)
        for pair in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(*pair))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader, writer):
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if not self.cut:
                    writer.write(data)
                    await writer.drain()
            writer.close()

    async def close(self):
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
def config(apiserver):
    return load_kubeconfig(apiserver.kubeconfig)


@pytest.fixture
async def clients(config):
    opened: list[RestClient] = []

    def make(cfg=None) -> RestClient:
        opened.append(RestClient(cfg or config, timeout=10))
        return opened[-1]

    yield make
    for client in opened:
        await client.close()


@pytest.fixture
async def tasks():
    started: list[asyncio.Task] = []

    def start(coro) -> asyncio.Task:
        started.append(asyncio.create_task(coro))
        return started[-1]

    yield start
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


@pytest.fixture
def lease_name():
    return f"le-{uuid.uuid4().hex[:8]}"


async def kubectl_lease(apiserver, name: str) -> dict:
    # Off the event loop: the electors must keep renewing while kubectl runs.
    result = await cluster.kubectl(apiserver, "get", "lease", "-n", "kube-system", name, "-o", "json")
    return json.loads(result.stdout)


@contextlib.asynccontextmanager
async def a_leading_b_waiting(tasks, client_a: RestClient, client_b: RestClient, lease_name: str):
    """Candidates cand-a and cand-b for one lease, watched by a Sampler for the block: a runs
    first and is waited for to lead, then b runs. Yields (a, b, lead_a, lead_b, run_a, run_b,
    sampler)."""
    a = LeaderElector(client_a, name=lease_name, identity="cand-a", **TIMING)
    b = LeaderElector(client_b, name=lease_name, identity="cand-b", **TIMING)
    lead_a, lead_b = Lead(), Lead()
    with Sampler([a, b], [lead_a, lead_b]) as sampler:
        run_a = tasks(a.run(lead_a))
        await eventually(lambda: lead_a.active, message="a leads")
        run_b = tasks(b.run(lead_b))
        yield a, b, lead_a, lead_b, run_a, run_b, sampler


async def test_two_candidates_one_leader_and_hand_over_on_release(apiserver, clients, tasks, lease_name):
    async with a_leading_b_waiting(tasks, clients(), clients(), lease_name) as (a, b, lead_a, lead_b, run_a, run_b, sampler):
        await asyncio.sleep(LEASE + 0.5)  # well past a lease duration: a keeps renewing, b waits
        assert a.is_leader() and not b.is_leader() and not lead_b.active
        assert b.leader_identity == "cand-a"

        lease = await kubectl_lease(apiserver, lease_name)
        spec = lease["spec"]
        assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("cand-a", 3, 0)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", spec["renewTime"])
        assert spec["renewTime"] > spec["acquireTime"]

        run_a.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run_a
        released = time.monotonic()
        assert lead_a.cancelled and not a.is_leader()
        await eventually(lambda: lead_b.active, timeout=LEASE, message="b takes over")
        assert lead_b.started - released < LEASE / 2, "a release hands over within a retry period, not a lease duration"
        await asyncio.sleep(0.3)
    sampler.assert_never_two()
    assert lead_b.started > lead_a.stopped

    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("cand-b", 1)
    assert (a.leader_identity, b.leader_identity) == ("", "cand-b")  # a last saw its own release

    run_b.cancel()
    await asyncio.gather(run_b, return_exceptions=True)
    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("", 1, 1)


async def test_partitioned_leader_stops_and_the_other_waits_a_lease_duration(apiserver, config, clients, tasks, lease_name):
    host, port = config.server.removeprefix("https://").rsplit(":", 1)
    partition = Partition(host, int(port))
    relay_port = await partition.start()
    try:
        relayed = clients(dataclasses.replace(config, server=f"https://{host}:{relay_port}"))
        async with a_leading_b_waiting(tasks, relayed, clients(), lease_name) as (a, b, lead_a, lead_b, run_a, run_b, sampler):
            await asyncio.sleep(1.0)

            partition.cut = True
            cut = time.monotonic()
            with pytest.raises(LeadershipLost):
                await asyncio.wait_for(run_a, RENEW * 3)
            await eventually(lambda: lead_b.active, timeout=LEASE * 2, message="b takes over")
            await asyncio.sleep(0.3)
        sampler.assert_never_two()

        # a stopped within its renew deadline; b waited the whole lease duration from the last
        # renewal it saw (at most a retry period before the cut), so a was gone first.
        assert lead_a.cancelled and not a.is_leader()
        assert lead_a.stopped - cut <= RENEW + 0.3
        assert lead_b.started - cut >= LEASE - RETRY - 0.1
        assert lead_b.started > lead_a.stopped
        spec = (await kubectl_lease(apiserver, lease_name))["spec"]
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("cand-b", 1)
        assert b.is_leader() and not run_b.done()
    finally:
        await partition.close()


async def test_a_foreign_holder_that_keeps_renewing_is_never_displaced(apiserver, clients, tasks, lease_name):
    owner = clients().resource(LEASES)

    def spec(**extra):
        now = rfc3339_micro(FakeClock().now())  # the foreign clock: a fixed, wrong time
        return {"holderIdentity": "foreign", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now, "leaseTransitions": 7, **extra}

    lease = await owner.create({"metadata": {"name": lease_name, "namespace": "kube-system"}, "spec": spec()}, "kube-system")
    renewing = True

    async def foreign_holder():
        nonlocal lease
        count = 0
        while renewing:
            await asyncio.sleep(0.25)
            count += 1
            stamp = f"2026-01-01T00:00:{count % 60:02d}.{count:06d}Z"
            lease = await owner.update({**lease, "spec": spec(renewTime=stamp)}, "kube-system")

    renewer = tasks(foreign_holder())
    elector = LeaderElector(clients(), name=lease_name, identity="cand-a", **TIMING)
    lead = Lead()
    tasks(elector.run(lead))
    await asyncio.sleep(3.5)  # 3.5 lease durations of the foreign record
    assert lead.started is None and not elector.is_leader()
    assert elector.leader_identity == "foreign"

    renewing = False
    await renewer
    stopped = time.monotonic()
    await eventually(lambda: lead.active, timeout=5, message="takeover after the foreign holder stops")
    assert lead.started - stopped >= 1.0 - 0.3  # its last renewal was at most 0.25 s before
    spec_now = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec_now["holderIdentity"], spec_now["leaseTransitions"], spec_now["leaseDurationSeconds"]) == ("cand-a", 8, 3)


async def test_a_stale_remote_timestamp_does_not_shorten_the_wait(apiserver, clients, tasks, lease_name):
    """renewTime in the year 2000: by wall clock long expired, yet a new candidate waits a full
    leaseDurationSeconds from when it first saw the record."""
    ancient = "2000-01-01T00:00:00.000000Z"
    await clients().resource(LEASES).create({"metadata": {"name": lease_name, "namespace": "kube-system"}, "spec": {
        "holderIdentity": "ghost", "leaseDurationSeconds": 2, "acquireTime": ancient, "renewTime": ancient}}, "kube-system")
    elector = LeaderElector(clients(), name=lease_name, identity="cand-a", **TIMING)
    lead = Lead()
    begun = time.monotonic()
    tasks(elector.run(lead))
    await asyncio.sleep(1.5)
    assert lead.started is None and elector.leader_identity == "ghost"
    await eventually(lambda: lead.active, timeout=3, message="takeover after two seconds")
    assert lead.started - begun >= 2.0
    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("cand-a", 1)


async def test_lead_returning_or_raising_ends_run_and_releases(apiserver, clients, lease_name):
    elector = LeaderElector(clients(), name=lease_name, identity="cand-a", **TIMING)

    async def finishes():
        await asyncio.sleep(0.5)
        return "done"

    assert await asyncio.wait_for(elector.run(finishes), 10) == "done"
    assert not elector.is_leader()
    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)

    async def fails():
        raise RuntimeError("controller crashed")

    with pytest.raises(RuntimeError, match="controller crashed"):
        await asyncio.wait_for(elector.run(fails), 10)
    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("", 1)


async def test_without_release_on_cancel_the_lease_stays_held(apiserver, clients, lease_name):
    elector = LeaderElector(clients(), name=lease_name, identity="cand-a", release_on_cancel=False, **TIMING)
    lead = Lead()
    run = asyncio.create_task(elector.run(lead))
    await eventually(lambda: lead.active, message="leads")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert lead.cancelled
    spec = (await kubectl_lease(apiserver, lease_name))["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("cand-a", 3)


def test_record_round_trips_through_a_lease_spec():
    record = LeaderElectionRecord("a", 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:01.500000Z", 2)
    assert LeaderElectionRecord.from_lease({"spec": record.to_spec()}) == record
    assert LeaderElectionRecord.from_lease({}) == LeaderElectionRecord()


@pytest.mark.parametrize("spins", range(6))
async def test_a_cancelled_candidate_stops_even_when_its_request_completes_at_that_moment(spins):
    """Python 3.11's ``asyncio.wait_for`` drops a cancellation that arrives while the awaited
    request completes; a candidate trying to acquire then went on trying for good (an LB
    announcer's stop hung a CI run for 120 s). Cancelled at each step of one request that
    completes at once, ``run`` ends cancelled."""
    loop = asyncio.get_running_loop()

    class Instant(LeaderElector):
        async def try_acquire_or_renew(self) -> bool:
            done = loop.create_future()
            loop.call_soon(lambda: done.done() or done.set_result(False))  # another holds it
            return await done

    elector = Instant(FakeClient(), identity="a", lease_duration=15, renew_deadline=10, retry_period=2)
    running = asyncio.ensure_future(elector.run(lambda: asyncio.sleep(3600)))
    for _ in range(spins):
        await asyncio.sleep(0)
    running.cancel()
    done, _ = await asyncio.wait({running}, timeout=1)
    assert done and running.cancelled()
