"""What a running ``kubesvc proxy`` starts during one sync: ``strace -f -e trace=execve`` attached
to it (every thread, and every child it forks) around one change, detached once the sync is over.

Upstream kube-proxy starts only the restore tools (``iptables-restore``, ``ipset restore``) in a
steady-state sync; everything else (addresses, links, conntrack, IPVS, nftables) is netlink. Our
proxy is held to the same: tests/kernel/test_proxy_execve.py (nftables, iptables) and
tests/kernel/vm/test_proxy_ipvs_schedulers.py (IPVS) assert on ``programs`` of what was traced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.kernel.helpers import FULL_SYNCS, SYNCS, family_value, settled
from tests.support.netns import ProxyProcess
from tests.support.slowdown import scaled

# 1234  execve("/usr/sbin/iptables-restore", ["iptables-restore", ...], 0x... /* 5 vars */) = 0
# or, when another traced process's event came in between, in two lines:
# 1234  execve("/usr/sbin/iptables-restore", ["iptables-restore", ...], 0x... /* 5 vars */ <unfinished ...>
# 1234  <... execve resumed>)               = 0
_PID = r'^(?:\[pid\s+)?(\d+)\]?\s+'
_EXECVE = re.compile(_PID + r'execve\("([^"]+)"')
_RESUMED = re.compile(_PID + r'<\.\.\. execve resumed>')
_RESULT = re.compile(r'\)\s+=\s+(-?\d+)')


def programs(trace: str) -> Counter:
    """The programs started (successful execve calls), by file name, with how often."""
    found: Counter = Counter()
    unfinished: dict[str, str] = {}  # pid -> the program its execve names
    for line in trace.splitlines():
        line = line.strip()
        path = None
        if m := _EXECVE.match(line):
            if line.endswith("<unfinished ...>"):
                unfinished[m.group(1)] = m.group(2)
                continue
            path = m.group(2)
        elif m := _RESUMED.match(line):
            path = unfinished.pop(m.group(1), None)
        result = _RESULT.search(line)
        if path is not None and result and result.group(1) == "0":
            found[os.path.basename(path)] += 1
    return found


def _traced(pid: int) -> bool:
    """Whether every thread of ``pid`` has a tracer."""
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    for task in tasks:
        status = (task / "status").read_text()
        if int(re.search(r"^TracerPid:\s+(\d+)", status, re.M).group(1)) == 0:
            return False
    return bool(tasks)


@contextlib.asynccontextmanager
async def execve_trace(proxy: ProxyProcess, out: Path):
    """``strace -f -e trace=execve`` attached to the proxy for the body; yields a list that holds
    the trace's text once the body is done."""
    pid = proxy.process.pid
    strace = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(out), "-p", str(pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    result: list[str] = []
    try:
        deadline = time.monotonic() + scaled(20)
        while not _traced(pid):
            assert strace.poll() is None, f"strace exited: {strace.stderr.read().decode(errors='replace')}"
            assert time.monotonic() < deadline, "strace never attached to every thread of the proxy"
            await asyncio.sleep(0.05)
        yield result
    finally:
        strace.send_signal(signal.SIGINT)  # detaches; the proxy runs on
        try:
            strace.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            strace.kill()
            strace.wait()
    result.append(out.read_text(errors="replace") if out.exists() else "")


async def synced_change(proxy: ProxyProcess, change, before_ipv4: float, counter: str = SYNCS):
    """Make ``change`` (an awaitable factory, to IPv4 endpoints) and wait until the IPv4 proxier
    synced (its ``counter`` was ``before_ipv4``: another family's periodic sync does not count)
    and the proxy settled again; its metrics then."""
    await change()
    deadline = time.monotonic() + scaled(30)
    while family_value(await asyncio.to_thread(proxy.metrics), counter) == before_ipv4:
        assert time.monotonic() < deadline, f"the change was never synced\n{proxy.log()}"
        await asyncio.sleep(0.1)
    return await settled(proxy, quiet=scaled(QUIET), timeout=scaled(60))


@dataclass
class Traced:
    started: Counter  # program name -> how many times
    syncs: float  # syncs inside the traced window, of every IP family's proxier
    full_syncs: float  # of which full (periodic resyncs)
    text: str

    def tail(self) -> str:
        return self.text[-3000:]


# Seconds without a sync that count as settled (scaled: in the VM a sync takes seconds, and one
# still running when the trace ends would be traced but not counted). A traced proxy must have
# no periodic resync due meanwhile (a long --*-sync-period), or it would never be quiet so long.
QUIET = 1.5
TRACE_PORTS = [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"},
               {"name": "udp", "port": 53, "targetPort": 8080, "protocol": "UDP"}]


async def traced_endpoint_change(kt, out: Path) -> Traced:
    """A NodePort Service with TCP and UDP ports and two endpoints, synced; then, traced, one
    endpoint turns unready (a UDP endpoint leaving: conntrack cleanup in the same sync)."""
    (node,) = kt.nodes
    labels = {"app": "trace"}
    first = await kt.pod(node, "tr-1", labels)
    await kt.pod(node, "tr-2", labels)
    await kt.service("trace", labels, ports=TRACE_PORTS, type="NodePort")
    return await traced_sync(kt.proxy(node), lambda: kt.set_ready(first, False), out)


async def traced_sync(proxy: ProxyProcess, change, out: Path, counter: str = SYNCS) -> Traced:
    """What the proxy starts from the moment it has settled until ``change`` (an awaitable
    factory) moved the IPv4 proxier's ``counter`` (``SYNCS``, or ``FULL_SYNCS`` for a change
    that makes the sync full) and the proxy settled again."""
    # what was made before synced before the trace starts; a late sync of it that still falls
    # inside the trace is counted with the others
    metrics = await settled(proxy, quiet=scaled(QUIET), timeout=scaled(60))
    before, full_before = metrics.value(SYNCS), metrics.value(FULL_SYNCS)
    async with execve_trace(proxy, out) as trace:
        after = await synced_change(proxy, change, family_value(metrics, counter), counter)
    return Traced(programs(trace[0]), after.value(SYNCS) - before, after.value(FULL_SYNCS) - full_before, trace[0])


def assert_only(traced: Traced, per_sync: dict[str, int], per_full_sync: dict[str, int] | None = None) -> None:
    """Nothing started but the programs of ``per_sync`` (at most that many times per sync) and,
    when full syncs fell in the window, of ``per_full_sync`` (that many times per full sync)."""
    allowed = {name: count * traced.syncs for name, count in per_sync.items()}
    for name, count in (per_full_sync or {}).items():
        allowed[name] = allowed.get(name, 0) + count * traced.full_syncs
    extra = {name: n for name, n in traced.started.items() if n > allowed.get(name, 0)}
    assert not extra, (f"{dict(traced.started)} started in {traced.syncs} syncs ({traced.full_syncs} full); "
                       f"allowed {allowed}\n{traced.tail()}")
