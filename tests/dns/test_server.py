"""``kubesvc dns`` as a process against a real apiserver, asked by ``dig`` (Debian's
bind9-dnsutils) and dnspython's stub, forwarding to a real ``dnsmasq`` on loopback (its records
from a hosts file written here). What a user of the server observes: cluster names answered
from the informers (a new Service resolves, a deleted one stops), TCP and UDP truncation, names
outside the cluster forwarded and cached (CoreDNS's cache metrics count the hit), an
ExternalName followed upstream, FORMERR for garbage, and /health, /ready, /metrics. The server
runs ``--pods verified``: a Pod's dashed-IP name resolves while the Pod has that IP and is not done.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from tests.support.apiserver import free_ports, start_apiserver
from tests.support.netns import wait_until

OUTSIDE_IP = "192.0.2.7"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dns")
    server = start_apiserver(tmp / "api")
    dns_port, upstream_port, health, ready, metrics = free_ports(5)
    (tmp / "hosts").write_text(f"{OUTSIDE_IP} outside.example.test\n")
    dnsmasq = subprocess.Popen(["dnsmasq", "-C", "/dev/null", "--keep-in-foreground", "--no-resolv", "--no-hosts", f"--addn-hosts={tmp / 'hosts'}",
                                "--listen-address=127.0.0.1", f"--port={upstream_port}", "--bind-interfaces", f"--pid-file={tmp / 'dnsmasq.pid'}",
                                "--user=root", "--local=/example.test/", "--local-ttl=60"], stderr=subprocess.DEVNULL)
    log = open(tmp / "dns.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "kubesvc", "dns", "--kubeconfig", str(server.kubeconfig), "--dns-address", "127.0.0.1",
                                "--dns-port", str(dns_port), "--http-address", "127.0.0.1", "--health-port", str(health), "--ready-port", str(ready),
                                "--metrics-port", str(metrics), "--upstream", f"127.0.0.1:{upstream_port}", "--pods", "verified"],
                               stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("kubesvc dns serving cluster.local. on 127.0.0.1:"), (line, (tmp / "dns.log").read_text())
        yield {"server": server, "port": dns_port, "health": health, "ready": ready, "metrics": metrics, "log": tmp / "dns.log"}
    finally:
        process.terminate()
        process.wait(timeout=15)
        process.stdout.close()
        log.close()
        dnsmasq.terminate()
        dnsmasq.wait(timeout=15)
        server.stop()


def dig(cluster, *args: str) -> str:
    return subprocess.run(["dig", "@127.0.0.1", "-p", str(cluster["port"]), *args], capture_output=True, text=True, timeout=30).stdout


def ask(cluster, name: str, rdtype: str = "A", *, tcp: bool = False, **make) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **make)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, "127.0.0.1", port=cluster["port"], timeout=5)


def http(cluster, which: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster[which]}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_health_and_ready(cluster):
    assert http(cluster, "health", "/health") == (200, "OK")
    assert http(cluster, "ready", "/ready") == (200, "OK")


def test_a_new_service_resolves_and_a_deleted_one_stops(cluster):
    kubectl = cluster["server"].kubectl
    kubectl("create", "service", "clusterip", "fresh", "--tcp=80:8080")
    created = time.monotonic()
    ip = json.loads(kubectl("get", "service", "fresh", "-o", "json").stdout)["spec"]["clusterIP"]
    got = wait_until(lambda: dig(cluster, "+short", "fresh.default.svc.cluster.local").split() == [ip] or None, 10,
                     "the new Service in DNS", interval=0.05)
    print(f"resolved {time.monotonic() - created:.2f}s after kubectl create returned")
    assert got
    assert "status: NOERROR" in dig(cluster, "+tcp", "fresh.default.svc.cluster.local")  # TCP too
    # dnspython's stub (no EDNS: the prerendered answer once the server rendered it; the ordinary path before)
    assert [rr.to_text() for rrset in ask(cluster, "Fresh.Default.svc.cluster.local").answer for rr in rrset] == [ip]
    srv = dig(cluster, "+short", "_80-8080._tcp.fresh.default.svc.cluster.local", "SRV")
    assert srv.split() == ["0", "100", "80", "fresh.default.svc.cluster.local."], srv
    kubectl("delete", "service", "fresh")
    wait_until(lambda: "status: NXDOMAIN" in dig(cluster, "fresh.default.svc.cluster.local") or None, 10, "the deleted Service gone", interval=0.05)
    assert ask(cluster, "fresh.default.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN  # its prerendered answer went with it


def test_pods_verified_answers_a_pods_own_address_only(cluster):
    kubectl = cluster["server"].kubectl
    kubectl("run", "web", "--image=kubesvc", "--restart=Never")
    name = "10-244-9-9.default.pod.cluster.local"
    assert "status: NXDOMAIN" in dig(cluster, name)  # no IP yet
    status = {"status": {"phase": "Running", "podIP": "10.244.9.9", "podIPs": [{"ip": "10.244.9.9"}]}}
    kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    wait_until(lambda: dig(cluster, "+short", name).split() == ["10.244.9.9"] or None, 10, "the Pod's record", interval=0.05)
    assert "status: NXDOMAIN" in dig(cluster, "10-244-9-8.default.pod.cluster.local")  # no such Pod: `insecure` would answer it
    assert "status: NXDOMAIN" in dig(cluster, "10-244-9-9.kube-system.pod.cluster.local")  # not a Pod of that namespace
    # done: the Pod leaves CoreDNS's field selector (status.phase!=Succeeded,...), so its record goes
    kubectl("patch", "pod", "web", "--subresource=status", "--type=merge", "-p", json.dumps({"status": {"phase": "Succeeded"}}))
    wait_until(lambda: "status: NXDOMAIN" in dig(cluster, name) or None, 10, "the done Pod's record gone", interval=0.05)
    kubectl("delete", "pod", "web", "--wait=false")


def test_names_outside_the_cluster_are_forwarded_and_cached(cluster):
    answer = ask(cluster, "outside.example.test")
    assert [rr.to_text() for rrset in answer.answer for rr in rrset] == [OUTSIDE_IP]
    assert answer.flags & dns.flags.RA  # the upstream's flags, as CoreDNS's forward passes its reply on
    assert ask(cluster, "missing.example.test").rcode() == dns.rcode.NXDOMAIN
    hits_before = metric(cluster, "coredns_cache_hits_total", type="success")
    again = ask(cluster, "OUTSIDE.example.test")  # a cache hit, asked in another spelling
    assert again.question[0].name.to_text() == "OUTSIDE.example.test."
    assert [rr.to_text() for rrset in again.answer for rr in rrset] == [OUTSIDE_IP]
    assert 0 < again.answer[0].ttl <= 30  # cache 30 caps dnsmasq's 60
    assert metric(cluster, "coredns_cache_hits_total", type="success") == hits_before + 1


def test_external_name_is_followed_upstream(cluster):
    kubectl = cluster["server"].kubectl
    kubectl("create", "service", "externalname", "away", "--external-name=outside.example.test")
    out = wait_until(lambda: text if "CNAME" in (text := dig(cluster, "away.default.svc.cluster.local")) else None, 10, "the ExternalName in DNS")
    answer = [line.split() for line in out.split(";; ANSWER SECTION:")[1].split("\n\n")[0].strip().splitlines()]
    assert [(a[0], a[3], a[4]) for a in answer] == [("away.default.svc.cluster.local.", "CNAME", "outside.example.test."),
                                                    ("outside.example.test.", "A", OUTSIDE_IP)], out


def test_udp_truncates_and_tcp_carries_a_large_headless_answer(cluster):
    kubectl = cluster["server"].kubectl
    addresses = [f"10.1.{i // 250}.{i % 250 + 1}" for i in range(60)]
    documents = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "many"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "many-1", "labels": {"kubernetes.io/service-name": "many"}},
         "addressType": "IPv4", "ports": [{"port": 80, "name": "", "protocol": "TCP"}],
         "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}]
    kubectl("apply", "-f", "-", input="\n".join(map(json.dumps, documents)))
    wait_until(lambda: ask(cluster, "many.default.svc.cluster.local", tcp=True).answer or None, 10, "the headless Service in DNS")
    udp = ask(cluster, "many.default.svc.cluster.local")  # no EDNS: 512 bytes
    assert udp.flags & dns.flags.TC
    tcp = ask(cluster, "many.default.svc.cluster.local", tcp=True)
    assert sorted(rr.to_text() for rr in tcp.answer[0]) == sorted(addresses)
    assert sorted(dig(cluster, "+short", "many.default.svc.cluster.local").split()) == sorted(addresses)  # dig retries over TCP


def test_garbage_is_formerr(cluster):
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff", ("127.0.0.1", cluster["port"]))
        answer = dns.message.from_wire(sock.recv(512))
    assert answer.id == 0x1234 and answer.rcode() == dns.rcode.FORMERR


def test_metrics_carry_coredns_names(cluster):
    ask(cluster, "kubernetes.default.svc.cluster.local")
    status, text = http(cluster, "metrics", "/metrics")
    assert status == 200
    for name in ("coredns_dns_requests_total", "coredns_dns_responses_total", "coredns_dns_request_duration_seconds_bucket",
                 "coredns_cache_hits_total", "coredns_cache_misses_total"):
        assert name in text, name
    assert metric(cluster, "coredns_dns_requests_total", zone="cluster.local.", proto="udp", type="A") >= 1
    assert metric(cluster, "coredns_dns_responses_total", zone="cluster.local.", rcode="NOERROR", plugin="kubernetes") >= 1


def metric(cluster, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    _, text = http(cluster, "metrics", "/metrics")
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total
