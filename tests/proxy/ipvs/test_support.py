"""Can the IPVS proxier run here, and the settings of the iptables fallback
(src/kubesvc/proxy/ipvs/support.py): pure decisions over hand-written kernel facts, and the
host probe over a fake root directory."""

from __future__ import annotations

import gzip
import os

import pytest

from kubesvc.proxy.config import ProxyFlags, complete, resolve
from kubesvc.proxy.ipvs.support import KernelFacts, host_facts, ipset_version_ok, iptables_fallback, unavailable_reason

ALL = frozenset({"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"})
IPSET = "ipset v7.17, protocol version: 7\n"


@pytest.mark.parametrize(("facts", "scheduler", "reason"), [
    (KernelFacts(ALL, IPSET), "", None),
    (KernelFacts(ALL, IPSET), "rr", None),
    (KernelFacts(ALL | {"ip_vs_mh"}, IPSET), "mh", None),
    (KernelFacts(ALL, IPSET), "lc",
     "IPVS proxier will not be used because the following required kernel modules are not loaded: [ip_vs_lc]"),
    (KernelFacts(frozenset({"nf_conntrack"}), None, "not found"), "",
     "IPVS proxier will not be used because the following required kernel modules are not loaded: [ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh]"),
    (KernelFacts(ALL, None, 'executable file not found in $PATH: "ipset"'), "",
     'error getting ipset version, error: executable file not found in $PATH: "ipset"'),
    (KernelFacts(ALL, "ipset v5.4, protocol version: 5"), "", "ipset version: 5.4 is less than min required version: 6.0"),
], ids=["all-default-scheduler", "all-rr", "mh-module", "scheduler-module-missing", "no-ipvs-kernel", "no-ipset", "old-ipset"])
def test_unavailable_reason(facts, scheduler, reason):
    assert unavailable_reason(facts, scheduler) == reason


@pytest.mark.parametrize(("text", "expected"), [
    ("ipset v7.17, protocol version: 7", ("7.17", True)),
    ("ipset v6.0, protocol version: 6", ("6.0", True)),
    ("ipset v5.99", ("5.99", False)),
    ("garbage", ("garbage", False)),
], ids=["7.17", "6.0", "5.99", "garbage"])
def test_ipset_version(text, expected):
    assert ipset_version_ok(text) == expected


def _root(tmp_path, *, modules: str | None = None, builtin: str | None = None, config: str | None = None, proc_ip_vs=False):
    (tmp_path / "proc/net").mkdir(parents=True)
    if modules is not None:
        (tmp_path / "proc/modules").write_text(modules)
    if builtin is not None:
        d = tmp_path / f"lib/modules/{os.uname().release}"
        d.mkdir(parents=True)
        (d / "modules.builtin").write_text(builtin)
    if config is not None:
        (tmp_path / "proc/config.gz").write_bytes(gzip.compress(config.encode()))
    if proc_ip_vs:
        (tmp_path / "proc/net/ip_vs").write_text("")
    return tmp_path


@pytest.mark.parametrize(("layout", "present"), [
    (dict(modules="ip_vs_rr 16384 0 - Live 0x0\nip_vs 200000 1 ip_vs_rr, Live 0x0\n"), {"ip_vs", "ip_vs_rr"}),
    (dict(modules="", builtin="kernel/net/netfilter/ipvs/ip_vs.ko\nkernel/net/netfilter/ipvs/ip_vs_sh.ko\n"), {"ip_vs", "ip_vs_sh"}),
    (dict(config="CONFIG_IP_VS=y\nCONFIG_IP_VS_RR=m\nCONFIG_NF_CONNTRACK=y\n"), {"ip_vs", "nf_conntrack"}),
    (dict(modules="", proc_ip_vs=True), {"ip_vs"}),
], ids=["loaded-modules", "builtin-list", "static-kernel-config", "proc-net-ip-vs"])
def test_host_facts_reads_modules_builtins_and_config(tmp_path, layout, present):
    calls = []
    facts = host_facts("rr", root=_root(tmp_path, **layout), run=lambda argv: calls.append(argv) or 1)
    assert facts.modules & {"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"} == present


def test_iptables_fallback_keeps_configz_and_takes_iptables_periods():
    settings = resolve(complete(ProxyFlags(proxy_mode="ipvs", ipvs_sync_period=9.0, ipvs_min_sync_period=3.0)),
                       os_hostname=lambda: "node-a")
    assert (settings.mode, settings.sync_period, settings.min_sync_period) == ("ipvs", 9.0, 3.0)
    fallback = iptables_fallback(settings)
    assert (fallback.mode, fallback.sync_period, fallback.min_sync_period) == ("iptables", 30.0, 1.0)
    assert fallback.configz()["mode"] == "ipvs"
    assert fallback.configz() == settings.configz()
    assert fallback.ipvs == settings.ipvs and fallback.hostname == "node-a"
