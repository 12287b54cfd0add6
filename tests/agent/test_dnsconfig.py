"""A Pod's resolv.conf and hosts file, as the kubelet forms them (pkg/kubelet/network/dns/dns.go,
kubelet_pods.go) and containerd writes them. Expected files are written out by hand from the
reference's worked examples (node file ``nameserver 192.168.1.1`` / ``nameserver 192.168.1.2``
/ ``search lan example.com`` / ``options edns0 timeout:2``; ``--cluster-dns 10.96.0.10``,
``--cluster-domain cluster.local``, Pod in ``default``) and the kubelet's event texts."""

from __future__ import annotations

import pytest

from kubesvc.agent.dnsconfig import Event, host_limit_events, host_resolv_conf, hosts_file, parse_resolv_conf, pod_dns

NODE = "# the node's\nnameserver 192.168.1.1\nnameserver 192.168.1.2\nsearch lan example.com\noptions edns0 timeout:2\n"
CLUSTER_SEARCH = "search default.svc.cluster.local svc.cluster.local cluster.local lan example.com\n"


def pod(dns_policy=None, dns_config=None, host_network=False, **spec):
    return {"metadata": {"name": "busybox1", "namespace": "default", "uid": "u1"},
            "spec": {**({"dnsPolicy": dns_policy} if dns_policy else {}), **({"dnsConfig": dns_config} if dns_config else {}),
                     "hostNetwork": host_network, **spec}}


def resolv(p, cluster_dns=("10.96.0.10",), domain="cluster.local", node=NODE):
    return pod_dns(p, list(cluster_dns), domain, host_resolv_conf(node))


