"""Shared by the kernel tests: what they assert about probe results (tests/support/probe.py)
and rule dumps, how they read a proxy's /metrics at rest, and how a node registers itself."""

from __future__ import annotations

import asyncio
import difflib
import time

from kubesvc.client.rest import NODES, ApiError, RestClient
from tests.support.netns import Metrics, Node, ProxyProcess


def landed(result: dict) -> set[str]:
    return set(result["names"])


def all_from(names):
    """A probe-result check: every connection answered, by exactly ``names`` (each at least once)."""
    names = set(names)
    return lambda r: r["answered"] == r["count"] and landed(r) == names


def assert_all_answered(result: dict, what: str = "") -> None:
    assert result["answered"] == result["count"], f"{what}: not every connection was answered: {result}"


def assert_spread(result: dict, names, minimum: int, what: str = "") -> None:
    """Every answer from ``names`` and each of them answered at least ``minimum`` times."""
    assert_all_answered(result, what)
    assert set(result["names"]) <= set(names), f"{what}: answers from outside {sorted(names)}: {result}"
    low = {n: result["names"].get(n, 0) for n in names if result["names"].get(n, 0) < minimum}
    assert not low, f"{what}: endpoints below {minimum} of {result['count']} connections: {low}; all: {result}"


def ruleset_diff(before: str, after: str) -> str:
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", lineterm=""))


# The proxy runs one proxier per IP family, each counting its own syncs (label ip_family);
# the tests' traffic is IPv4, so they count the IPv4 proxier's.
FAMILY = "IPv4"
SYNCS = "kubeproxy_sync_proxy_rules_duration_seconds_count"
FULL_SYNCS = "kubeproxy_sync_full_proxy_rules_duration_seconds_count"
PARTIAL_SYNCS = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count"


async def settled(proxy: ProxyProcess, quiet: float = 1.5, timeout: float = 60) -> Metrics:
    """/metrics once the proxy has had nothing pending and made no sync for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last = await asyncio.to_thread(proxy.metrics)
    since = time.monotonic()
    while True:
        await asyncio.sleep(0.25)
        now = await asyncio.to_thread(proxy.metrics)
        pending = now.value("kubeproxy_sync_proxy_rules_endpoint_changes_pending") + now.value("kubeproxy_sync_proxy_rules_service_changes_pending")
        if now.value(SYNCS) != last.value(SYNCS) or pending:
            since = time.monotonic()
        last = now
        if time.monotonic() - since >= quiet:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"proxy never settled (syncs {now.value(SYNCS)}, pending {pending})\n{proxy.log()}")


def family_value(m: Metrics, name: str) -> float:
    """``name`` for the IPv4 proxier."""
    return m.value(name, ip_family=FAMILY)


def syncs(m: Metrics) -> dict:
    """The IPv4 proxier's sync counts: all, full, partial."""
    return {"syncs": family_value(m, SYNCS), "full": family_value(m, FULL_SYNCS), "partial": family_value(m, PARTIAL_SYNCS)}


async def register_node(client: RestClient, node: Node) -> dict:
    """The Node object as a kubelet registers it (addresses, podCIDR, Ready)."""
    body = node.node_object()
    try:
        obj = await client.resource(NODES).create(body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        obj = await client.resource(NODES).get(node.name)
    if (obj.get("status") or {}).get("addresses") != body["status"]["addresses"]:
        obj = await client.resource(NODES).update_status({**obj, "status": body["status"]})
    return obj
