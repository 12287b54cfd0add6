"""The map reads each node's proxy health at most every two seconds (kubesvc.ui.routes.RecentProxyHealth):
a burst of watch events from every open page is not a burst of requests to every node."""

from __future__ import annotations

from kubesvc.ui import routes


def node(name, address):
    return {"metadata": {"name": name}, "status": {"addresses": [{"type": "InternalIP", "address": address}]}}


async def test_reads_are_reused_until_they_are_two_seconds_old_and_forgotten_with_their_node(monkeypatch):
    asked = []

    async def proxy_health(n, timeout):
        asked.append(n["metadata"]["name"])
        return f"health of {n['metadata']['name']} #{len(asked)}"

    monkeypatch.setattr("kubesvc.explain.gather.proxy_health", proxy_health)
    now = [100.0]
    cache = routes.RecentProxyHealth(max_age=2.0, clock=lambda: now[0])
    a, b = node("a", "10.0.0.1"), node("b", "10.0.0.2")
    assert await cache.read([a, b]) == ["health of a #1", "health of b #2"]
    now[0] = 101.9
    assert await cache.read([a, b]) == ["health of a #1", "health of b #2"]
    now[0] = 102.0
    assert await cache.read([a]) == ["health of a #3"]
    assert await cache.read([node("a", "10.0.0.9")]) == ["health of a #4"]  # a new address: read again
    assert len(cache.read_at) == 1
