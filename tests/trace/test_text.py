"""``kubesvc trace``'s human form: the Service port line as upstream's ServicePortName.String()
prints it (``ns/name:port`` for a named port, ``ns/name`` for an unnamed one; found walking the
README: an unnamed port printed ``ns/name: (TCP)``)."""

from __future__ import annotations

import pytest

from kubesvc.proxy.trace.live import text


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
