"""The storage contract: what every Backend must do, as checks that run against any of them.

Each check in :data:`CHECKS` takes a factory. Every call to the factory returns a fresh, empty
backend; it accepts the keyword options ``watch_ring_size`` and ``watch_queue_size`` and closes
what it opened when the test ends. Each check in :data:`DURABILITY_CHECKS` takes an opener
instead: every call opens the same store again, as a restarted process would, and the check
closes one backend before opening the next. Checks are coroutines (the Backend's data methods
are) that use pytest only for ``pytest.raises``; tests/storage/test_contract.py parametrizes
them over the backends.

The checks state etcd's semantics as the apiserver relies on them (see base.py). They avoid
absolute revisions (a backend may start anywhere) and pin only the relations: +1 per write of
one operation, unchanged by reads and by failures. A transaction of several operations takes
one revision in etcd and one per operation in the embedded stores, so for those the checks
assert only what both give (txn_results_in_order_and_after_every_earlier_revision). Closing a
backend is awaited too (``await backend.close()``); the factory's backends are closed for the
check.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import AsyncIterator, Awaitable, Callable

import pytest

from kubesvc.storage import compact_to_window
from kubesvc.storage.base import (
    Backend,
    Compacted,
    Create,
    Delete,
    Event,
    FutureRevision,
    KeyExists,
    KeyNotFound,
    KeyValue,
    RevisionMismatch,
    Update,
)

Factory = Callable[..., Backend]
Opener = Callable[[], Backend | Awaitable[Backend]]  # a coroutine when opening takes a round trip (etcd)
Check = Callable[[Factory], Awaitable[None] | None]
DurabilityCheck = Callable[[Opener], Awaitable[None] | None]

CHECKS: list[Check] = []
DURABILITY_CHECKS: list[DurabilityCheck] = []

SERVICES = "/registry/services/"
WAIT = 5.0  # seconds a watch may take to deliver what is due; only reached when a check fails


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def durability_check(fn: DurabilityCheck) -> DurabilityCheck:
    DURABILITY_CHECKS.append(fn)
    return fn


def key(name: str) -> str:
    return SERVICES + name


# --- watch helpers ---------------------------------------------------------------------------


async def receive(events: AsyncIterator[list[Event]], count: int) -> list[Event]:
    """The next ``count`` events (more if the last batch overshoots, so equality checks fail)."""
    received: list[Event] = []

    async def fill() -> None:
        while len(received) < count:
            received.extend(await anext(events))

    await asyncio.wait_for(fill(), WAIT)
    return received


async def ended(events: AsyncIterator[list[Event]]) -> bool:
    """Whether the iteration ends (without yielding anything further) within WAIT."""
    try:
        batch = await asyncio.wait_for(anext(events), WAIT)
    except StopAsyncIteration:
        return True
    raise AssertionError(f"watch delivered {batch} instead of ending")


async def started(backend: Backend) -> int:
    """Make one write outside the watched prefix and return its revision, so that a watch
    "after" it is not a watch "after 0", which means "from now"."""
    return (await backend.create("/registry/started", b"")).mod_revision


def shape(event: Event) -> tuple:
    return event.type, event.kv.key, event.kv.value, event.kv.mod_revision


# --- reads and writes --------------------------------------------------------------------------


@check
async def create_then_get(make: Factory) -> None:
    backend = make()
    before = await backend.current_revision()
    created = await backend.create(key("a"), b"v1")
    assert created == KeyValue(key("a"), b"v1", before + 1, before + 1)
    assert await backend.current_revision() == before + 1
    assert await backend.get(key("a")) == created
    assert await backend.get(key("missing")) is None
    with pytest.raises(KeyExists) as exists:
        await backend.create(key("a"), b"v2")
    assert exists.value.key == key("a")
    assert await backend.get(key("a")) == created
    assert await backend.current_revision() == before + 1


@check
async def update_with_expected_revision(make: Factory) -> None:
    backend = make()
    v1 = await backend.create(key("a"), b"v1")
    v2 = await backend.update(key("a"), b"v2", expected_revision=v1.mod_revision)
    assert v2 == KeyValue(key("a"), b"v2", v1.create_revision, v1.mod_revision + 1)
    with pytest.raises(RevisionMismatch) as stale:
        await backend.update(key("a"), b"lost", expected_revision=v1.mod_revision)
    assert (stale.value.key, stale.value.expected, stale.value.actual) == (key("a"), v1.mod_revision, v2.mod_revision)
    assert await backend.get(key("a")) == v2
    v3 = await backend.update(key("a"), b"v3")
    assert v3 == KeyValue(key("a"), b"v3", v1.create_revision, v2.mod_revision + 1)
    with pytest.raises(KeyNotFound):
        await backend.update(key("missing"), b"v")
    assert await backend.current_revision() == v3.mod_revision


@check
async def delete_with_expected_revision(make: Factory) -> None:
    backend = make()
    v1 = await backend.create(key("a"), b"v1")
    v2 = await backend.update(key("a"), b"v2")
    with pytest.raises(RevisionMismatch) as stale:
        await backend.delete(key("a"), expected_revision=v1.mod_revision)
    assert stale.value.actual == v2.mod_revision
    deleted = await backend.delete(key("a"), expected_revision=v2.mod_revision)
    assert deleted == KeyValue(key("a"), b"v2", v1.create_revision, v2.mod_revision + 1)
    assert await backend.current_revision() == deleted.mod_revision
    assert await backend.get(key("a")) is None
    with pytest.raises(KeyNotFound):
        await backend.delete(key("a"))
    with pytest.raises(KeyNotFound):
        await backend.update(key("a"), b"v3", expected_revision=deleted.mod_revision)
    other = await backend.create(key("b"), b"b")
    assert (await backend.delete(key("b"))).value == other.value


@check
async def recreate_after_delete_gets_a_new_create_revision(make: Factory) -> None:
    backend = make()
    first = await backend.create(key("a"), b"v1")
    await backend.delete(key("a"))
    again = await backend.create(key("a"), b"v2")
    assert again.create_revision == again.mod_revision > first.create_revision
    assert await backend.get(key("a")) == again


@check
async def list_by_prefix_in_key_order(make: Factory) -> None:
    backend = make()
    for name in ("default/web", "kube-system/dns", "default/api", "default/db"):
        await backend.create(key(name), name.encode())
    await backend.create("/registry/servicesfoo/default/web", b"not a service")
    await backend.create("/registry/services", b"not under the prefix either")
    await backend.create("/registry/endpoints/default/web", b"endpoints")
    await backend.delete(key("default/db"))

    listed = await backend.list(SERVICES)
    assert [kv.key for kv in listed.kvs] == [key("default/api"), key("default/web"), key("kube-system/dns")]
    assert [kv.value for kv in listed.kvs] == [b"default/api", b"default/web", b"kube-system/dns"]
    assert (listed.revision, listed.more, listed.remaining) == (await backend.current_revision(), False, 0)
    assert [kv.key for kv in (await backend.list(key("default/"))).kvs] == [key("default/api"), key("default/web")]
    assert [kv.key for kv in (await backend.list("/registry/servicesfoo/")).kvs] == ["/registry/servicesfoo/default/web"]
    assert (await backend.list("/registry/nothing/")).kvs == []
    assert await backend.count(SERVICES) == 3
    assert await backend.count("/registry/") == 6


@check
async def list_pages_with_limit_and_start_key(make: Factory) -> None:
    backend = make()
    names = [f"ns/svc-{i}" for i in range(7)]
    for name in names:
        await backend.create(key(name), b"v")

    first = await backend.list(SERVICES, limit=3)
    assert [kv.key for kv in first.kvs] == [key(n) for n in names[:3]]
    assert (first.more, first.remaining) == (True, 4)

    await backend.create(key("ns/svc-9"), b"after the first page")  # pages keep reading at first.revision
    await backend.delete(key(names[4]))
    second = await backend.list(SERVICES, revision=first.revision, limit=3, start_key=first.kvs[-1].key + "\0")
    assert [kv.key for kv in second.kvs] == [key(n) for n in names[3:6]]
    assert (second.revision, second.more, second.remaining) == (first.revision, True, 1)
    last = await backend.list(SERVICES, revision=first.revision, limit=3, start_key=second.kvs[-1].key + "\0")
    assert [kv.key for kv in last.kvs] == [key(names[6])]
    assert (last.more, last.remaining) == (False, 0)

    everything = await backend.list(SERVICES, limit=100)
    assert len(everything.kvs) == 7 and (everything.more, everything.remaining) == (False, 0)
    assert [kv.key for kv in (await backend.list(SERVICES, start_key=key("ns/svc-5"))).kvs] == [
        key("ns/svc-5"), key("ns/svc-6"), key("ns/svc-9")]


@check
async def reads_at_an_older_revision_see_the_past(make: Factory) -> None:
    backend = make()
    a1 = await backend.create(key("a"), b"a1")
    b1 = await backend.create(key("b"), b"b1")
    then = await backend.current_revision()
    a2 = await backend.update(key("a"), b"a2")
    await backend.delete(key("b"))
    c1 = await backend.create(key("c"), b"c1")

    past = await backend.list(SERVICES, revision=then)
    assert past.kvs == [a1, b1] and past.revision == then
    assert await backend.get(key("a"), revision=then) == a1
    assert await backend.get(key("b"), revision=then) == b1
    assert await backend.get(key("c"), revision=then) is None
    assert await backend.get(key("a"), revision=a1.mod_revision) == a1
    assert (await backend.list(SERVICES)).kvs == [a2, c1]


@check
async def future_revisions_are_refused(make: Factory) -> None:
    backend = make()
    await backend.create(key("a"), b"v")
    future = await backend.current_revision() + 1
    with pytest.raises(FutureRevision) as refused:
        await backend.get(key("a"), revision=future)
    assert (refused.value.requested, refused.value.current) == (future, future - 1)
    with pytest.raises(FutureRevision):
        await backend.list(SERVICES, revision=future)
    with pytest.raises(FutureRevision):
        await backend.watch(SERVICES, future)


@check
async def current_revision_moves_one_per_write_and_never_back(make: Factory) -> None:
    backend = make()
    seen = [await backend.current_revision()]
    await backend.create(key("a"), b"1")
    seen.append(await backend.current_revision())
    await backend.list(SERVICES)
    await backend.get(key("a"))
    seen.append(await backend.current_revision())
    with pytest.raises(KeyExists):
        await backend.create(key("a"), b"2")
    seen.append(await backend.current_revision())
    committed = await backend.txn([Create(key("b"), b"1"), Update(key("a"), b"2")])
    seen.append(await backend.current_revision())
    base = seen[0]
    assert seen[:4] == [base, base + 1, base + 1, base + 1]
    # a transaction of several ops takes one revision (etcd) or one per op (embedded stores)
    assert seen[4] == committed.revision and base + 2 <= seen[4] <= base + 3


# --- transactions -----------------------------------------------------------------------------


@check
async def txn_is_all_or_nothing(make: Factory) -> None:
    backend = make()
    existing = await backend.create(key("x"), b"x")
    before = await backend.current_revision()
    failing = {
        RevisionMismatch: [Create(key("a"), b"a"), Update(key("x"), b"x2", existing.mod_revision + 9)],
        KeyExists: [Create(key("a"), b"a"), Delete(key("x")), Create(key("x"), b"x2"), Create(key("x"), b"x3")],
        KeyNotFound: [Update(key("x"), b"x2"), Delete(key("missing"))],
    }
    for error, ops in failing.items():
        with pytest.raises(error):
            await backend.txn(ops)
        assert await backend.current_revision() == before
        assert await backend.get(key("a")) is None
        assert await backend.get(key("x")) == existing

    watch = aiter(await backend.watch(SERVICES, before))
    marker = await backend.create(key("marker"), b"m")
    assert marker.mod_revision == before + 1  # failed txns took no revisions
    assert [shape(e) for e in await receive(watch, 1)] == [("PUT", key("marker"), b"m", before + 1)]


@check
async def txn_results_in_order_and_after_every_earlier_revision(make: Factory) -> None:
    """What a user of a transaction may rely on, whether its ops share one revision (etcd) or
    take consecutive ones (the embedded stores): results in op order, each above every revision
    before the txn and none below the one before it, the txn's revision its last (commit) one;
    a watch delivers the txn's events together and in op order, and one "after" the txn's
    revision sees none of them."""
    backend = make()
    x = await backend.create(key("x"), b"x1")
    y = await backend.create(key("y"), b"y1")
    before = await backend.current_revision()
    watch = aiter(await backend.watch(SERVICES, before))
    result = await backend.txn([
        Create(key("a"), b"a1"),
        Update(key("x"), b"x2", expected_revision=x.mod_revision),
        Delete(key("y"), expected_revision=y.mod_revision),
    ])
    a, x2, y_deleted = result.results
    revisions = [kv.mod_revision for kv in result.results]
    assert all(revision > before for revision in revisions) and revisions == sorted(revisions)
    assert result.revision == revisions[-1] == await backend.current_revision()
    assert (a.key, a.value, a.create_revision) == (key("a"), b"a1", a.mod_revision)
    assert (x2.key, x2.value, x2.create_revision) == (key("x"), b"x2", x.create_revision)
    assert (y_deleted.key, y_deleted.value, y_deleted.create_revision) == (key("y"), b"y1", y.create_revision)
    assert (await backend.list(SERVICES)).kvs == [a, x2]

    events = await asyncio.wait_for(anext(watch), WAIT)  # one batch: the txn's events together
    assert [(e.type, e.kv) for e in events] == [("PUT", a), ("PUT", x2), ("DELETE", y_deleted)]
    after = aiter(await backend.watch(SERVICES, result.revision))
    marker = await backend.create(key("marker"), b"m")
    assert [e.kv for e in await receive(after, 1)] == [marker]


# --- compaction -------------------------------------------------------------------------------


@check
async def compaction_forgets_history_but_keeps_current_values(make: Factory) -> None:
    backend = make()
    a1 = await backend.create(key("a"), b"a1")
    await backend.create(key("b"), b"b1")
    a2 = await backend.update(key("a"), b"a2")
    deleted_b = await backend.delete(key("b"))
    c1 = await backend.create(key("c"), b"c1")
    target = deleted_b.mod_revision
    await backend.compact(target)
    assert backend.compact_revision() == target

    with pytest.raises(Compacted) as gone:
        await backend.get(key("a"), revision=target - 1)
    assert (gone.value.requested, gone.value.compact_revision) == (target - 1, target)
    with pytest.raises(Compacted):
        await backend.list(SERVICES, revision=a1.mod_revision)
    with pytest.raises(Compacted):
        await backend.watch(SERVICES, target - 1)
    assert (await backend.list(SERVICES, revision=target)).kvs == [a2]
    assert (await backend.list(SERVICES)).kvs == [a2, c1]

    watch = aiter(await backend.watch(SERVICES, target))
    assert [shape(e) for e in await receive(watch, 1)] == [("PUT", key("c"), b"c1", c1.mod_revision)]

    await backend.compact(target - 1)  # at or below the compact revision: nothing to do
    assert backend.compact_revision() == target
    with pytest.raises(FutureRevision):
        await backend.compact(await backend.current_revision() + 1)

    a3 = await backend.update(key("a"), b"a3", expected_revision=a2.mod_revision)
    b2 = await backend.create(key("b"), b"b2")
    await backend.compact(await backend.current_revision())
    assert (await backend.list(SERVICES)).kvs == [a3, b2, c1]
    assert [shape(e) for e in await receive(watch, 2)] == [
        ("PUT", key("a"), b"a3", a3.mod_revision), ("PUT", key("b"), b"b2", b2.mod_revision)]


@check
async def compact_to_window_keeps_the_newest_revisions(make: Factory) -> None:
    backend = make()
    assert await compact_to_window(backend, keep=5) == 0 == backend.compact_revision()
    for i in range(10):
        await backend.create(key(f"k{i}"), b"v")
    current = await backend.current_revision()
    assert await compact_to_window(backend, keep=4) == current - 4 == backend.compact_revision()
    assert await compact_to_window(backend, keep=100) == current - 4
    assert await backend.count(SERVICES) == 10


# --- watch --------------------------------------------------------------------------------------


@check
async def watch_catches_up_then_streams_live_events(make: Factory) -> None:
    backend = make()
    start = await backend.current_revision()
    await backend.create(key("a"), b"a1")
    await backend.create(key("b"), b"b1")
    await backend.update(key("a"), b"a2")

    watch = await backend.watch(SERVICES, start + 1)
    events = aiter(watch)
    assert [shape(e) for e in await receive(events, 2)] == [
        ("PUT", key("b"), b"b1", start + 2), ("PUT", key("a"), b"a2", start + 3)]
    await backend.create(key("c"), b"c1")
    await backend.delete(key("b"))
    assert [shape(e) for e in await receive(events, 2)] == [
        ("PUT", key("c"), b"c1", start + 4), ("DELETE", key("b"), b"b1", start + 5)]
    watch.close()
    assert await ended(events)


@check
async def watch_from_zero_starts_now(make: Factory) -> None:
    backend = make()
    await backend.create(key("before"), b"v")
    events = aiter(await backend.watch(SERVICES, 0))
    after = await backend.create(key("after"), b"v")
    assert [shape(e) for e in await receive(events, 1)] == [("PUT", key("after"), b"v", after.mod_revision)]


@check
async def watch_filters_by_prefix(make: Factory) -> None:
    backend = make()
    events = aiter(await backend.watch(SERVICES, await backend.current_revision()))
    await backend.create("/registry/servicesfoo/default/web", b"no")
    await backend.create("/registry/endpoints/default/web", b"no")
    await backend.create("/registry/services", b"no")
    web = await backend.create(key("default/web"), b"yes")
    assert [shape(e) for e in await receive(events, 1)] == [("PUT", web.key, b"yes", web.mod_revision)]


@check
async def progress_follows_the_events_it_covers_and_reports_other_prefixes_writes(make: Factory) -> None:
    backend = make()
    watch = await backend.watch(SERVICES, await started(backend))
    events = aiter(watch)
    web = await backend.create(key("default/web"), b"v1")
    elsewhere = await backend.create("/registry/endpoints/default/web", b"x")
    watch.request_progress()
    if not getattr(backend, "request_watch_progress", True):
        # a backend that cannot order the answer with the events (etcd before 3.4.31 / 3.5.13,
        # etcd #15220) sends no request: no PROGRESS, rather than one ahead of its events
        assert [(e.type, e.kv.mod_revision) for e in await receive(events, 1)] == [("PUT", web.mod_revision)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(anext(events), 0.5)
        watch.close()
        return
    received = await receive(events, 2)
    assert [(e.type, e.kv.mod_revision) for e in received] == [("PUT", web.mod_revision), ("PROGRESS", elsewhere.mod_revision)]
    watch.close()


@check
async def watch_events_carry_previous_and_deleted_values(make: Factory) -> None:
    """The same events, whether they arrive live, from the ring or from the backend's history."""
    backend = make(watch_ring_size=2)
    start = await started(backend)
    live = aiter(await backend.watch(SERVICES, start))
    v1 = await backend.create(key("a"), b"v1")
    v2 = await backend.update(key("a"), b"v2")
    deleted = await backend.delete(key("a"))

    expected = [
        Event("PUT", v1),
        Event("PUT", v2, prev_kv=v1),
        Event("DELETE", KeyValue(key("a"), b"v2", v1.create_revision, v2.mod_revision + 1), prev_kv=v2),
    ]
    assert expected[2].kv == deleted
    assert expected[0].is_create and not expected[1].is_create
    assert await receive(live, 3) == expected
    assert await receive(aiter(await backend.watch(SERVICES, start)), 3) == expected  # beyond the ring
    assert await receive(aiter(await backend.watch(SERVICES, start + 1)), 2) == expected[1:]  # from the ring


