"""Driving ``iptables``/``ip6tables`` and their ``-restore``/``-save`` tools (upstream
``pkg/util/iptables``), for one IP family, optionally inside a network namespace.

Bulk changes go through ``iptables-restore --noflush``: one transaction, applied whole or not
at all. Single rules (the jumps from the built-in hooks, which belong to everyone and so cannot
be rewritten by a restore) go through ``iptables -C`` (does it exist?) then ``-I``/``-A``/``-D``.

Exit status 1 from ``-N``/``-C``/``-S``/``-X`` means "already exists" / "not found"; status 4
is a resource problem (the xtables lock timed out) and is reported as a failure.

Two front ends share the argv building: ``Iptables`` (asyncio, for syncs) and
``IptablesSync`` (blocking, for ``--cleanup`` and tests). ``netns`` runs every command inside
that network namespace (``exec.in_netns``).
"""

from __future__ import annotations

import re

from kubesvc.kernel.exec import CommandFailed, CommandResult, in_netns, run, run_sync
from kubesvc.kernel import IPV4, IPV6
APPEND, PREPEND = "-A", "-I"
RESOURCE_PROBLEM = 4  # iptables exit status: lock timeout / resource problem

# upstream: --wait takes seconds; --wait-interval (legacy only) microseconds
WAIT_SECONDS = 5
WAIT_INTERVAL_USEC = 100000

_VERSION_RE = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


class _Commands:
    def __init__(self, family: int = IPV4, *, netns: str | None = None, wait: int = WAIT_SECONDS):
        if family not in (IPV4, IPV6):
            raise ValueError(f"bad IP family {family!r}")
        self.family = family
        self.netns = netns
        self.wait = wait
        base = "ip6tables" if family == IPV6 else "iptables"
        self.binary, self.restore_binary, self.save_binary = base, base + "-restore", base + "-save"
        # Until the version is known, assume a modern iptables (both accept --wait).
        self.nft = True

    def _argv(self, binary: str, *args: str) -> list[str]:
        return in_netns(self.netns, (binary, *args))

    def _wait(self) -> tuple[str, ...]:
        # iptables-nft ignores (and warns about) --wait-interval; legacy honours it.
        if self.nft:
            return ("-w", str(self.wait))
        return ("-w", str(self.wait), "-W", str(WAIT_INTERVAL_USEC))

    def _cmd(self, table: str, op: str, chain: str, *args: str) -> list[str]:
        return self._argv(self.binary, *self._wait(), op, chain, "-t", table, *args)

    def _restore_argv(self, table: str | None, noflush: bool, counters: bool) -> list[str]:
        args = [*self._wait()]
        if table:
            args += ["-T", table]
        if noflush:
            args.append("--noflush")
        if counters:
            args.append("--counters")
        return self._argv(self.restore_binary, *args)

    def _parse_version(self, result: CommandResult) -> tuple[int, int, int]:
        text = result.stdout + result.stderr
        m = _VERSION_RE.search(text)
        self.nft = "nf_tables" in text
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)


def has_random_fully(version: tuple[int, int, int]) -> bool:
    """``MASQUERADE --random-fully`` needs iptables 1.6.2 (upstream ``RandomFullyMinVersion``)."""
    return version >= (1, 6, 2)


def _exists(result: CommandResult) -> bool:
    if result.returncode == 0:
        return True
    if result.returncode == RESOURCE_PROBLEM:
        raise CommandFailed(result.argv, result.returncode, result.stdout, result.stderr)
    return False


