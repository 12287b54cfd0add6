"""The sysctl fake (``kernel/fake/sysctl.py``) against ``/proc/sys`` in a namespace of the test's
own (``net.*`` keys belong to the namespace): the fake starts from the namespace's own values
(a new namespace may inherit some from the host's), then every write goes to both, both accept
it or both refuse it with the same errno, and afterwards every key reads the same.
"""

from __future__ import annotations

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.sysctl import CONF_KEYS, DEFAULTS, FakeSysctl
from kubesvc.kernel.sysctl import Sysctl
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


def keys(links=("lo",)) -> list[str]:
    devs = ("all", "default", *links)
    return [*DEFAULTS, *(f"net/{family}/conf/{dev}/{name}" for family, names in CONF_KEYS.items() for dev in devs for name in names)]


def outcome(fn, *args):
    try:
        return fn(*args)
    except CommandFailed as err:
        return f"errno {err.returncode}"


@pytest.fixture
def pair():
    ns = Netns.create("sysctl")
    try:
        real = Sysctl(ns.name)
        fake = FakeSysctl({key: real.read(key) for key in DEFAULTS})
        fake.values.update({key: real.read(key) for key in keys()})  # conf values too may come from the host's
        yield ns, real, fake
    finally:
        ns.close()


def test_writes_and_reads_alike(pair):
    ns, real, fake = pair
    assert {k: fake.read(k) for k in keys()} == {k: real.read(k) for k in keys()}
    writes = [
        ("net.ipv4.ip_forward", "1"), ("net/ipv4/ip_forward", "abc"), ("net/ipv4/ip_forward", " 0 "), ("net/ipv4/ip_forward", ""),
        ("net/ipv4/ip_forward", 1),
        ("net/ipv6/conf/all/forwarding", "1"), ("net/ipv4/conf/all/forwarding", "0"),
        ("net/ipv4/conf/all/rp_filter", "2"), ("net/ipv4/conf/lo/send_redirects", "0"), ("net/ipv4/conf/all/route_localnet", "1"),
        ("net/ipv4/conf/all/arp_ignore", "1"), ("net/ipv4/conf/all/arp_announce", "2"),
        ("net/netfilter/nf_conntrack_max", "131072"),  # read-only outside the initial namespace
        ("net/netfilter/nf_conntrack_tcp_be_liberal", "2"), ("net/netfilter/nf_conntrack_tcp_be_liberal", "1"),
        ("net/netfilter/nf_conntrack_udp_timeout", "60"), ("net/core/somaxconn", "8192"),
        ("net/ipv4", "1"), ("net/ipv4/no_such_key", "1"), ("net/ipv4/conf/eth9/rp_filter", "0"),
    ]
    for key, value in writes:
        assert outcome(fake.write, key, value) == outcome(real.write, key, value), (key, value)
        assert {k: fake.read(k) for k in keys()} == {k: real.read(k) for k in keys()}, (key, value)
    for key in ("net/ipv4", "net/ipv4/no_such_key", "net/ipv4/conf/eth9/rp_filter"):
        assert outcome(fake.read, key) == outcome(real.read, key), key


def test_a_new_links_keys_come_from_default(pair):
    ns, real, fake = pair
    real.write("net/ipv4/conf/default/rp_filter", "2")
    fake.write("net/ipv4/conf/default/rp_filter", "2")
    ns.ip("link", "add", "br9", "type", "bridge")
    fake.add_link("br9")
    assert {k: fake.read(k) for k in keys(("lo", "br9"))} == {k: real.read(k) for k in keys(("lo", "br9"))}
    ns.ip("link", "del", "br9")
    fake.remove_link("br9")
    assert outcome(fake.read, "net/ipv4/conf/br9/rp_filter") == outcome(real.read, "net/ipv4/conf/br9/rp_filter")