@check
async def watch_catch_up_reaches_past_the_ring(make: Factory) -> None:
    backend = make(watch_ring_size=3)
    start = await started(backend)
    written = [await backend.create(key(f"k{i}"), b"v") for i in range(8)]
    events = aiter(await backend.watch(SERVICES, start))
    assert [e.kv for e in await receive(events, 8)] == written
    live = await backend.create(key("live"), b"v")
    assert [e.kv for e in await receive(events, 1)] == [live]


@check
async def closing_a_watch_ends_its_iteration(make: Factory) -> None:
    backend = make()
    watch = await backend.watch(SERVICES, await backend.current_revision())
    events = aiter(watch)
    waiting = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    watch.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, WAIT)

    unstarted = await backend.watch(SERVICES, await backend.current_revision())
    unstarted.close()
    await backend.create(key("a"), b"v")
    assert await ended(aiter(unstarted))

    open_when_backend_closes = aiter(await backend.watch(SERVICES, await backend.current_revision()))
    await backend.close()
    assert await ended(open_when_backend_closes)


@check
async def a_watch_that_falls_behind_is_closed(make: Factory) -> None:
    backend = make(watch_queue_size=3)
    slow = await backend.watch(SERVICES, await backend.current_revision())
    keeping_up = aiter(await backend.watch(SERVICES, await backend.current_revision()))
    for i in range(5):
        await backend.create(key(f"k{i}"), b"v")
        assert len(await receive(keeping_up, 1)) == 1
    assert await ended(aiter(slow))


