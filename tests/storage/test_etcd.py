"""What is specific to the etcd backend, against a real etcd (tests/support/etcd.py): upstream's
key layout under ``--etcd-prefix``, one revision per Txn, TLS, failing fast when etcd is
unreachable, and the compactor's compare-and-swap shared by two apiservers. The storage contract
itself runs over every backend in test_contract.py."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from aetcd import rpc

from kubesvc.storage.base import Create, Delete, KeyNotFound, Update
from kubesvc.storage.etcd import EtcdBackend, EtcdConfig, Unavailable
from kubesvc.storage.etcd.compactor import Compactor, CompactorState, after_tick
from kubesvc.storage.etcd.backend import supports_request_watch_progress
from kubesvc.storage.etcd.keys import KeySpace
from tests.support.etcd import ETCD, running_etcd


@pytest.fixture(scope="module")
def etcd():
    with running_etcd(tls=True) as server:
        yield server


def config(etcd, **options) -> EtcdConfig:
    return EtcdConfig((etcd.client_url,), etcd.tls.ca_file, etcd.tls.cert_file, etcd.tls.key_file, **options)


async def raw_keys(backend: EtcdBackend, prefix: bytes) -> dict[bytes, bytes]:
    """What etcd itself holds under ``prefix`` (what etcdctl get --prefix shows)."""
    from kubesvc.storage.etcd.keys import bytes_prefix_end
    response = await backend._kv.Range(rpc.RangeRequest(key=prefix, range_end=bytes_prefix_end(prefix)))
    return {kv.key: kv.value for kv in response.kvs}


@pytest.mark.parametrize(("flag", "key", "stored"), [
    ("/registry", "/registry/services/specs/default/web", b"/registry/services/specs/default/web"),
    ("/other/", "/registry/services/specs/default/web", b"/other/services/specs/default/web"),
    ("kubesvc", "/registry/ipaddresses/10.96.0.1", b"/kubesvc/ipaddresses/10.96.0.1"),
], ids=["default", "trailing-slash", "relative"])
def test_etcd_prefix_replaces_registry_as_kube_apiserver_joins_it(flag, key, stored):
    space = KeySpace.of(flag)
    assert space.key(key) == stored
    assert space.name(stored) == key
    begin, end = space.range("/registry/services/")
    assert begin < stored < end if "services" in key else not begin <= stored < end


async def test_keys_and_values_are_upstreams_and_a_txn_is_one_revision(etcd):
    backend = await EtcdBackend(config(etcd, prefix=etcd.new_prefix())).open()
    root = backend.keys.prefix.encode()
    service = await backend.create("/registry/services/specs/default/web", b'{"kind":"Service"}')
    result = await backend.txn([
        Update("/registry/services/specs/default/web", b'{"kind":"Service","v":2}', service.mod_revision),
        Create("/registry/ipaddresses/10.96.0.10", b'{"kind":"IPAddress"}'),
        Create("/registry/servicenodeports/30080", b'{"name":"web"}'),
    ])
    assert {kv.mod_revision for kv in result.results} == {service.mod_revision + 1}
    assert await raw_keys(backend, root + b"/") == {
        root + b"/ipaddresses/10.96.0.10": b'{"kind":"IPAddress"}',
        root + b"/servicenodeports/30080": b'{"name":"web"}',
        root + b"/services/specs/default/web": b'{"kind":"Service","v":2}',
    }
    with pytest.raises(KeyNotFound):  # all or nothing: the first op would have succeeded
        await backend.txn([Delete("/registry/ipaddresses/10.96.0.10"), Delete("/registry/ipaddresses/10.96.0.11")])
    assert len(await raw_keys(backend, root + b"/")) == 3
    await backend.close()


async def test_unreachable_etcd_fails_at_once_with_a_storage_error(etcd):
    backend = EtcdBackend(EtcdConfig(("http://127.0.0.1:9",), request_timeout=5))
    started = time.monotonic()
    with pytest.raises(Unavailable, match="127.0.0.1:9"):
        await backend.create("/registry/services/a", b"v")
    with pytest.raises(Unavailable):
        await backend.watch("/registry/services/", 0)
    assert time.monotonic() - started < 2
    await backend.close()


async def test_an_etcd_that_never_answers_fails_at_the_request_timeout():
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP, never speaks HTTP/2
    backend = EtcdBackend(EtcdConfig((f"http://127.0.0.1:{silent.getsockname()[1]}",), request_timeout=0.5))
    started = time.monotonic()
    with pytest.raises(Unavailable, match="timed out"):
        await backend.get("/registry/services/a")
    assert time.monotonic() - started < 2
    await backend.close()
    silent.close()


async def test_several_servers_one_of_them_down_keep_serving(etcd):
    """--etcd-servers with a dead member among them: requests go to the live one (and the TLS
    name check passes on "localhost", which every member certificate carries)."""
    dead = etcd.client_url.rsplit(":", 1)[0] + ":9"
    backend = EtcdBackend(EtcdConfig((dead, etcd.client_url), etcd.tls.ca_file, etcd.tls.cert_file, etcd.tls.key_file,
                                     prefix=etcd.new_prefix()))
    for i in range(5):
        await backend.create(f"/registry/services/k{i}", b"v")
    assert await backend.count("/registry/services/") == 5
    await backend.close()


async def test_without_the_client_certificate_etcd_refuses(etcd):
    backend = EtcdBackend(EtcdConfig((etcd.client_url,), etcd.tls.ca_file, request_timeout=2))
    with pytest.raises(Unavailable):
        await backend.get("/registry/services/a")
    await backend.close()


@pytest.mark.parametrize(("version", "supported"), [
    ("3.4.23", False), ("3.4.31", True), ("3.5.12", False), ("3.5.13", True), ("3.6.0", True), ("3.6.0-rc.1", True),
    ("3.3.27", False), ("garbage", False),
])
def test_request_watch_progress_only_where_etcd_orders_it_with_events(version, supported):
    """kube-apiserver's endpointSupportsRequestWatchProgress (etcd #15220, #17507)."""
    assert supports_request_watch_progress(version) is supported


