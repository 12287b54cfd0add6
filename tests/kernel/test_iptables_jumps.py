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
        await ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
        for jump in JUMP_CHAINS:
            assert ns.run("iptables", "-t", jump.table, "-C", jump.src, *jump.args, check=False).returncode == 0, jump

        commands: list[list[str]] = []
        real_run = iptables_module.run

        async def counting_run(argv, *args, **kwargs):
            commands.append(list(argv))
            return await real_run(argv, *args, **kwargs)

        monkeypatch.setattr(iptables_module, "run", counting_run)
        await ipt.ensure_jumps((PREPEND, jump) for jump in JUMP_CHAINS)
        assert all("iptables-save" in " ".join(c) for c in commands) and len(commands) == 2, commands
        saved = ns.run("iptables-save").stdout
        assert all(saved.count(f"-j {jump.dst}") >= 1 for jump in JUMP_CHAINS)
        assert sum(line.startswith("-A ") for line in saved.splitlines()) == len(JUMP_CHAINS), "no jump twice"
    finally:
        ns.close()
