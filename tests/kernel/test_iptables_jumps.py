"""``Iptables.ensure_jumps`` against the real iptables: the jumps IPVS mode needs are installed
once, and a second call finds every one of them in ``iptables-save`` (our idea of its line
format matches the tool's), so it runs nothing but the saves."""

from __future__ import annotations

import pytest

import kubesvc.kernel.iptables as iptables_module
from kubesvc.kernel.iptables import PREPEND, Iptables
from kubesvc.proxy.ipvs.rules import JUMP_CHAINS
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


async def test_jumps_are_found_in_iptables_save_and_not_checked_again(monkeypatch):
    ns = Netns.create("jumps")
    try:
        ipt = Iptables(netns=ns.name)
        commands: list[list[str]] = []
        real_run = iptables_module.run

        async def counting_run(argv, *args, **kwargs):
            commands.append(list(argv))
            return await real_run(argv, *args, **kwargs)

        monkeypatch.setattr(iptables_module, "run", counting_run)
        # a target chain that exists already, with a rule of its own: kept, not flushed
        existing = JUMP_CHAINS[0]
        ns.run("iptables", "-t", existing.table, "-N", existing.dst)
        ns.run("iptables", "-t", existing.table, "-A", existing.dst, "-j", "RETURN")
        await ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
        for jump in JUMP_CHAINS:
            assert ns.run("iptables", "-t", jump.table, "-C", jump.src, *jump.args, check=False).returncode == 0, jump
        assert ns.run("iptables", "-t", existing.table, "-C", existing.dst, "-j", "RETURN", check=False).returncode == 0
        # the first sync of a fresh node: one save and one restore per table, no -N/-C/-I each
        tables = {jump.table for jump in JUMP_CHAINS}
        assert len(commands) == 2 * len(tables) and all("save" in " ".join(c) or "restore" in " ".join(c) for c in commands), commands
        ns.run("iptables", "-t", existing.table, "-D", existing.dst, "-j", "RETURN")

        commands.clear()
        await ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
        assert all("iptables-save" in " ".join(c) for c in commands) and len(commands) == 2, commands
        saved = ns.run("iptables-save").stdout
        assert all(saved.count(f"-j {jump.dst}") >= 1 for jump in JUMP_CHAINS)
        assert sum(line.startswith("-A ") for line in saved.splitlines()) == len(JUMP_CHAINS), "no jump twice"
    finally:
        ns.close()
