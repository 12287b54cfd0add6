"""``ipset`` (upstream ``pkg/proxy/ipvs/ipset``'s runner): the IPVS proxier's sets are written in
one ``ipset restore`` per sync (every set created if missing, refilled through a temporary set
swapped in); ``destroy`` removes one set at cleanup; ``version`` is ``ipset --version``'s text.

IPVS mode keeps the tool rather than netlink (``IPSET_CMD_*`` over nfnetlink) because, like
upstream, one restore is one process per sync however many sets and entries it writes. Every
failure is a ``CommandFailed`` (argv, code, output and the input fed); ``netns`` runs the tool
inside that namespace (``exec.in_netns``). ``Ipset`` holds them as one interface per namespace
(its stateful fake: ``kernel.fake.ipset.FakeIpset``).
"""

from __future__ import annotations

import shutil

from kubesvc.kernel.exec import CommandFailed, CommandResult, in_netns, run, run_sync

NOT_FOUND = 'executable file not found in $PATH: "ipset"'


async def restore(text: str, netns: str | None = None, *, runner=run) -> CommandResult:
    """``ipset restore`` of ``text``; raises ``CommandFailed``. ``runner`` is ``exec.run`` or a
    test's stand-in with its signature."""
    return await runner(in_netns(netns, ("ipset", "restore")), text)


async def save(netns: str | None = None, *, runner=run) -> str:
    """``ipset save``: every set (``create NAME TYPE ...``) and member (``add NAME MEMBER``), the
    text ``kubesvc trace`` reads IPVS mode's sets from; raises ``CommandFailed``."""
    return (await runner(in_netns(netns, ("ipset", "save")))).stdout


def destroy_sync(name: str, netns: str | None = None) -> bool:
    """``ipset destroy NAME``; False when it failed (missing, or still named by a rule)."""
    return run_sync(in_netns(netns, ("ipset", "destroy", name)), check=False).returncode == 0


def version_sync() -> str:
    """``ipset --version`` output; raises ``CommandFailed`` (code 127 when there is no ipset)."""
    if shutil.which("ipset") is None:
        raise CommandFailed(("ipset", "--version"), 127, "", NOT_FOUND)
    return run_sync(("ipset", "--version")).stdout


class Ipset:
    """One namespace's ipsets through the tool: the interface the IPVS mode holds. Its stateful
    fake is ``kernel.fake.ipset.FakeIpset``."""

    def __init__(self, netns: str | None = None, *, runner=run):
        self.netns = netns
        self.runner = runner

    async def restore(self, text: str) -> None:
        """``ipset restore`` of ``text``; raises ``CommandFailed``."""
        await restore(text, self.netns, runner=self.runner)

    def destroy_sync(self, name: str) -> bool:
        return destroy_sync(name, self.netns)

    def version_sync(self) -> str:
        return version_sync()