# --- concurrency ----------------------------------------------------------------------------------


async def race(count: int, attempt: Callable[[int], Awaitable[object]]) -> list[object]:
    """Run ``attempt(i)`` for ``count`` concurrent tasks started together; each result or
    exception. (The embedded stores' thread safety is tests/storage/test_contract.py's.)"""
    return await asyncio.gather(*(attempt(i) for i in range(count)), return_exceptions=True)


@check
async def racing_updates_at_one_revision_have_one_winner(make: Factory) -> None:
    backend = make()
    base = await backend.create(key("a"), b"v0")
    outcomes = await race(20, lambda i: backend.update(key("a"), f"v{i}".encode(), expected_revision=base.mod_revision))
    winners = [o for o in outcomes if isinstance(o, KeyValue)]
    losers = [o for o in outcomes if isinstance(o, RevisionMismatch)]
    assert len(winners) == 1 and len(losers) == 19
    assert all(loser.actual == winners[0].mod_revision for loser in losers)
    assert await backend.get(key("a")) == winners[0]
    assert await backend.current_revision() == base.mod_revision + 1


@check
async def racing_creates_of_one_key_have_one_winner(make: Factory) -> None:
    backend = make()
    outcomes = await race(20, lambda i: backend.create(key("a"), f"v{i}".encode()))
    winners = [o for o in outcomes if isinstance(o, KeyValue)]
    assert len(winners) == 1
    assert sum(isinstance(o, KeyExists) for o in outcomes) == 19
    assert await backend.get(key("a")) == winners[0]


