"""``nft monitor trace`` output (as nft 1.0.6 printed it for a SYN to a ClusterIP) read by
``kernel/nftrace.parse_monitor``: the first packet only, our table only, chains entered and
rules with the kernel's verdicts."""

from kubesvc.kernel.nftrace import parse_monitor

MONITOR = """trace id cb8ec6fd ip kubesvc-trace pre policy accept 
trace id cb8ec6fd ip kube-proxy nat-prerouting packet: iif "vcli" ip saddr 192.168.50.2 ip daddr 172.30.0.10 tcp dport 80 tcp flags == syn 
trace id cb8ec6fd ip kube-proxy nat-prerouting rule jump services (verdict jump services)
trace id cb8ec6fd ip kube-proxy services rule ip daddr . meta l4proto . th dport vmap @service-ips (verdict goto service-WHF35ZYN-ns/web/tcp/p80)
trace id cb8ec6fd ip kube-proxy mark-for-masquerade rule meta mark set meta mark | 0x00004000 (verdict continue)
trace id cb8ec6fd ip kube-proxy filter-forward policy accept meta mark 0x00004000 
trace id 4ed1eaa5 ip kube-proxy filter-forward rule ct state new jump cluster-ips-check (verdict jump cluster-ips-check)
"""


def test_parse_monitor():
    assert parse_monitor(MONITOR) == [
        {"chain": "nat-prerouting", "rule": None, "verdict": None},
        {"chain": "nat-prerouting", "rule": "jump services", "verdict": "jump services"},
        {"chain": "services", "rule": "ip daddr . meta l4proto . th dport vmap @service-ips",
         "verdict": "goto service-WHF35ZYN-ns/web/tcp/p80"},
        {"chain": "mark-for-masquerade", "rule": "meta mark set meta mark | 0x00004000", "verdict": "continue"},
    ]
    assert parse_monitor("") == []
