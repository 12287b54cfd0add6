"""The storage contract (kubesvc.storage.contract) against the etcd backend on a real etcd
(tests/support/etcd.py): every check that test_contract.py runs over the embedded backends.

One etcd serves the module; each backend the factory makes gets a key prefix of its own
(``--etcd-prefix``), which is a fresh, empty store for everything but etcd-wide state: the
revision counter and compaction. The checks assume nothing about absolute revisions, so sharing
the counter is fine; a check that needs a store never compacted starts an etcd of its own."""

from __future__ import annotations

import inspect

import pytest

from kubesvc.storage import contract
from kubesvc.storage.etcd import EtcdBackend, EtcdConfig
from tests.support.etcd import running_etcd

FRESH_ETCD = {"compact_to_window_keeps_the_newest_revisions"}  # asserts compact_revision() == 0 first


async def run(check, argument) -> None:
    outcome = check(argument)
    if inspect.isawaitable(outcome):
        await outcome


@pytest.fixture(scope="module")
def shared_etcd():
    with running_etcd() as etcd:
        yield etcd


def etcd_config(etcd, prefix: str) -> EtcdConfig:
    return EtcdConfig((etcd.client_url,), prefix=prefix, request_timeout=5)


@pytest.mark.parametrize("check", contract.CHECKS, ids=lambda check: check.__name__)
async def test_contract_on_etcd(check, request):
    opened: list[EtcdBackend] = []
    with running_etcd() if check.__name__ in FRESH_ETCD else _shared(request) as etcd:

        def make(**options) -> EtcdBackend:
            backend = EtcdBackend(etcd_config(etcd, etcd.new_prefix()), **options)
            opened.append(backend)
            return backend

        try:
            await run(check, make)
        finally:
            for backend in opened:
                await backend.close()


@pytest.mark.parametrize("check", contract.DURABILITY_CHECKS, ids=lambda check: check.__name__)
async def test_durability_on_etcd(check, shared_etcd):
    """Reopening is a new client (a restarted apiserver) on the same etcd and prefix."""
    prefix = shared_etcd.new_prefix()
    await run(check, lambda: EtcdBackend(etcd_config(shared_etcd, prefix)).open())


class _shared:
    """The module's etcd as a context manager (so either kind of etcd is one ``with``)."""

    def __init__(self, request):
        self.etcd = request.getfixturevalue("shared_etcd")

    def __enter__(self):
        return self.etcd

    def __exit__(self, *exc):
        return False