class Iptables(_Commands):
    """asyncio front end."""

    async def version(self) -> tuple[int, int, int]:
        return self._parse_version(await run(self._argv(self.binary, "--version")))

    async def restore(self, text: str, *, table: str | None = None, noflush: bool = True, counters: bool = True) -> None:
        """``iptables-restore``: all tables in ``text`` (``table=None``) or only ``-T table``."""
        await run(self._restore_argv(table, noflush, counters), text)

    async def save(self, table: str) -> str:
        return (await run(self._argv(self.save_binary, "-t", table))).stdout

    async def chain_exists(self, table: str, chain: str) -> bool:
        return _exists(await run(self._cmd(table, "-S", chain), check=False))

    async def ensure_chain(self, table: str, chain: str) -> bool:
        """Create ``chain``; True if it existed already."""
        result = await run(self._cmd(table, "-N", chain), check=False)
        if result.returncode == 0:
            return False
        if await self.chain_exists(table, chain):
            return True
        raise CommandFailed(result.argv, result.returncode, result.stdout, result.stderr)

    async def delete_chain(self, table: str, chain: str) -> None:
        await run(self._cmd(table, "-X", chain))

    async def rule_exists(self, table: str, chain: str, *args: str) -> bool:
        return _exists(await run(self._cmd(table, "-C", chain, *args), check=False))

    async def ensure_rule(self, position: str, table: str, chain: str, *args: str) -> bool:
        """Insert (``PREPEND``) or append the rule unless it exists; True if it existed."""
        if await self.rule_exists(table, chain, *args):
            return True
        await run(self._cmd(table, position, chain, *args))
        return False

    async def ensure_jumps(self, jumps) -> None:
        """Each ``(position, jump)`` (a jump: ``table``, ``src``, ``dst``, ``args``) present, its
        target chain created where missing. One ``iptables-save`` per table tells what is
        there, and one ``iptables-restore --noflush`` adds what it lacks (chains declared only
        when missing: a declared chain that exists would be flushed), instead of a ``-N`` and a
        ``-C``/``-I`` process per jump (a first sync of IPVS mode ran about twenty). For small
        rule sets (IPVS mode's static one): the save grows with the table, so iptables mode,
        whose tables grow with the cluster, keeps ``ensure_rule``."""
        jumps = list(jumps)
        for table in sorted({jump.table for _, jump in jumps}):
            lines = (await self.save(table)).splitlines()
            present = set(lines)
            chains = {line[1:].split(" ", 1)[0] for line in lines if line.startswith(":")}
            restore = missing_jumps_restore(table, [(p, j) for p, j in jumps if j.table == table], chains, present)
            if restore:
                await self.restore(restore, table=table, noflush=True, counters=False)


def missing_jumps_restore(table: str, jumps, chains: set[str], present: set[str]) -> str:
    """The ``iptables-restore --noflush`` input adding, to ``table`` as ``iptables-save``
    showed it (its ``chains``, its rule lines ``present``), the target chains and the jump
    rules of ``jumps`` it lacks; "" when nothing is missing. Chains are declared (created)
    only when missing; rules go in the order given, each inserted (``PREPEND``) or appended."""
    declared, rules = [], []
    for position, jump in jumps:
        if jump.dst not in chains and jump.dst not in declared:
            declared.append(jump.dst)
        line = saved_rule(jump.src, jump.args)
        if line not in present:
            rules.append(position + line[len(APPEND):] if position == PREPEND else line)
            present = present | {line}
    if not declared and not rules:
        return ""
    return "\n".join([f"*{table}", *(f":{chain} - [0:0]" for chain in declared), *rules, "COMMIT", ""])


def saved_rule(chain: str, args) -> str:
    """The line ``iptables-save`` prints for a rule appended to ``chain`` with ``args``
    (arguments with spaces, i.e. comments, double-quoted)."""
    return " ".join(["-A", chain, *(f'"{arg}"' if " " in arg else arg for arg in args)])


class IptablesSync(_Commands):
    """Blocking front end (``--cleanup``, tests)."""

    def version(self) -> tuple[int, int, int]:
        return self._parse_version(run_sync(self._argv(self.binary, "--version")))

    def available(self) -> bool:
        """The tool runs and can read the nat table (upstream ``NewBestEffort`` skips families
        whose iptables does not work, e.g. no IPv6 in the kernel)."""
        try:
            self.version()
        except CommandFailed:
            return False
        return run_sync(self._argv(self.save_binary, "-t", "nat"), check=False).returncode == 0

    def restore(self, text: str, *, table: str | None = None, noflush: bool = True, counters: bool = True) -> None:
        run_sync(self._restore_argv(table, noflush, counters), text)

    def save(self, table: str | None = None) -> str:
        return run_sync(self._argv(self.save_binary, *(("-t", table) if table else ()))).stdout

    def chain_exists(self, table: str, chain: str) -> bool:
        return _exists(run_sync(self._cmd(table, "-S", chain), check=False))

    def delete_chain(self, table: str, chain: str) -> None:
        run_sync(self._cmd(table, "-X", chain))

    def flush_chain(self, table: str, chain: str) -> None:
        run_sync(self._cmd(table, "-F", chain))

    def rule_exists(self, table: str, chain: str, *args: str) -> bool:
        return _exists(run_sync(self._cmd(table, "-C", chain, *args), check=False))

    def delete_rule(self, table: str, chain: str, *args: str) -> bool:
        """Delete the rule if present; True if it was there."""
        if not self.rule_exists(table, chain, *args):
            return False
        run_sync(self._cmd(table, "-D", chain, *args))
        return True
