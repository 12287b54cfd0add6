"""The node side of ``kernel/`` on the real kernel, in throw-away namespaces of the harness.

* ``kernel/sysctl.py``: a ``net.*`` sysctl read and written in a named namespace changes that
  namespace only; a failure is a ``SysctlFailed`` naming the path and the value.
* ``kernel/netns.py``: a namespace is identified by its nsfs inode; namespaces are made, found,
  emptied of their processes and removed as ``ip netns`` does, without an ``ip`` process.
* ``kernel/links.py``: a plan of operations runs in the namespace it names (or the calling
  thread's); a refusal is a ``NetlinkFailed`` carrying the operation, the errno and the kernel's
  message; ``force`` tries every operation.
* ``kernel/process.py``: a process spawned into a namespace runs there with the environment and
  directory given, in a session whose whole group ``kill_group`` reaches; ``terminate`` is
  SIGTERM, then SIGKILL after the grace period.
* the Pod network (``agent/podnet.py`` over all of the above), traced with ``strace -f -e
  trace=execve`` from its interpreter's start: making the node network, adding, removing and
  tearing down Pods starts no process at all (no ``ip``, no ``sysctl``).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

from kubesvc.kernel import links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel import process as kprocess
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.links import AddBridge, Address, DelLink, LinkInfo, Route, SetUp
from kubesvc.kernel.netlink import NetlinkFailed
from kubesvc.kernel.sysctl import SysctlFailed, read_sysctl, read_sysctl_async, write_sysctl, write_sysctl_async
from tests.kernel.execve import programs
from tests.support.agent import nsenter_argv
from tests.support.netns import REPO_ROOT, Netns, call_in_netns, netns_names, wait_until

pytestmark = pytest.mark.kernel


@pytest.fixture
def ns():
    made = Netns.create("kdoor")
    try:
        yield made
    finally:
        made.close()


# ---------------------------------------------------------------------------------------------
# sysctls and namespace identity


def test_a_sysctl_is_written_and_read_in_the_named_namespace_only(ns):
    host_before = read_sysctl("net.ipv4.conf.lo.accept_local")
    assert read_sysctl("net/ipv4/conf/lo/accept_local", netns=ns.name) == ns.read_sysctl("net.ipv4.conf.lo.accept_local")

    write_sysctl("net.ipv4.conf.lo.accept_local", 1, netns=ns.name)
    assert ns.read_sysctl("net.ipv4.conf.lo.accept_local") == "1"
    assert read_sysctl("net.ipv4.conf.lo.accept_local", netns=ns.name) == "1"
    assert read_sysctl("net.ipv4.conf.lo.accept_local") == host_before, "the host's value is untouched"


async def test_the_async_forms_do_the_same(ns):
    await write_sysctl_async("net/ipv4/ip_forward", "1", netns=ns.name)
    assert await read_sysctl_async("net.ipv4.ip_forward", netns=ns.name) == "1"
    assert ns.read_sysctl("net.ipv4.ip_forward") == "1"


def test_a_failure_carries_the_path_and_the_value(ns):
    with pytest.raises(SysctlFailed) as caught:
        write_sysctl("net.ipv4.conf.nosuchdev.forwarding", "1", netns=ns.name)
    err = caught.value
    assert isinstance(err, CommandFailed)
    assert err.path == "/proc/sys/net/ipv4/conf/nosuchdev/forwarding"
    assert err.argv == (err.path,) and err.input_text == "1" and err.returncode == 2
    assert str(err) == ("sysctl net.ipv4.conf.nosuchdev.forwarding: write '1' to "
                        "/proc/sys/net/ipv4/conf/nosuchdev/forwarding: No such file or directory")
    with pytest.raises(SysctlFailed, match=r"^sysctl net.nosuch: read /proc/sys/net/nosuch: "):
        read_sysctl("net.nosuch")


def test_a_namespace_is_identified_by_its_nsfs_inode(ns):
    mine = knetns.identify()
    assert mine == knetns.identify(f"/proc/{os.getpid()}/ns/net")
    theirs = knetns.identify(knetns.netns_path(ns.name))
    assert theirs != mine
    assert knetns.call_in(ns.name, knetns.identify, "/proc/thread-self/ns/net") == theirs
    assert knetns.identify("/proc/thread-self/ns/net") == mine, "the caller's thread never moved"


def test_entering_a_missing_namespace_raises_oserror():
    with pytest.raises(FileNotFoundError):
        knetns.call_in("ks-no-such-namespace", lambda: None)


# ---------------------------------------------------------------------------------------------
# links, addresses, routes, named namespaces


def test_a_plan_runs_in_the_named_namespace_and_shows_as_ip_would(ns):
    plan = [AddBridge("br9", "02:00:00:00:00:09"), Address("br9", "10.9.0.1/24"), Address("br9", "fd09::1/64", nodad=True), SetUp("br9"),
            Route("10.99.0.0/16", "br9", replace=False)]
    assert links.apply(plan, ns.name) == []
    assert links.link_info("br9", ns.name) == LinkInfo("bridge", ("10.9.0.1/24", "fd09::1/64"))
    assert "br9" in links.link_names(ns.name) and "br9" not in links.link_names()
    assert ns.ip("-o", "link", "show", "br9").stdout.split("link/ether ")[1].split()[0] == "02:00:00:00:00:09"
    assert ns.ip("route", "show", "10.99.0.0/16").stdout.startswith("10.99.0.0/16 dev br9 ")
    assert "nodad" in ns.ip("-6", "-o", "addr", "show", "dev", "br9", "scope", "global").stdout
    assert links.routable("10.99.1.1", ns.name) and not links.routable("10.98.1.1", ns.name)
    assert links.link_info("nosuch", ns.name) is None


def test_none_is_the_calling_threads_namespace(ns):
    links.apply([AddBridge("br8", "02:00:00:00:00:08")], ns.name)
    assert call_in_netns(ns.name, links.link_names) == {"lo", "br8"}
    assert call_in_netns(ns.name, lambda: asyncio.run(links.link_names_async())) == {"lo", "br8"}


def test_a_refusal_is_a_link_failed_and_force_tries_everything(ns):
    with pytest.raises(NetlinkFailed) as caught:
        links.apply([DelLink("nosuch0"), AddBridge("br7", "02:00:00:00:00:07")], ns.name)
    err = caught.value
    assert isinstance(err, CommandFailed)
    assert (err.argv, err.returncode, err.input_text) == (("netlink", "link del nosuch0"), errno.ENODEV, "link del nosuch0")
    assert str(err) == f'link del nosuch0 (netns {ns.name}): Cannot find device "nosuch0"'
    assert "br7" not in links.link_names(ns.name), "a plan stops at its first refusal"

    errors = links.apply([DelLink("nosuch0"), AddBridge("br7", "02:00:00:00:00:07"), AddBridge("br7", "02:00:00:00:00:07")], ns.name,
                         force=True)
    assert errors == [f'link del nosuch0 (netns {ns.name}): Cannot find device "nosuch0"',
                      f"link add br7 address 02:00:00:00:00:07 type bridge (netns {ns.name}): File exists"]
    assert "br7" in links.link_names(ns.name)


def test_sockets_leave_no_file_descriptor_behind(ns):
    gc.disable()  # what is left must not depend on when the cyclic collector runs
    try:
        links.link_names(ns.name)
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            links.link_names(ns.name)
            links.link_info("lo", ns.name)
            links.apply([SetUp("lo")], ns.name)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()


def test_named_namespaces_are_made_found_emptied_and_removed():
    name = f"ks-kl-{secrets.token_hex(3)}"
    knetns.create(name)
    try:
        assert name in knetns.names() and name in netns_names() and knetns.exists(name)
        with pytest.raises(FileExistsError):
            knetns.create(name)
        assert knetns.call_in(name, knetns.current_name) == name
        sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
        try:
            wait_until(lambda: knetns.pids_in(name), 5, "the sleeper inside the namespace")
            assert knetns.pids_in(name) == [sleeper.pid]
            assert knetns.kill_all_in(name) == [sleeper.pid]
            assert sleeper.wait(timeout=5) == -9
        finally:
            if sleeper.poll() is None:
                sleeper.kill()
    finally:
        knetns.remove(name)
    assert name not in netns_names() and not knetns.exists(name)
    with pytest.raises(FileNotFoundError):
        knetns.remove(name)


# ---------------------------------------------------------------------------------------------
# processes


async def test_spawn_runs_in_the_namespace_with_env_and_cwd(ns, tmp_path):
    process = await kprocess.spawn(["sh", "-c", 'readlink /proc/self/ns/net; echo "$GREETING"; pwd; echo oops >&2'],
                                   env={"PATH": os.environ["PATH"], "GREETING": "hi"}, cwd=str(tmp_path), netns=ns.name, merge_stderr=True)
    out = await process.stdout.read()  # spawn's Process has the readers and wait(), not communicate()
    await process.wait()
    ident = knetns.identify(knetns.netns_path(ns.name))
    assert out.decode().splitlines() == [f"net:[{ident.ino}]", "hi", str(tmp_path), "oops"]
    assert process.returncode == 0 and os.getsid(0) != process.pid


async def test_kill_group_reaches_what_the_process_left_running(tmp_path):
    process = await kprocess.spawn(["sh", "-c", "sleep 600 & echo $!; wait"], env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path))
    child = int((await process.stdout.readline()).decode())
    assert os.getpgid(child) == process.pid, "the child is in the group the process leads"
    kprocess.kill_group(process.pid, signal.SIGKILL)
    assert await asyncio.wait_for(process.wait(), 5) == -signal.SIGKILL
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError(f"pid {child} survived kill_group")
    kprocess.kill_group(process.pid, signal.SIGKILL)  # a group already gone is fine


def test_terminate_sends_sigterm_then_sigkill_after_the_grace_period():
    polite = subprocess.Popen(["sleep", "600"])
    stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"])
    try:
        time.sleep(0.1)  # the trap is set
        assert kprocess.alive(polite.pid) and kprocess.alive(stubborn.pid)
        kprocess.terminate(polite.pid, grace=5)
        assert polite.wait(timeout=5) == -signal.SIGTERM
        start = time.monotonic()
        kprocess.terminate(stubborn.pid, grace=0.3)
        assert stubborn.wait(timeout=5) == -signal.SIGKILL and time.monotonic() - start >= 0.3
        assert not kprocess.alive(polite.pid)
        kprocess.terminate(polite.pid, grace=1)  # gone already: nothing to do
    finally:
        for process in (polite, stubborn):
            if process.poll() is None:
                process.kill()


def test_a_zombie_is_not_alive_and_terminate_does_not_wait_for_it():
    """A child that exited but is not reaped yet (as kubesvc leave sees a join its parent has
    not waited for): not alive, so terminate returns at once instead of after its grace."""
    zombie = subprocess.Popen(["sh", "-c", "exit 0"])
    try:
        for _ in range(100):
            if open(f"/proc/{zombie.pid}/stat").read().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the child never became a zombie")
        assert not kprocess.alive(zombie.pid)
        start = time.monotonic()
        kprocess.terminate(zombie.pid, grace=5)
        assert time.monotonic() - start < 1
    finally:
        zombie.wait(timeout=5)


# ---------------------------------------------------------------------------------------------
# the Pod network spawns nothing

POD_NETWORK_SCRIPT = """
import asyncio, sys
from pathlib import Path
from kubesvc.agent import podnet

async def main():
    net = podnet.NodeNetwork(["10.244.1.0/24", "fd00:10:244:1::/64"], "cbr0", sys.argv[2], state_dir=Path(sys.argv[1]))
    await podnet.ensure_node_network(net)
    pods = [await podnet.add_pod(net, uid) for uid in ("u1", "u2")]
    await podnet.add_pod(net, "u1")  # again: repaired, unchanged
    await podnet.remove_pod(net, "u2")
    print(pods[0].ips, await podnet.teardown_node_network(net))

asyncio.run(main())
"""


def test_the_pod_network_starts_no_process(ns, tmp_path):
    prefix = f"ks-x{secrets.token_hex(3)}-"
    trace = tmp_path / "execve.trace"
    argv = nsenter_argv(ns.name, "strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), sys.executable, "-c", POD_NETWORK_SCRIPT,
                        str(tmp_path / "state"), prefix)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    finally:
        for name in netns_names():
            if name.startswith(prefix):
                knetns.remove(name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['10.244.1.2', 'fd00:10:244:1::2'] []"
    started = programs(trace.read_text())
    assert started == {os.path.basename(sys.executable): 1}, f"the pod network started {started}"
