"""kernel/links.py and the named-namespace half of kernel/netns.py on the real kernel, inside
throw-away namespaces of the harness: a plan of operations runs in the namespace it names (or
the calling thread's), a refusal is a ``LinkFailed`` carrying the operation, the errno and the
kernel's message, ``force`` tries every operation, and namespaces are made, found, emptied of
their processes and removed as ``ip netns`` does, without an ``ip`` process."""

from __future__ import annotations

import asyncio
import errno
import secrets
import subprocess

import pytest

from kubesvc.kernel import links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.links import AddBridge, Address, DelLink, LinkFailed, LinkInfo, Route, SetUp
from tests.support.agent import netns_names
from tests.support.netns import Netns, call_in_netns, wait_until

pytestmark = pytest.mark.kernel


@pytest.fixture
def ns():
    made = Netns.create("links")
    try:
        yield made
    finally:
        made.close()


def test_a_plan_runs_in_the_named_namespace_and_shows_as_ip_would(ns):
    plan = [AddBridge("br9", "02:00:00:00:00:09"), Address("br9", "10.9.0.1/24"), Address("br9", "fd09::1/64"), SetUp("br9"),
            Route("10.99.0.0/16", "br9", replace=False)]
    assert links.apply(plan, ns.name) == []
    assert links.link_info("br9", ns.name) == LinkInfo("bridge", ("10.9.0.1/24", "fd09::1/64"))
    assert "br9" in links.link_names(ns.name) and "br9" not in links.link_names()
    assert ns.ip("-o", "link", "show", "br9").stdout.split("link/ether ")[1].split()[0] == "02:00:00:00:00:09"
    assert ns.ip("route", "show", "10.99.0.0/16").stdout.startswith("10.99.0.0/16 dev br9 ")
    assert links.routable("10.99.1.1", ns.name) and not links.routable("10.98.1.1", ns.name)
    assert links.link_info("nosuch", ns.name) is None


def test_none_is_the_calling_threads_namespace(ns):
    links.apply([AddBridge("br8", "02:00:00:00:00:08")], ns.name)
    assert call_in_netns(ns.name, links.link_names) == {"lo", "br8"}
    assert call_in_netns(ns.name, lambda: asyncio.run(links.link_names_async())) == {"lo", "br8"}


def test_a_refusal_is_a_link_failed_and_force_tries_everything(ns):
    with pytest.raises(LinkFailed) as caught:
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
