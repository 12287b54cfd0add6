"""The nftables fake's own contract, without a kernel (``tests/kernel/test_nft_fake.py`` holds
it against the real nft): a drop-in for ``kernel.nftables.NFTables``, all-or-nothing
transactions, one ruleset shared by both families, and failure injection."""

from __future__ import annotations

import inspect

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.nftables import FakeKernel, FakeNFTables
from kubesvc.kernel.nftables import NFTables, table_contents


def public(cls) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(cls).items() if callable(fn) and not name.startswith("_")}


def test_fake_is_a_drop_in_for_nftables():
    """Every public method of NFTables exists on the fake with the same signature and kind
    (coroutine or not), and the attributes callers read are there."""
    fake = public(FakeNFTables)
    for name, signature in public(NFTables).items():
        assert name in fake, f"FakeNFTables lacks {name}"
        assert fake[name] == signature, f"{name}: {fake[name]} != {signature}"
        assert inspect.iscoroutinefunction(getattr(FakeNFTables, name)) == inspect.iscoroutinefunction(getattr(NFTables, name)), name
    real, double = NFTables(6, in_process=False), FakeNFTables(6)
    for attr in ("family", "family_name", "table", "netns", "in_process"):
        assert getattr(double, attr) == getattr(real, attr), attr


async def test_a_rejected_transaction_changes_nothing():
    nft = FakeNFTables()
    nft.run_sync("add table ip kube-proxy\nadd chain ip kube-proxy a\nadd set ip kube-proxy s { type ipv4_addr ; }\n")
    before = nft.dump()
    with pytest.raises(CommandFailed) as failed:
        await nft.run("add element ip kube-proxy s { 10.0.0.1 }\nadd chain ip kube-proxy b\ndelete chain ip kube-proxy nope\n")
    assert "/dev/stdin:3:" in failed.value.first_error_line and "No such file or directory" in failed.value.stderr
    assert nft.dump() == before and nft.elements("s") == {}


async def test_families_share_one_kernel_and_listing_reads_back():
    kernel = FakeKernel()
    v4, v6 = FakeNFTables(4, kernel=kernel), FakeNFTables(6, kernel=kernel)
    v6.run_sync('add table ip6 kube-proxy\nadd map ip6 kube-proxy m { type ipv6_addr . inet_proto . inet_service : verdict ; }\n'
                'add chain ip6 kube-proxy c\nadd element ip6 kube-proxy m { fd00:0::1 . 6 . 80 comment "x" : goto c }\n')
    assert await v4.list_table() == [] and await v4.chain_rule_count("c") is None
    assert table_contents(await v6.list_table()) == (["c"], ["m"], {"m": {"fd00::1 . tcp . 80": "goto c"}})
    assert table_contents(await v6.list_table(terse=True))[2] == {"m": {}}
    assert await v6.chain_rule_count("c") == 0
    assert not v4.delete_table_sync() and v6.delete_table_sync() and kernel.tables == {}


def test_injected_failure_is_a_command_failed_and_applies_nothing():
    nft = FakeNFTables()
    nft.fail_next = "Error: Could not process rule: Cannot allocate memory"
    with pytest.raises(CommandFailed, match="Cannot allocate memory"):
        nft.run_sync("add table ip kube-proxy\n")
    assert nft.dump() == ""
    nft.run_sync("add table ip kube-proxy\n")
    assert nft.kernel.transactions == ["add table ip kube-proxy\n"]


def test_destroy_only_where_nft_knows_it():
    """nft 1.0.6 (ours) has no ``destroy``; a FakeKernel(destroy=True) models nft >= 1.0.8,
    where destroy is delete without the error for what is missing."""
    old = FakeNFTables()
    with pytest.raises(CommandFailed, match="syntax error"):
        old.run_sync("destroy table ip kube-proxy\n")
    new = FakeNFTables(kernel=FakeKernel(destroy=True))
    new.run_sync("destroy table ip nope\nadd table ip kube-proxy\nadd set ip kube-proxy s { type ipv4_addr ; }\n"
                 "destroy chain ip kube-proxy nope\ndestroy element ip kube-proxy s { 10.0.0.1 }\nadd chain ip kube-proxy c\n"
                 "destroy chain ip kube-proxy c\n")
    assert new.dump() == "add table ip kube-proxy\nadd set ip kube-proxy s { type ipv4_addr ; }\n"


def test_a_comment_names_no_chain_or_set():
    nft = FakeNFTables()
    nft.run_sync('add table ip kube-proxy\nadd chain ip kube-proxy a\nadd rule ip kube-proxy a accept comment "jump b or @s"\n')
    assert nft.rules("a") == ['accept comment "jump b or @s"']
