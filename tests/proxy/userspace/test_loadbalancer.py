"""Round robin, ClientIP affinity and its timeout (upstream ``roundrobin_test.go``), on an
injected clock and an identity shuffle."""

from __future__ import annotations

import pytest

from kubesvc.proxy.userspace.loadbalancer import LoadBalancerRR, NoEndpoints


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lb(clock=None, shuffle=lambda xs: None) -> LoadBalancerRR:
    return LoadBalancerRR(clock or Clock(), shuffle)


def picks(balancer, client="10.0.0.1", n=6, key="svc"):
    return [balancer.next_endpoint(key, client) for _ in range(n)]


@pytest.mark.parametrize("endpoints, expected", [
    pytest.param(["a"], ["a"] * 4, id="one endpoint"),
    pytest.param(["a", "b", "c"], ["a", "b", "c", "a"], id="three in turn"),
    pytest.param(["a", "a", "b"], ["a", "b", "a", "b"], id="duplicates count once"),
])
def test_round_robin(endpoints, expected):
    balancer = lb()
    balancer.update("svc", endpoints)
    assert picks(balancer, n=4) == expected


@pytest.mark.parametrize("setup", [
    pytest.param(lambda b: None, id="missing service entry"),
    pytest.param(lambda b: b.update("svc", []), id="missing endpoints"),
    pytest.param(lambda b: (b.update("svc", ["a"]), b.delete("svc")), id="deleted"),
])
def test_no_endpoints(setup):
    balancer = lb()
    setup(balancer)
    with pytest.raises(NoEndpoints):
        balancer.next_endpoint("svc", "10.0.0.1")


def test_changed_set_is_shuffled_and_restarts_unchanged_set_keeps_its_place():
    shuffled = []
    balancer = lb(shuffle=lambda xs: (xs.reverse(), shuffled.append(list(xs))))
    balancer.update("svc", ["a", "b", "c"])
    assert shuffled == [["c", "b", "a"]]
    assert picks(balancer, n=2) == ["c", "b"]
    balancer.update("svc", ["c", "b", "a"])  # same set, other order: nothing changes
    assert picks(balancer, n=1) == ["a"] and len(shuffled) == 1
    balancer.update("svc", ["a", "b"])
    assert shuffled[-1] == ["b", "a"] and picks(balancer, n=2) == ["b", "a"]


@pytest.mark.parametrize("exclude, expected", [
    pytest.param(set(), "a", id="nothing failed yet"),
    pytest.param({"a"}, "b", id="skips the failed one"),
    pytest.param({"a", "b"}, "c", id="skips every failed one"),
    pytest.param({"a", "b", "c"}, "a", id="all failed: round robin as usual"),
])
def test_retry_skips_endpoints_that_failed(exclude, expected):
    balancer = lb()
    balancer.update("svc", ["a", "b", "c"])
    assert balancer.next_endpoint("svc", "10.0.0.1", reset=True, exclude=exclude) == expected


def test_exclusion_advances_the_index_past_the_choice():
    balancer = lb()
    balancer.update("svc", ["a", "b", "c"])
    assert balancer.next_endpoint("svc", "x", exclude={"a"}) == "b"
    assert balancer.next_endpoint("svc", "x") == "c"


@pytest.mark.parametrize("ttl, idle, sticks", [
    pytest.param(10, 0.0, True, id="immediately again"),
    pytest.param(10, 9.9, True, id="just inside the timeout"),
    pytest.param(10, 10.0, False, id="at the timeout"),
    pytest.param(0, 10799.0, True, id="timeoutSeconds unset: 10800 s default"),
])
def test_client_ip_affinity_and_its_timeout(ttl, idle, sticks):
    clock = Clock()
    balancer = lb(clock)
    balancer.update("svc", ["a", "b", "c"], affinity=True, ttl_seconds=ttl)
    first = balancer.next_endpoint("svc", "10.0.0.1")
    balancer.next_endpoint("svc", "10.0.0.2")  # moves the index on
    clock.now += idle
    again = balancer.next_endpoint("svc", "10.0.0.1")
    assert (again == first) is sticks


def test_affinity_is_refreshed_by_use():
    clock = Clock()
    balancer = lb(clock)
    balancer.update("svc", ["a", "b"], affinity=True, ttl_seconds=10)
    first = balancer.next_endpoint("svc", "c1")
    for _ in range(5):
        clock.now += 6
        assert balancer.next_endpoint("svc", "c1") == first


def test_affinity_reset_on_retry_and_session_to_removed_endpoint_dropped():
    balancer = lb()
    balancer.update("svc", ["a", "b", "c"], affinity=True, ttl_seconds=100)
    assert balancer.next_endpoint("svc", "c1") == "a"
    assert balancer.next_endpoint("svc", "c1", reset=True, exclude={"a"}) == "b"
    assert balancer.next_endpoint("svc", "c1") == "b"  # the retry's choice is recorded
    balancer.update("svc", ["a", "c"], affinity=True, ttl_seconds=100)
    assert balancer.next_endpoint("svc", "c1") in {"a", "c"}


def test_without_affinity_clients_are_spread():
    balancer = lb()
    balancer.update("svc", ["a", "b"])
    assert [balancer.next_endpoint("svc", "same-client") for _ in range(4)] == ["a", "b", "a", "b"]


def test_cleanup_stale_sessions():
    clock = Clock()
    balancer = lb(clock)
    balancer.update("svc", ["a", "b"], affinity=True, ttl_seconds=10)
    balancer.next_endpoint("svc", "old")
    clock.now += 5
    balancer.next_endpoint("svc", "young")
    clock.now += 5
    assert balancer.cleanup_stale_sessions() == 1
    assert balancer.cleanup_stale_sessions() == 0