@pytest.mark.parametrize("p, expected", [
    (pod(), CLUSTER_SEARCH + "nameserver 10.96.0.10\noptions ndots:5\n"),
    (pod("ClusterFirst", {"nameservers": ["1.1.1.1"], "searches": ["foo.example"], "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}),
     "search default.svc.cluster.local svc.cluster.local cluster.local lan example.com foo.example\n"
     "nameserver 10.96.0.10\nnameserver 1.1.1.1\noptions ndots:2 edns0\n"),
    (pod("Default"), "search lan example.com\nnameserver 192.168.1.1\nnameserver 192.168.1.2\noptions edns0 timeout:2\n"),
    (pod("None", {"nameservers": ["192.0.2.1"], "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
                  "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}),
     "search ns1.svc.cluster-domain.example my.dns.search.suffix\nnameserver 192.0.2.1\noptions ndots:2 edns0\n"),
    (pod("ClusterFirst", host_network=True), "search lan example.com\nnameserver 192.168.1.1\nnameserver 192.168.1.2\noptions edns0 timeout:2\n"),
    (pod("ClusterFirstWithHostNet", host_network=True), CLUSTER_SEARCH + "nameserver 10.96.0.10\noptions ndots:5\n"),
    (pod("Default", {"options": [{"name": "timeout", "value": "5"}, {"name": "rotate"}]}),
     "search lan example.com\nnameserver 192.168.1.1\nnameserver 192.168.1.2\noptions edns0 timeout:5 rotate\n"),
    (pod("ClusterFirst", {"searches": ["lan", "svc.cluster.local"], "nameservers": ["10.96.0.10"]}),  # duplicates dropped
     CLUSTER_SEARCH + "nameserver 10.96.0.10\noptions ndots:5\n"),
], ids=["cluster-first", "cluster-first-dns-config", "default", "none-website-example", "cluster-first-host-network-is-default",
        "cluster-first-with-host-net", "default-options-merge", "duplicates"])
def test_policies(p, expected):
    formed = resolv(p)
    assert formed.resolv_conf.render() == expected
    assert formed.events == []


def test_no_cluster_dns_falls_back_to_default_with_events():
    formed = resolv(pod(), cluster_dns=())
    assert formed.resolv_conf.render() == "search lan example.com\nnameserver 192.168.1.1\nnameserver 192.168.1.2\noptions edns0 timeout:2\n"
    text = 'kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.'
    assert formed.events == [Event("MissingClusterDNS", f'pod: "busybox1_default(u1)". {text}'), Event("MissingClusterDNS", text, on="Node")]


def test_empty_resolv_conf_flag_is_a_local_resolver():
    assert resolv(pod("Default"), node=None).resolv_conf.render() == "search .\nnameserver 127.0.0.1\n"


def test_no_cluster_domain_keeps_only_the_node_search():
    assert resolv(pod(), domain="").resolv_conf.render() == "search lan example.com\nnameserver 10.96.0.10\noptions ndots:5\n"


def test_nameserver_limit():
    formed = resolv(pod("ClusterFirst", {"nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"]}))
    assert formed.resolv_conf.nameservers == ("10.96.0.10", "1.1.1.1", "2.2.2.2")
    assert formed.events == [Event("DNSConfigForming", "Nameserver limits were exceeded, some nameservers have been omitted, "
                                                       "the applied nameserver line is: 10.96.0.10 1.1.1.1 2.2.2.2")]


def test_search_path_count_limit():
    extra = [f"d{i}.example" for i in range(40)]
    formed = resolv(pod("None", {"nameservers": ["192.0.2.1"], "searches": extra}))
    assert formed.resolv_conf.searches == tuple(extra[:32])
    assert formed.events == [Event("DNSConfigForming", "Search Line limits were exceeded, some search paths have been omitted, "
                                                       f"the applied search line is: {' '.join(extra[:32])}")]


def test_search_path_too_long_is_dropped_and_line_cut_to_2048():
    long_path = "a" * 250 + ".example"  # 258 > 253
    formed = resolv(pod("None", {"nameservers": ["192.0.2.1"], "searches": ["ok.example", long_path]}))
    assert formed.resolv_conf.searches == ("ok.example",) and formed.events[0].reason == "DNSConfigForming"
    paths = [f"{i:02d}" + "b" * 98 + ".example" for i in range(25)]  # 108 chars each: 25 x 109 - 1 = 2724
    formed = resolv(pod("None", {"nameservers": ["192.0.2.1"], "searches": paths}))
    assert formed.resolv_conf.searches == tuple(paths[:18])  # 18 x 109 - 1 = 1961 <= 2048 < 19 x 109 - 1
    assert formed.events[0].message.endswith(" ".join(paths[:18]))


def test_parse_node_file():
    parsed = parse_resolv_conf("search a.example. .\nsearch b.example c.example.\nnameserver 10.0.0.1\noptions ndots:1 edns0\noptions ndots:3\n")
    assert parsed.searches == ("b.example", "c.example") and parsed.nameservers == ("10.0.0.1",) and parsed.options == ("ndots:3", "edns0")


def test_node_check_at_start():
    many = "search " + " ".join(f"d{i}.example" for i in range(30)) + "\n"
    assert host_limit_events(many, "/etc/resolv.conf", "cluster.local") == [
        Event("CheckLimitsForResolvConf", "Resolv.conf file '/etc/resolv.conf' contains search line consisting of more than 29 domains!", on="Node")]
    assert host_limit_events(many, "/etc/resolv.conf", "") == []


HOSTS_HEAD = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
              "fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")


def test_hosts_with_hostname_subdomain_and_aliases():
    p = pod(hostname="busybox-1", subdomain="busybox-subdomain", hostAliases=[{"ip": "1.2.3.4", "hostnames": ["foo.local", "bar.local"]}])
    assert hosts_file(p, ["10.42.0.7"], "cluster.local") == (
        HOSTS_HEAD + "10.42.0.7\tbusybox-1.busybox-subdomain.default.svc.cluster.local\tbusybox-1\n"
        "\n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\tbar.local\n")


def test_hosts_plain_dual_stack_and_long_name():
    assert hosts_file(pod(), ["10.42.0.7", "fd00::7"], "cluster.local") == HOSTS_HEAD + "10.42.0.7\tbusybox1\nfd00::7\tbusybox1\n"
    long = {"metadata": {"name": "x" * 62 + "-y", "namespace": "default"}, "spec": {}}
    assert hosts_file(long, ["10.42.0.8"], "cluster.local").endswith("10.42.0.8\t" + "x" * 62 + "\n")


def test_hosts_host_network():
    p = pod(host_network=True, hostAliases=[{"ip": "1.2.3.4", "hostnames": ["foo.local"]}])
    assert hosts_file(p, ["192.168.1.10"], "cluster.local", "127.0.0.1 localhost\n") == (
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo.local\n")
