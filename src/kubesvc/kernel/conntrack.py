"""Deleting conntrack entries with the ``conntrack`` tool (conntrack-tools).

Only UDP (and SCTP) need this: a UDP "connection" that was DNATed to a backend keeps going to
that backend for as long as packets flow, even after the backend is gone, because conntrack
never sees it end. kube-proxy deletes those entries after a sync (upstream
``pkg/proxy/conntrack``). ``conntrack -D`` exits 1 when nothing matched, which is not an error.
"""

from __future__ import annotations

from kubesvc.kernel.exec import CommandFailed, run

NOTHING_DELETED = "0 flow entries have been deleted"


async def delete_flows(filter_args: list[str], family: int = 4) -> int:
    """Delete every entry matching ``filter_args`` (e.g. ``-p udp --orig-dst 10.96.0.10``);
    returns how many were deleted."""
    argv = ["conntrack", "-D", "-f", "ipv6" if family == 6 else "ipv4", *filter_args]
    result = await run(argv, check=False)
    if result.returncode == 0 or NOTHING_DELETED in result.stderr:
        return _deleted_count(result.stderr)
    raise CommandFailed(argv, result.returncode, result.stdout, result.stderr)


def _deleted_count(stderr: str) -> int:
    for line in stderr.splitlines():
        if "flow entries have been deleted" in line:
            try:
                return int(line.split()[-6])
            except (ValueError, IndexError):
                return 0
    return 0