async def test_a_progress_notification_never_runs_ahead_of_the_events_it_covers(etcd):
    """A watch opened 1,400 events behind, progress requested at once (the watch handler's
    bookmark timer on the storage path): a PROGRESS, which becomes a BOOKMARK a client resumes
    from, comes after every event up to its revision. etcd 3.4.23 answers the request at once
    with its current revision, ahead of all of them (etcd #15220): there the request is not
    sent, and no PROGRESS comes."""
    backend = await EtcdBackend(config(etcd, prefix=etcd.new_prefix())).open()
    try:
        for txn in range(15):  # one revision of 100 creates each
            await backend.txn([Create(f"/registry/services/specs/default/s{txn}-{i}", b"{}") for i in range(100)])
        current = await backend.current_revision()
        watch = await backend.watch("/registry/services/", current - 14)
        watch.request_progress()
        seen: list[tuple[str, int]] = []
        stream, wait = aiter(watch), 20.0
        while True:
            try:
                batch = await asyncio.wait_for(anext(stream), wait)
            except asyncio.TimeoutError:  # ends the iteration and the watch
                assert wait < 20, f"the watch did not catch up: {len(seen)} events"
                break
            seen.extend((event.type, event.kv.mod_revision) for event in batch)
            if ("PUT", current) in seen and wait == 20:
                watch.request_progress()  # and once caught up: whatever comes within 0.5 s
                wait = 0.5
        assert sum(kind == "PUT" for kind, _ in seen) == 1400
        for index, (kind, revision) in enumerate(seen):
            if kind == "PROGRESS":
                assert all(r <= revision for _, r in seen[:index]) and all(r > revision for _, r in seen[index + 1:]), \
                    (index, revision, seen[:3])
        if not backend.request_watch_progress:  # Debian's 3.4.23
            assert not any(kind == "PROGRESS" for kind, _ in seen), [(i, r) for i, (k, r) in enumerate(seen) if k == "PROGRESS"]
    finally:
        await backend.close()


async def test_open_reads_the_members_version(etcd):
    installed = subprocess.run([ETCD, "--version"], capture_output=True, text=True).stdout.split()[2]  # "etcd Version: 3.4.23"
    backend = await EtcdBackend(config(etcd)).open()
    assert backend.server_version == installed
    if installed == "3.4.23":  # Debian bookworm's
        assert backend.request_watch_progress is False
    await backend.close()


@pytest.mark.parametrize(("state", "won", "remote", "header", "expected"), [
    (CompactorState(0, 0), True, 0, 100, (CompactorState(1, 100), 0)),  # bootstrap: record only
    (CompactorState(1, 100), True, 0, 250, (CompactorState(2, 250), 100)),  # one interval behind
    (CompactorState(1, 100), False, 5, 250, (CompactorState(5, 250), 0)),  # another apiserver won
], ids=["first-tick", "won", "lost"])
def test_compactor_decision(state, won, remote, header, expected):
    assert after_tick(state, won, remote, header) == expected


async def test_two_compactors_on_one_etcd_compact_once_per_round():
    """Each round both apiservers tick (whichever first wins the CAS); one interval of history stays."""
    with running_etcd() as etcd:
        backends = [await EtcdBackend(EtcdConfig((etcd.client_url,))).open() for _ in range(2)]
        compactors = [Compactor(backend, interval=0) for backend in backends]
        everything = await backends[0].watch("", await backends[0].current_revision())
        rounds = []
        for round_number in range(4):
            before = await backends[0].current_revision()
            for i in range(3):
                await backends[1].create(f"/registry/services/r{round_number}-{i}", b"v")
            order = compactors if round_number % 2 == 0 else compactors[::-1]
            rounds.append(([await c.tick() for c in order], before))
        assert rounds[0][0] == [0, 0]  # never on bootstrap
        for (targets, _), (_, earlier) in zip(rounds[1:], rounds):
            assert targets[1] == 0 and targets[0] > earlier  # the first to tick compacts, once
        fresh = await EtcdBackend(EtcdConfig((etcd.client_url,))).open()
        assert fresh.compact_revision() == rounds[-1][0][0]  # learned from etcd on open
        # the CAS key is under the prefix: a watch of everything sees every revision etcd gave out
        seen = []
        async for batch in everything:
            seen += batch
            if seen[-1].kv.mod_revision == await fresh.current_revision():
                break
        assert {e.kv.key for e in seen} >= {"/registry/compact_rev_key"}
        everything.close()
        for backend in (*backends, fresh):
            await backend.close()


@pytest.mark.parametrize("flag", ["/registry", "/t1"])
def test_everything_is_the_prefix_and_its_slash_not_a_longer_prefix(flag):
    """The empty prefix (the watch cache's "everything") covers <prefix>/..., never the keys of
    another --etcd-prefix that starts with the same characters (/registry2, /t10)."""
    begin, end = KeySpace.of(flag).range("")
    assert begin <= f"{flag}/compact_rev_key".encode() < end
    assert begin <= f"{flag}/services/specs/default/web".encode() < end
    assert not begin <= f"{flag}2/services/specs/default/web".encode() < end
    assert not begin <= f"{flag}0/services/specs/default/web".encode() < end
