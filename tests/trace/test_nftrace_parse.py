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


async def test_the_probe_skeleton_keeps_the_event_loop_free_and_always_removes_what_it_installed(monkeypatch):
    """``trace_connection`` (both probes' skeleton): the monitor's output comes back; a monitor
    that ignores SIGTERM is killed after the grace with its process group (here a shell whose
    ``sleep 30`` holds the output pipe: without the group the probe would wait for it), and
    meanwhile the event loop runs on (the skeleton blocked it in ``Popen.communicate`` before);
    a failed install is removed too."""
    import asyncio

    import pytest

    from kubesvc.kernel import nftrace
    from kubesvc.kernel.exec import CommandFailed, run

    monkeypatch.setattr(nftrace, "MONITOR_STOP_GRACE", 1.0)
    calls: list[str] = []

    async def install() -> None:
        calls.append("install")

    async def remove() -> None:
        calls.append("remove")

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    stubborn = ["sh", "-c", "trap '' TERM; echo trace id 1 ip kube-proxy services packet: iif lo; sleep 30"]
    output = await nftrace.trace_connection(stubborn, install=install, remove=remove, from_netns=None, dest="127.0.0.1", port=9,
                                            protocol="tcp", settle=0.2)
    ticking.cancel()
    assert output.startswith("trace id 1 ip kube-proxy services packet:")
    assert calls == ["install", "remove"]
    assert ticks >= 10, ticks  # the second of grace was the loop's: it ran the ticker

    async def failing_install() -> None:
        calls.append("install")
        await run(["false"])

    calls.clear()
    with pytest.raises(CommandFailed):
        await nftrace.trace_connection(["true"], install=failing_install, remove=remove, from_netns=None, dest="127.0.0.1", port=9,
                                       protocol="tcp", settle=0.0)
    assert calls == ["install", "remove"]
