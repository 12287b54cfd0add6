"""kernel/sysctl.py and kernel/netns.py on the real kernel, in throw-away namespaces of the
harness: a ``net.*`` sysctl read and written in a named namespace changes that namespace only,
a failure names the path, and a namespace is identified by its nsfs inode."""

from __future__ import annotations

import os

import pytest

from kubesvc.kernel import netns as knetns
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.sysctl import SysctlFailed, read_sysctl, read_sysctl_async, write_sysctl, write_sysctl_async
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def ns():
    made = Netns.create("sysctl")
    try:
        yield made
    finally:
        made.close()


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
