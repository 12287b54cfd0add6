"""Userspace mode's walk (``proxy/trace/userspace.py``): ``iptables-save`` up to the proxy port
(``REDIRECT --to-ports``, or the host portals' ``DNAT`` to the node's own address), then the
listener in the proxy's published state: its endpoints, the next one, a client's live session;
and what the proxier publishes (``snapshot``) from a real round robin."""

from __future__ import annotations

from kubesvc.kernel.iptables_save import parse_dump
from kubesvc.proxy.trace import userspace
from kubesvc.proxy.userspace.loadbalancer import LoadBalancerRR
from kubesvc.proxy.userspace.rules import Portal
from tests.support.builders import port

NODE = "192.168.50.1"

# as iptables-save 1.8.9 printed userspace mode's rules in tests/kernel/test_trace_side_by_side.py
DUMP = """*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-NODEPORT-NON-LOCAL - [0:0]
:KUBE-PORTALS-FILTER - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals without endpoints" -j KUBE-PORTALS-FILTER
-A INPUT -m comment --comment "Ensure that non-local NodePort traffic can flow" -j KUBE-NODEPORT-NON-LOCAL
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals without endpoints" -j KUBE-PORTALS-FILTER
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals without endpoints" -j KUBE-PORTALS-FILTER
-A KUBE-PORTALS-FILTER -d 172.30.0.15/32 -p tcp -m comment --comment "ns/empty:p80 has no endpoints (cluster IP)" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-NODEPORT-CONTAINER - [0:0]
:KUBE-NODEPORT-HOST - [0:0]
:KUBE-PORTALS-CONTAINER - [0:0]
:KUBE-PORTALS-HOST - [0:0]
-A PREROUTING -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-CONTAINER
-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "handle service NodePorts; NOTE: this must be the last rule in the chain" -j KUBE-NODEPORT-CONTAINER
-A OUTPUT -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-HOST
-A KUBE-PORTALS-CONTAINER -d 172.30.0.14/32 -p tcp -m comment --comment "ns/sticky:p80" -m tcp --dport 80 -j REDIRECT --to-ports 43911
-A KUBE-PORTALS-HOST -d 172.30.0.14/32 -p tcp -m comment --comment "ns/sticky:p80" -m tcp --dport 80 -j DNAT --to-destination 192.168.50.1:43911
COMMIT
"""

STATE = {"family": 4, "writtenAt": 1000.0, "portals": [
    {"service": "ns/sticky:p80", "kind": "internal", "protocol": "TCP", "proxyPort": 43911, "verdict": "",
     "endpoints": ["10.1.3.2:8080", "10.1.2.2:8080"], "next": 1, "affinity": True, "affinityTimeoutSeconds": 60,
     "sessions": {"192.168.50.2": {"endpoint": "10.1.2.2:8080", "idleSeconds": 20.0}}},
]}


def walk(source: str, dest: str, dport: int, *, state=STATE, now: float = 1010.0, from_node: bool = False):
    return userspace.walk(parse_dump(DUMP), state, source, "tcp", dest, dport, (NODE,), from_node=from_node, now=now)


def test_a_new_client_is_redirected_to_the_listener_and_takes_the_next_endpoint():
    w = walk("192.168.50.9", "172.30.0.14", 80)
    assert w.verdict == "REDIRECT" and w.redirect == 43911 and w.masquerade
    assert w.candidates == [("10.1.3.2:8080", 0.5), ("10.1.2.2:8080", 0.5)]
    assert w.listener == {"proxyPort": 43911, "service": "ns/sticky:p80", "kind": "internal", "next": "10.1.2.2:8080",
                          "session": None, "published": True}
    assert w.affinity == ["ns/sticky:p80 (internal): 60s"]
    hooks = [(s["hook"], s["chain"]) for s in w.steps if s["rule"] is None]
    assert hooks[:2] == [("prerouting", "PREROUTING"), ("prerouting", "KUBE-PORTALS-CONTAINER")]
    assert ("input", "KUBE-NODEPORT-NON-LOCAL") in hooks and not any(h == "postrouting" for h, _ in hooks)  # delivered here


