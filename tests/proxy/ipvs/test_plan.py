"""The diff between desired and current IPVS state (src/kubesvc/proxy/ipvs/plan.py), against a
hand-written current table: additions, in-place edits, graceful termination of real servers,
deletion of unknown virtual servers except excluded CIDRs."""

from __future__ import annotations

from kubesvc.proxy.ipvs.plan import CurrentRealServer, CurrentVirtualServer, plan
from kubesvc.proxy.ipvs.rules import FLAG_HASHED, FLAG_PERSISTENT, VirtualServer, VirtualServerKey

TCP = VirtualServerKey("10.96.0.10", "TCP", 80)
UDP = VirtualServerKey("10.96.0.11", "UDP", 53)


def want(key, reals, **kw) -> VirtualServer:
    return VirtualServer(key, real_servers={r: 1 for r in reals}, **kw)


def have(key, reals: dict, scheduler="rr", flags=FLAG_HASHED, timeout=0) -> CurrentVirtualServer:
    return CurrentVirtualServer(VirtualServer(key, scheduler, flags, timeout),
                                {r: CurrentRealServer(*state) for r, state in reals.items()})


def ops(p) -> list[str]:
    return [str(op) for op in p.ops]


def test_empty_kernel_gets_services_then_their_real_servers():
    p = plan({TCP: want(TCP, [("10.244.1.2", 8080), ("10.244.2.2", 8080)])}, {})
    assert ops(p) == ["add-service 10.96.0.10:80/TCP", "add-dest 10.96.0.10:80/TCP -> 10.244.1.2:8080 weight 1",
                      "add-dest 10.96.0.10:80/TCP -> 10.244.2.2:8080 weight 1"]


def test_in_sync_is_no_op_and_the_kernel_hashed_flag_is_ignored():
    p = plan({TCP: want(TCP, [("10.244.1.2", 8080)])}, {TCP: have(TCP, {("10.244.1.2", 8080): (1, 3, 4)})})
    assert p.ops == () and p.draining == ()


def test_scheduler_or_affinity_change_edits_in_place():
    p = plan({TCP: want(TCP, [], scheduler="lc", flags=FLAG_PERSISTENT, timeout=10800)}, {TCP: have(TCP, {})})
    assert ops(p) == ["edit-service 10.96.0.10:80/TCP"]


def test_removed_tcp_real_server_with_connections_drains_at_weight_zero_then_goes():
    desired = {TCP: want(TCP, [("10.244.1.2", 8080)])}
    busy = {TCP: have(TCP, {("10.244.1.2", 8080): (1, 0, 0), ("10.244.2.2", 8080): (1, 2, 1)})}
    p = plan(desired, busy)
    assert ops(p) == ["edit-dest 10.96.0.10:80/TCP -> 10.244.2.2:8080 weight 0"]
    assert p.draining == ((TCP, ("10.244.2.2", 8080)),)
    still = {TCP: have(TCP, {("10.244.1.2", 8080): (1, 0, 0), ("10.244.2.2", 8080): (0, 0, 1)})}
    assert ops(plan(desired, still)) == []  # already at 0, connections left: wait
    drained = {TCP: have(TCP, {("10.244.1.2", 8080): (1, 0, 0), ("10.244.2.2", 8080): (0, 0, 0)})}
    assert ops(plan(desired, drained)) == ["del-dest 10.96.0.10:80/TCP -> 10.244.2.2:8080 weight 0"]


def test_endpoint_back_while_draining_gets_weight_one_again():
    p = plan({TCP: want(TCP, [("10.244.2.2", 8080)])}, {TCP: have(TCP, {("10.244.2.2", 8080): (0, 1, 0)})})
    assert ops(p) == ["edit-dest 10.96.0.10:80/TCP -> 10.244.2.2:8080 weight 1"]


def test_udp_real_servers_are_deleted_at_once():
    p = plan({UDP: want(UDP, [])}, {UDP: have(UDP, {("10.244.1.3", 53): (1, 5, 5)})})
    assert ops(p) == ["del-dest 10.96.0.11:53/UDP -> 10.244.1.3:53 weight 1"]


def test_unknown_virtual_servers_are_deleted_unless_excluded():
    foreign = VirtualServerKey("192.0.2.1", "TCP", 443)
    p = plan({}, {TCP: have(TCP, {}), foreign: have(foreign, {})}, exclude_cidrs=["192.0.2.0/24"])
    assert ops(p) == ["del-service 10.96.0.10:80/TCP"]
