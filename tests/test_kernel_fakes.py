"""The stateful fakes of ``kernel/fake/`` on their own, without a kernel (each is held to the
kernel by its test under tests/kernel/): what they model beyond what a kernel test can reach
here (module loading and dependencies; an ipset still named by a rule)."""

from __future__ import annotations

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.ipset import FakeIpset
from kubesvc.kernel.fake.modules import FakeModules


def test_modprobe_loads_a_module_with_what_it_depends_on():
    fake = FakeModules(available={"ip_vs", "ip_vs_rr", "nf_conntrack", "nf_defrag_ipv4", "nf_defrag_ipv6"}, builtin={"ip_tables"})
    assert not fake.ipvs_present()
    assert fake.load(["ip_vs_rr", "ip_tables", "ip_vs_sh"]) == ["ip_vs_sh"]
    assert fake.loaded == {"ip_vs_rr", "ip_vs", "nf_conntrack", "nf_defrag_ipv4", "nf_defrag_ipv6"}
    assert fake.present(["ip_tables", "ip_vs_sh"]) == fake.loaded | {"ip_tables"} and fake.ipvs_present()
    assert FakeModules(available={"ip_vs"}, has_modprobe=False).load(["ip_vs"]) == ["ip_vs"]


def test_an_ipset_named_by_a_rule_is_not_destroyed():
    fake = FakeIpset()
    fake.command("create", "KUBE-CLUSTER-IP", "hash:ip,port")
    fake.referenced.add("KUBE-CLUSTER-IP")
    assert not fake.destroy_sync("KUBE-CLUSTER-IP")
    with pytest.raises(CommandFailed, match="in use by a kernel component"):
        fake.command("destroy")
    fake.referenced.clear()
    assert fake.destroy_sync("KUBE-CLUSTER-IP") and fake.sets == {}