@check
async def parallel_creates_are_watched_once_each_in_order(make: Factory) -> None:
    backend = make()
    start = await backend.current_revision()
    events = aiter(await backend.watch(SERVICES, start))
    watched = asyncio.ensure_future(receive(events, 400))

    async def create_fifty(writer: int) -> list[KeyValue]:
        return [await backend.create(key(f"t{writer}/k{i}"), b"v") for i in range(50)]

    created = [kv for kvs in await race(8, create_fifty) for kv in kvs]
    assert sorted(kv.mod_revision for kv in created) == list(range(start + 1, start + 401))
    received = await watched
    assert [e.kv.mod_revision for e in received] == list(range(start + 1, start + 401))
    assert {e.kv for e in received} == set(created)


async def opened(open_store: Opener) -> Backend:
    """A backend from ``open_store``, awaited when opening is a coroutine: the etcd backend's
    ``open()`` is a round trip, which learns etcd's compact revision as a restarted process would."""
    backend = open_store()
    return await backend if inspect.isawaitable(backend) else backend


# --- durability (persistent backends) -----------------------------------------------------------------


@durability_check
async def reopening_keeps_data_and_revisions_continue(open_store: Opener) -> None:
    backend = await opened(open_store)
    a1 = await backend.create(key("a"), b"a1")
    await backend.create(key("b"), b"b1")
    a2 = await backend.update(key("a"), b"a2")
    await backend.delete(key("b"))
    revision = await backend.current_revision()
    await backend.close()

    backend = await opened(open_store)
    assert await backend.current_revision() == revision
    assert (await backend.list(SERVICES)).kvs == [a2]
    assert await backend.get(key("a"), revision=a1.mod_revision) == a1
    assert (await backend.create(key("c"), b"c1")).mod_revision == revision + 1
    await backend.close()