def test_a_client_with_a_live_session_goes_back_to_its_endpoint():
    w = walk("192.168.50.2", "172.30.0.14", 80, now=1030.0)  # 20 s idle when written, 30 s since: 50 < 60
    assert w.candidates == [("10.1.2.2:8080", 1.0)]
    assert w.listener["session"] == {"endpoint": "10.1.2.2:8080", "idleSeconds": 50.0} and w.listener["next"] is None
    expired = walk("192.168.50.2", "172.30.0.14", 80, now=1040.0)  # 60 s: the session is over
    assert len(expired.candidates) == 2 and expired.listener["session"] is None


def test_the_host_portal_dnats_to_the_node_and_reaches_the_same_listener():
    w = walk(NODE, "172.30.0.14", 80, from_node=True)
    assert w.verdict == "REDIRECT" and w.listener["proxyPort"] == 43911 and len(w.candidates) == 2


def test_without_the_proxys_state_the_redirect_is_still_shown():
    w = walk("192.168.50.9", "172.30.0.14", 80, state=None)
    assert w.verdict == "REDIRECT" and w.candidates == [] and w.listener["published"] is False


def test_refused_and_not_ours_are_the_kernels_verdicts():
    assert walk("192.168.50.9", "172.30.0.15", 80).verdict == "REJECT"
    assert walk("192.168.50.9", "172.30.0.99", 80).verdict == ""


def test_the_snapshot_is_the_round_robins_view():
    now = [100.0]
    balancer = LoadBalancerRR(clock=lambda: now[0], shuffle=lambda endpoints: endpoints.reverse())
    sp = port("ns", "sticky", cluster_ip="172.30.0.14", affinity_seconds=60)
    key = (sp.name, "internal")
    balancer.update(key, [("10.1.2.2", 8080), ("10.1.3.2", 8080)], affinity=True, ttl_seconds=60)
    assert balancer.next_endpoint(key, "192.168.50.2") == ("10.1.3.2", 8080)
    now[0] = 112.5

    class Listener:
        port = 43911

    snap = userspace.snapshot({key: Portal(sp, "internal", (), "")}, {key: Listener()}, balancer, 4, now[0], wall=7.0)
    assert snap == {"family": 4, "writtenAt": 7.0, "portals": [
        {"service": "ns/sticky:p80", "kind": "internal", "protocol": "TCP", "proxyPort": 43911, "verdict": "",
         "endpoints": ["10.1.3.2:8080", "10.1.2.2:8080"], "next": 1, "affinity": True, "affinityTimeoutSeconds": 60,
         "sessions": {"192.168.50.2": {"endpoint": "10.1.3.2:8080", "idleSeconds": 12.5}}}]}


def test_the_published_state_is_root_only_and_per_namespace(tmp_path, monkeypatch):
    import json
    import os
    import stat

    from kubesvc.kernel import runstate
    from kubesvc.kernel.netns import identify
    monkeypatch.setenv("KUBESVC_RUN_DIR", str(tmp_path / "run"))
    path = runstate.state_path(userspace.KIND, 4)
    assert path.parent == tmp_path / "run" / "proxy" and path.name == f"userspace-ipv4-net{identify().ino}.json"
    gone = path.parent / "userspace-ipv4-net1.json"
    gone.parent.mkdir(parents=True)
    gone.write_text(json.dumps({**STATE, "pid": 2**22 + 7}))
    monkeypatch.setattr(runstate, "_pruned", False)
    runstate.write(path, STATE)
    assert runstate.read(path) == {**STATE, "pid": os.getpid()}
    assert not gone.exists()  # the first write removed the file of a writer that is gone
    stale = {**STATE, "pid": 2**22 + 7}  # a writer that is gone (beyond pid_max's default)
    path.write_text(json.dumps(stale))
    assert runstate.read(path) is None
    runstate.write(path, STATE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    runstate.remove(path)
    assert runstate.read(path) is None
