"""kube-proxy's conntrack settings on the real kernel (proxy/startup.py): inside a network
namespace the per-namespace timeouts are written there, while ``nf_conntrack_max``, global and
read-only outside the initial namespace, is refused and only warned about; the host's values
stay as they were."""

from __future__ import annotations

import functools

import pytest

from kubesvc.kernel import params
from kubesvc.kernel.sysctl import read_sysctl, write_sysctl
from kubesvc.proxy.config import ConntrackSettings
from kubesvc.proxy.startup import NF_CONNTRACK_MAX, setup_conntrack
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel

NET = "net/netfilter/"
TIMEOUTS = {"nf_conntrack_tcp_timeout_established": 432000, "nf_conntrack_tcp_timeout_close_wait": 60,
            "nf_conntrack_tcp_be_liberal": 0, "nf_conntrack_udp_timeout": 30, "nf_conntrack_udp_timeout_stream": 120}


def host_values() -> dict[str, str]:
    return {key: read_sysctl(NET + key) for key in (*TIMEOUTS, "nf_conntrack_max")} | {"hashsize": str(params.conntrack_hashsize())}


def test_timeouts_land_in_the_namespace_and_the_global_limit_is_only_warned_about():
    before = host_values()
    ns = Netns.create("ct")
    try:
        ns.sysctls({f"net.netfilter.{key}": value for key, value in TIMEOUTS.items()})
        limit = int(read_sysctl(NF_CONNTRACK_MAX, netns=ns.name)) + 4  # differs, so the proxy tries to write it

        def no_hashsize(buckets):
            raise AssertionError(f"hashsize {buckets} written although nf_conntrack_max was refused")

        done = setup_conntrack(
            ConntrackSettings(max_per_core=1, min=limit, tcp_established_timeout=86400.0, tcp_close_wait_timeout=3600.0,
                              tcp_be_liberal=True, udp_timeout=45.0, udp_stream_timeout=150.0), cpus=1,
            read=functools.partial(read_sysctl, netns=ns.name), write=functools.partial(write_sysctl, netns=ns.name),
            set_hashsize=no_hashsize)

        assert {key: ns.read_sysctl(f"net.netfilter.{key}") for key in TIMEOUTS} == {
            "nf_conntrack_tcp_timeout_established": "86400", "nf_conntrack_tcp_timeout_close_wait": "3600",
            "nf_conntrack_tcp_be_liberal": "1", "nf_conntrack_udp_timeout": "45", "nf_conntrack_udp_timeout_stream": "150"}
        assert NF_CONNTRACK_MAX not in done.written
        assert len(done.warnings) == 1 and "nf_conntrack_max" in done.warnings[0] and "Permission denied" in done.warnings[0]
        assert not done.read_only_sysfs
    finally:
        ns.close()
    assert host_values() == before