@durability_check
async def compaction_and_watch_history_survive_reopening(open_store: Opener) -> None:
    backend = await opened(open_store)
    await backend.create(key("a"), b"a1")
    a2 = await backend.update(key("a"), b"a2")
    b1 = await backend.create(key("b"), b"b1")
    deleted = await backend.delete(key("b"))  # the newest row is a tombstone, and compaction removes it
    await backend.compact(deleted.mod_revision)
    await backend.close()

    backend = await opened(open_store)
    assert backend.compact_revision() == deleted.mod_revision
    assert await backend.current_revision() == deleted.mod_revision
    with pytest.raises(Compacted):
        await backend.get(key("a"), revision=a2.mod_revision)
    with pytest.raises(Compacted):
        await backend.watch(SERVICES, b1.mod_revision)
    assert (await backend.list(SERVICES)).kvs == [a2]
    events = aiter(await backend.watch(SERVICES, deleted.mod_revision))
    a3 = await backend.update(key("a"), b"a3", expected_revision=a2.mod_revision)
    assert a3.mod_revision == deleted.mod_revision + 1
    assert await receive(events, 1) == [Event("PUT", a3, prev_kv=a2)]
    await backend.close()

    backend = await opened(open_store)
    assert await receive(aiter(await backend.watch(SERVICES, deleted.mod_revision)), 1) == [Event("PUT", a3, prev_kv=a2)]
    await backend.close()
