"""The agent's DNS shell (poddns): the two files in the Pod's directory (0644), the events
forming them, and the binds a container gets (none where it mounts a volume itself)."""

from __future__ import annotations

import stat

from kubesvc.agent.poddns import NodeDNS, binds_for
from kubesvc.kernel.mounts import BindMount


def test_files_events_and_binds(tmp_path):
    node_file = tmp_path / "node-resolv.conf"
    node_file.write_text("nameserver 192.168.1.1\nsearch lan\n")
    dns = NodeDNS(("10.96.0.10",), "cluster.local", str(node_file))
    pod = {"metadata": {"name": "web-0", "namespace": "shop"},
           "spec": {"hostname": "web-0", "subdomain": "web", "dnsConfig": {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"]}}}
    pod_dir = tmp_path / "pod"
    events = dns.write_pod_files(pod, ["10.244.0.5"], pod_dir)
    assert (pod_dir / "resolv.conf").read_text() == (
        "search shop.svc.cluster.local svc.cluster.local cluster.local lan\nnameserver 10.96.0.10\nnameserver 1.1.1.1\nnameserver 2.2.2.2\n"
        "options ndots:5\n")
    assert (pod_dir / "etc-hosts").read_text().endswith("10.244.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n")
    assert all(stat.S_IMODE((pod_dir / name).stat().st_mode) == 0o644 for name in ("resolv.conf", "etc-hosts"))
    assert [(e.reason, e.on) for e in events] == [("DNSConfigForming", "Pod")]
    assert binds_for({"name": "c"}, pod_dir) == [BindMount(str(pod_dir / "resolv.conf"), "/etc/resolv.conf"),
                                                  BindMount(str(pod_dir / "etc-hosts"), "/etc/hosts")]
    own_hosts = {"name": "c", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}
    assert binds_for(own_hosts, pod_dir) == [BindMount(str(pod_dir / "resolv.conf"), "/etc/resolv.conf")]


def test_missing_cluster_dns_and_node_check(tmp_path):
    node_file = tmp_path / "node-resolv.conf"
    node_file.write_text("nameserver 192.168.1.1\nsearch " + " ".join(f"d{i}.example" for i in range(30)) + "\n")
    dns = NodeDNS((), "cluster.local", str(node_file))
    events = dns.write_pod_files({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {}}, ["10.244.0.6"], tmp_path / "pod")
    assert [(e.reason, e.on) for e in events] == [("MissingClusterDNS", "Pod"), ("MissingClusterDNS", "Node")]
    assert [e.reason for e in dns.start_events()] == ["CheckLimitsForResolvConf"]
    assert NodeDNS((), "", "").start_events() == []


def test_node_resolv_conf_skips_a_loopback_only_file(tmp_path):
    from kubesvc.agent.poddns import node_resolv_conf

    stub, upstreams, plain = tmp_path / "stub", tmp_path / "upstreams", tmp_path / "plain"
    stub.write_text("nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n")
    upstreams.write_text("nameserver 192.168.1.1\n")
    plain.write_text("nameserver 10.255.255.53\n")
    assert node_resolv_conf(str(stub), str(upstreams)) == str(upstreams)  # systemd-resolved: its upstreams (k3s)
    assert node_resolv_conf(str(stub), str(tmp_path / "missing")) == str(stub)
    assert node_resolv_conf(str(plain), str(upstreams)) == str(plain)
