"""``kubesvc trace``'s human form: the Service port line as upstream's ServicePortName.String()
prints it (``ns/name:port`` for a named port, ``ns/name`` for an unnamed one; found walking the
README: an unnamed port printed ``ns/name: (TCP)``)."""

from __future__ import annotations

import pytest

from kubesvc.proxy.trace.live import compare_probe, text


def report(port_name: str) -> dict:
    return {"destination": {"protocol": "TCP", "ip": "10.96.0.20", "port": 80},
            "source": {"ip": "10.244.0.5", "pod": "default/client"}, "mode": "nftables", "steps": [],
            "service": {"namespace": "default", "name": "my-service", "port": port_name, "protocol": "TCP"},
            "verdict": "DROP", "candidates": [], "affinity": False, "excluded": [], "masquerade": False}


@pytest.mark.parametrize("port_name, line", [
    ("http", "  Service port: default/my-service:http (TCP)"),
    ("", "  Service port: default/my-service (TCP)"),
], ids=["named", "unnamed"])
def test_the_service_port_line(port_name, line):
    assert line in text(report(port_name))


WALK = [("nat-prerouting", "jump services"), ("services", "ip daddr . meta l4proto . th dport vmap @service-ips"),
        ("service-X", "numgen random mod 2 0 update @affinity-A { ip saddr } meta l4proto tcp dnat ip to 10.1.0.1:80"),
        ("service-X", "update @affinity-B { ip saddr } meta l4proto tcp dnat ip to 10.1.0.2:80"),
        ("nat-postrouting", "jump masquerading")]
STICKY = "ip saddr @affinity-B update @affinity-B { ip saddr } meta l4proto tcp dnat ip to 10.1.0.2:80"


def walk_report() -> dict:
    return {**report("http"), "verdict": "DNAT", "affinity": True,
            "steps": [{"chain": chain, "rule": rule, "hook": chain.split("-")[0]} for chain, rule in WALK],
            "candidates": [{"endpoint": "10.1.0.1:80", "probability": 0.5, "pod": "", "node": "", "slice": ""},
                           {"endpoint": "10.1.0.2:80", "probability": 0.5, "pod": "", "node": "", "slice": ""}]}


@pytest.mark.parametrize("kernel, agrees", [
    # a new client: the same rules as the walk
    (WALK, True),
    # a returning client: its affinity entry's rule instead of the random choice, then the same masquerade
    (WALK[:2] + [("service-X", STICKY), WALK[-1]], True),
    # sent by its entry to an endpoint the walk does not know
    (WALK[:2] + [("service-X", STICKY.replace("10.1.0.2", "10.9.9.9")), WALK[-1]], False),
    # another way in before the Service's chain
    ([("nat-output", "jump services")] + WALK[1:2] + [("service-X", STICKY)], False),
], ids=["new-client", "returning-client", "unknown-endpoint", "other-path"])
def test_the_probe_of_a_client_with_an_affinity_entry(kernel, agrees):
    """Found walking the README: a client the kernel remembered took the affinity rule and the
    probe said the trace differs."""
    rep = walk_report()
    probe = compare_probe(rep, [{"chain": chain, "rule": rule, "verdict": ""} for chain, rule in kernel])
    assert probe["agrees"] is agrees
    if agrees and len(kernel) != len(WALK):
        rep["probe"] = probe
        assert "  the kernel's trace of a real packet agrees: a returning client: its ClientIP affinity sent it to 10.1.0.2:80" in text(rep)
