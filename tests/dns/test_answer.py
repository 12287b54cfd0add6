"""The answer builder against the Kubernetes DNS specification (schema 1.1.0), record by record.

Each group is a section of the spec (kubernetes/dns docs/specification.md) and its cases are
CoreDNS's own (plugin/kubernetes handler_test.go, handler_case_test.go, kubernetes_apex_test.go,
reverse_test.go, handler_pod_*_test.go at v1.14.7), numbered as in /work/shared/reference/dns.md
§5, on the same fixtures (§5.1); "D" cases are derived from CoreDNS's code, not from one of its
tests. Expected records are written out by hand here: owner, TTL, type and data, compared as
sets (CoreDNS's ``loadbalance`` shuffles, and its tests sort). The SOA of every negative answer
is the zone's: ``ns.dns.<zone>. hostmaster.<zone>. <serial> 7200 1800 86400 5`` with TTL 5
(the serial is the injected clock's, 3).
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import pytest

from kubesvc.dns.answer import PODS_DISABLED, PODS_VERIFIED, Settings, resolve, respond
from kubesvc.dns.records import load

OK, NX, SERVFAIL, REFUSED = dns.rcode.NOERROR, dns.rcode.NXDOMAIN, dns.rcode.SERVFAIL, dns.rcode.REFUSED
SOA = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 3 7200 1800 86400 5"
Z = "cluster.local."


def service(ns, name, cluster_ips=(), ports=(("http", "TCP", 80),), *, headless=False, external=None, publish_not_ready=False):
    spec = {"ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports], "publishNotReadyAddresses": publish_not_ready}
    if external is not None:
        spec |= {"type": "ExternalName", "externalName": external}
    elif headless:
        spec |= {"clusterIP": "None", "clusterIPs": ["None"]}
    else:
        spec |= {"clusterIP": cluster_ips[0], "clusterIPs": list(cluster_ips)}
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


def endpoint_slice(ns, name, service_name, endpoints, ports=(("http", "TCP", 80),)):
    """``endpoints``: (address, hostname or None, ready)."""
    return {"metadata": {"namespace": ns, "name": name, "labels": {"kubernetes.io/service-name": service_name}},
            "ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports],
            "endpoints": [{"addresses": [a], **({"hostname": h} if h else {}), "conditions": {"ready": r}} for a, h, r in endpoints]}


# §5.1: handler_test.go's svcIndex / epsIndex
SERVICES = [
    service("kube-system", "kubedns", ["10.0.0.10"], [("dns", "UDP", 53)]),
    service("testns", "svc1", ["10.0.0.1"]),
    service("testns", "svcempty", ["10.0.0.1"]),
    service("testns", "svc6", ["1234:abcd::1"]),
    service("testns", "svc-dual-stack", ["10.0.0.3", "10::3"]),
    service("testns", "hdls1", headless=True, ports=()),
    service("testns", "hdlsprtls", headless=True, ports=()),
    service("testns", "external", external="ext.interwebs.test"),
    service("testns", "external-to-service", external="svc1.testns.svc.cluster.local."),
    service("testns", "external-ip", external="1.2.3.4"),
    service("testns", "notready", headless=True, ports=()),
    service("testns", "publishing", headless=True, ports=(), publish_not_ready=True),
    service("unexposedns", "svc1", ["10.0.0.2"]),
]
SLICES = [
    endpoint_slice("kube-system", "kubedns-a", "kubedns", [("172.0.0.100", None, True)], [("dns", "UDP", 53)]),
    endpoint_slice("testns", "svc1-a", "svc1", [("172.0.0.1", "ep1a", True)]),
    endpoint_slice("testns", "svcempty-a", "svcempty", []),
    endpoint_slice("testns", "hdls1-a", "hdls1", [("172.0.0.2", None, True), ("172.0.0.3", None, True), ("172.0.0.4", "dup-name", True),
                                                  ("172.0.0.5", "dup-name", True), ("5678:abcd::1", None, True), ("5678:abcd::2", None, True)]),
    endpoint_slice("testns", "hdlsprtls-a", "hdlsprtls", [("172.0.0.20", None, True)], ports=()),
    endpoint_slice("testns", "notready-a", "notready", [("172.0.0.30", None, False)]),
    # the EndpointSlice controller writes ready=true under publishNotReadyAddresses; DNS also
    # publishes a not-ready one of such a Service, whoever wrote the slice
    endpoint_slice("testns", "publishing-a", "publishing", [("172.0.0.40", None, True), ("172.0.0.41", None, False)]),
]
RECORDS = load(SERVICES, SLICES, namespaces=["testns", "kube-system", "unexposedns", "podns"])
SETTINGS = Settings.for_domain("cluster.local")


def ask(qname, qtype, records=RECORDS, settings=SETTINGS, synced=True):
    return resolve(dns.name.from_text(qname), dns.rdatatype.from_text(qtype), records, settings, synced=synced)


def lines(rrsets) -> set[str]:
    return {line for rrset in rrsets for line in rrset.to_text().splitlines()}


def check(qname, qtype, rcode, answer=(), authority=(), extra=(), **kwargs):
    reply = ask(qname, qtype, **kwargs)
    assert reply is not None, f"{qname} {qtype}: not answered (forwarded)"
    got = (dns.rcode.to_text(reply.rcode), lines(reply.answer), lines(reply.authority), lines(reply.additional))
    assert got == (dns.rcode.to_text(rcode), set(answer), set(authority), set(extra))
    return reply


def case(ident, qname, qtype, rcode, answer=(), authority=(), extra=()):
    return pytest.param(qname, qtype, rcode, answer, authority, extra, id=ident)


def neg(ident, qname, qtype, rcode=OK):
    return case(ident, qname, qtype, rcode, authority=[SOA])


# -- spec §2.2 schema version -----------------------------------------------------------------

SCHEMA = [
    case("14-dns-version", "dns-version.cluster.local.", "TXT", OK, ['dns-version.cluster.local. 28800 IN TXT "1.1.0"']),
    neg("15-txt-on-service-nodata", "svc1.testns.svc.cluster.local.", "TXT"),
    neg("16-txt-no-namespace", "svc0.svc-nons.svc.cluster.local.", "TXT", NX),
    neg("dns-version-other-type-nodata", "dns-version.cluster.local.", "A"),
]

# -- spec §2.3 ClusterIP Services: A/AAAA, SRV --------------------------------------------------

CLUSTER_IP = [
    case("1-a", "svc1.testns.svc.cluster.local.", "A", OK, ["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("2-a-no-endpoints", "svcempty.testns.svc.cluster.local.", "A", OK, ["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("19-aaaa-v6", "svc6.testns.svc.cluster.local.", "AAAA", OK, ["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"]),
    neg("10-aaaa-on-v4-nodata", "svc1.testns.svc.cluster.local.", "AAAA"),
    neg("a-on-v6-nodata", "svc6.testns.svc.cluster.local.", "A"),
    case("29-dual-stack-a", "svc-dual-stack.testns.svc.cluster.local.", "A", OK, ["svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3"]),
    case("30-dual-stack-aaaa", "svc-dual-stack.testns.svc.cluster.local.", "AAAA", OK, ["svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"]),
    case("60-endpoint-under-clusterip", "ep1a.svc1.testns.svc.cluster.local.", "A", OK, ["ep1a.svc1.testns.svc.cluster.local. 5 IN A 172.0.0.1"]),
    case("a-on-srv-name", "_http._tcp.svc1.testns.svc.cluster.local.", "A", OK, ["_http._tcp.svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
]

SRV_CLUSTER_IP = [
    case("3-bare-srv", "svc1.testns.svc.cluster.local.", "SRV", OK, ["svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."],
         extra=["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("4-bare-srv-no-endpoints", "svcempty.testns.svc.cluster.local.", "SRV", OK,
         ["svcempty.testns.svc.cluster.local. 5 IN SRV 0 100 80 svcempty.testns.svc.cluster.local."], extra=["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("5-bare-srv-v6", "svc6.testns.svc.cluster.local.", "SRV", OK, ["svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."],
         extra=["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"]),
    case("6-named-port", "_http._tcp.svc1.testns.svc.cluster.local.", "SRV", OK,
         ["_http._tcp.svc1.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."], extra=["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("7-named-port-no-endpoints", "_http._tcp.svcempty.testns.svc.cluster.local.", "SRV", OK,
         ["_http._tcp.svcempty.testns.svc.cluster.local. 5 IN SRV 0 100 80 svcempty.testns.svc.cluster.local."],
         extra=["svcempty.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    case("20-named-port-v6", "_http._tcp.svc6.testns.svc.cluster.local.", "SRV", OK,
         ["_http._tcp.svc6.testns.svc.cluster.local. 5 IN SRV 0 100 80 svc6.testns.svc.cluster.local."],
         extra=["svc6.testns.svc.cluster.local. 5 IN AAAA 1234:abcd::1"]),
    case("31-dual-stack-weight-50", "svc-dual-stack.testns.svc.cluster.local.", "SRV", OK,
         ["svc-dual-stack.testns.svc.cluster.local. 5 IN SRV 0 50 80 svc-dual-stack.testns.svc.cluster.local."],
         extra=["svc-dual-stack.testns.svc.cluster.local. 5 IN A 10.0.0.3", "svc-dual-stack.testns.svc.cluster.local. 5 IN AAAA 10::3"]),
    case("udp-port-upper-case-protocol", "_dns._udp.kubedns.kube-system.svc.cluster.local.", "SRV", OK,
         ["_dns._udp.kubedns.kube-system.svc.cluster.local. 5 IN SRV 0 100 53 kubedns.kube-system.svc.cluster.local."],
         extra=["kubedns.kube-system.svc.cluster.local. 5 IN A 10.0.0.10"]),
    neg("D3-protocol-mismatch-nxdomain", "_http._udp.svc1.testns.svc.cluster.local.", "SRV", NX),
    neg("port-name-mismatch-nxdomain", "_https._tcp.svc1.testns.svc.cluster.local.", "SRV", NX),
]

# -- spec §2.4 headless Services: A/AAAA, endpoint names, SRV -------------------------------------

HDLS1_SRV = [f"_http._tcp.hdls1.testns.svc.cluster.local. 5 IN SRV 0 16 80 {t}.hdls1.testns.svc.cluster.local."
             for t in ("172-0-0-2", "172-0-0-3", "5678-abcd--1", "5678-abcd--2", "dup-name")]
HDLS1_EXTRA = ["172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2", "172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3",
               "5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1", "5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2",
               "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4", "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5"]

HEADLESS = [
    case("8-every-ready-endpoint", "hdls1.testns.svc.cluster.local.", "A", OK,
         [f"hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.{n}" for n in (2, 3, 4, 5)]),
    case("21-aaaa", "hdls1.testns.svc.cluster.local.", "AAAA", OK,
         ["hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1", "hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2"]),
    case("9-portless-slice", "hdlsprtls.testns.svc.cluster.local.", "A", OK, ["hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"]),
    neg("D9-only-not-ready-nxdomain", "notready.testns.svc.cluster.local.", "A", NX),
    case("publish-not-ready-addresses", "publishing.testns.svc.cluster.local.", "A", OK,
         ["publishing.testns.svc.cluster.local. 5 IN A 172.0.0.40", "publishing.testns.svc.cluster.local. 5 IN A 172.0.0.41"]),
]

ENDPOINT_NAMES = [
    case("36-generated-v6", "5678-abcd--2.hdls1.testns.svc.cluster.local", "AAAA", OK,
         ["5678-abcd--2.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::2"]),
    case("37-generated-v6", "5678-abcd--1.hdls1.testns.svc.cluster.local.", "AAAA", OK,
         ["5678-abcd--1.hdls1.testns.svc.cluster.local. 5 IN AAAA 5678:abcd::1"]),
    case("38-generated-portless", "172-0-0-20.hdlsprtls.testns.svc.cluster.local.", "A", OK,
         ["172-0-0-20.hdlsprtls.testns.svc.cluster.local. 5 IN A 172.0.0.20"]),
    case("39-generated-v4", "172-0-0-2.hdls1.testns.svc.cluster.local.", "A", OK, ["172-0-0-2.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.2"]),
    case("40-generated-v4", "172-0-0-3.hdls1.testns.svc.cluster.local.", "A", OK, ["172-0-0-3.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.3"]),
    case("41-hostname-two-addresses", "dup-name.hdls1.testns.svc.cluster.local.", "A", OK,
         ["dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.4", "dup-name.hdls1.testns.svc.cluster.local. 5 IN A 172.0.0.5"]),
    neg("D5-v6-endpoint-a-nodata", "5678-abcd--2.hdls1.testns.svc.cluster.local.", "A"),
    neg("17-unknown-endpoint", "bogusendpoint.hdls1.testns.svc.cluster.local.", "A", NX),
    neg("18-endpoint-of-unknown-service", "bogusendpoint.svc0.testns.svc.cluster.local.", "A", NX),
    neg("D7-no-wildcards", "*.hdls1.testns.svc.cluster.local.", "A", NX),
    neg("not-ready-endpoint-name", "172-0-0-30.notready.testns.svc.cluster.local.", "A", NX),
]

SRV_HEADLESS = [
    case("35-named-port-weight-16", "_http._tcp.hdls1.testns.svc.cluster.local.", "SRV", OK, HDLS1_SRV, extra=HDLS1_EXTRA),
    case("D1-bare-srv", "hdls1.testns.svc.cluster.local.", "SRV", OK, [r.replace("_http._tcp.", "", 1) for r in HDLS1_SRV], extra=HDLS1_EXTRA),
    neg("D2-portless-slice-srv-nodata", "hdlsprtls.testns.svc.cluster.local.", "SRV"),
]

# -- spec §2.3.3 / §2.4.3 PTR (reverse_test.go's fixtures) ---------------------------------------

REVERSE_RECORDS = load(
    [service("testns", "svc1", ["192.168.1.100"]), service("testns", "svc2", ["192.168.1.200"])],
    [endpoint_slice("testns", "svc1-a", "svc1", [("10.0.0.100", "ep1a", True), ("1234:abcd::1", "ep1b", True), ("fd00:77:30::a", "ip6svc1ex", True),
                                                 ("fd00:77:30::2:9ba6", "ip6svc1in", True), ("10.0.0.99", "double-ep", True)]),
     endpoint_slice("testns", "svc1-b", "svc1", [("10.0.0.100", "ep1a", True)]),
     endpoint_slice("testns", "svc2-a", "svc2", [("10.0.0.99", "double-ep", True)])],
    namespaces=["testns"])

PTR = [
    case("61-endpoint-in-two-slices", "100.0.0.10.in-addr.arpa.", "PTR", OK, ["100.0.0.10.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."]),
    case("62-cluster-ip", "100.1.168.192.in-addr.arpa.", "PTR", OK, ["100.1.168.192.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."]),
    case("63-v6-endpoint", "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa.", "PTR", OK,
         ["1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa. 5 IN PTR ep1b.svc1.testns.svc.cluster.local."]),
    case("64-v6-endpoint", "a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa.", "PTR", OK,
         ["a.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa. 5 IN PTR ip6svc1ex.svc1.testns.svc.cluster.local."]),
    case("65-v6-endpoint", "6.a.b.9.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa.", "PTR", OK,
         ["6.a.b.9.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa. 5 IN PTR ip6svc1in.svc1.testns.svc.cluster.local."]),
    case("71-address-of-two-services", "99.0.0.10.in-addr.arpa.", "PTR", OK,
         ["99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc1.testns.svc.cluster.local.", "99.0.0.10.in-addr.arpa. 5 IN PTR double-ep.svc2.testns.svc.cluster.local."]),
    neg("67-ptr-on-zone-name", "example.org.cluster.local.", "PTR", NX),
    neg("68-ptr-on-service-nodata", "svc1.testns.svc.cluster.local.", "PTR"),
    neg("70-reverse-looking-name-in-zone", "100.0.0.10.cluster.local.", "PTR", NX),
]

# -- spec §2.5 ExternalName CNAME ----------------------------------------------------------------

EXTERNAL = [
    case("42-cname", "external.testns.svc.cluster.local.", "CNAME", OK, ["external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."]),
    case("44-cname-into-the-zone", "external-to-service.testns.svc.cluster.local", "A", OK,
         ["external-to-service.testns.svc.cluster.local. 5 IN CNAME svc1.testns.svc.cluster.local.", "svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"]),
    neg("33-label-under-externalname", "endpoint.external.testns.svc.cluster.local.", "CNAME", NX),
    neg("34-labels-under-externalname", "subdomain.subdomain.external.testns.svc.cluster.local.", "CNAME", NX),
    neg("D4-srv-nodata", "external.testns.svc.cluster.local.", "SRV"),
    neg("D10-ip-looking-target-a", "external-ip.testns.svc.cluster.local.", "A", NX),
    neg("D10-ip-looking-target-cname", "external-ip.testns.svc.cluster.local.", "CNAME", NX),
]

# -- spec §2.1 / CoreDNS handler.go: NXDOMAIN vs NODATA, SOA, apex -----------------------------------

NEGATIVE = [
    neg("11-unknown-service-aaaa", "svc0.testns.svc.cluster.local.", "AAAA", NX),
    neg("12-unknown-service", "svc0.testns.svc.cluster.local.", "A", NX),
    neg("13-unknown-namespace", "svc0.svc-nons.svc.cluster.local.", "A", NX),
    neg("46-service-in-unknown-namespace", "svc1.nsnoexist.svc.cluster.local.", "A", NX),
    neg("22-svc-nodata", "svc.cluster.local.", "A"),
    neg("23-pod-nodata", "pod.cluster.local.", "A"),
    neg("24-namespace-nodata", "testns.svc.cluster.local.", "A"),
    neg("25-svc-ns-nodata", "svc.cluster.local.", "NS"),
    neg("26-namespace-ns-nodata", "testns.svc.cluster.local.", "NS"),
    neg("27-unknown-first-label", "foo.cluster.local.", "NS", NX),
    neg("28-unknown-namespace-ns", "foo.svc.cluster.local.", "NS", NX),
    neg("32-soa-below-apex-nodata", "svc1.testns.svc.cluster.local.", "SOA"),
    neg("D6-soa-unknown-name-nodata", "svc0.testns.svc.cluster.local.", "SOA"),
    neg("D8-cname-on-service-nodata", "svc1.testns.svc.cluster.local.", "CNAME"),
    neg("D8-mx-on-service-nodata", "svc1.testns.svc.cluster.local.", "MX"),
    neg("D8-any-on-service-nodata", "svc1.testns.svc.cluster.local.", "ANY"),
    neg("hinfo-unknown-service-nxdomain", "svc0.testns.svc.cluster.local.", "HINFO", NX),
    neg("six-labels", "a._http._tcp.svc1.testns.svc.cluster.local.", "A", NX),
    case("52-apex-soa", "cluster.local.", "SOA", OK, [SOA]),
    neg("53-apex-hinfo", "cluster.local.", "HINFO"),
    neg("55-apex-a", "cluster.local.", "A"),
    neg("56-apex-aaaa", "cluster.local.", "AAAA"),
    neg("57-apex-srv", "cluster.local.", "SRV"),
    case("D12-axfr-refused", "cluster.local.", "AXFR", REFUSED),
]

# -- pod records (schema 1.0.0's deprecated records; k3s's `pods insecure`) -------------------------

PODS = [
    case("72-pod-a", "10-240-0-1.podns.pod.cluster.local.", "A", OK, ["10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"]),
    case("73-pod-not-checked", "172-0-0-2.podns.pod.cluster.local.", "A", OK, ["172-0-0-2.podns.pod.cluster.local. 5 IN A 172.0.0.2"]),
    case("pod-v6", "fd00-10--7.podns.pod.cluster.local.", "AAAA", OK, ["fd00-10--7.podns.pod.cluster.local. 5 IN AAAA fd00:10::7"]),
    neg("74-not-an-address", "blah.podns.pod.cluster.local.", "A", NX),
    neg("75-not-an-address-aaaa", "blah.podns.pod.cluster.local.", "AAAA", NX),
    neg("76-not-an-address-hinfo", "blah.podns.pod.cluster.local.", "HINFO", NX),
    neg("77-namespace-missing", "blah.pod-nons.pod.cluster.local.", "A", NX),
    neg("78-pod-namespace-nodata", "podns.pod.cluster.local.", "A"),
]

GROUPS = SCHEMA + CLUSTER_IP + SRV_CLUSTER_IP + HEADLESS + ENDPOINT_NAMES + SRV_HEADLESS + EXTERNAL + NEGATIVE + PODS


@pytest.mark.parametrize("qname, qtype, rcode, answer, authority, extra", GROUPS)
def test_spec_records(qname, qtype, rcode, answer, authority, extra):
    check(qname, qtype, rcode, answer, authority, extra)


@pytest.mark.parametrize("qname, qtype, rcode, answer, authority, extra", PTR)
def test_reverse_records(qname, qtype, rcode, answer, authority, extra):
    check(qname, qtype, rcode, answer, authority, extra, records=REVERSE_RECORDS)


def test_reverse_names_nobody_owns_are_forwarded():
    # 66: CoreDNS NXDOMAINs it in its reverse zone, then k3s's fallthrough hands it to forward
    assert ask("101.0.0.10.in-addr.arpa.", "PTR", records=REVERSE_RECORDS) is None
    assert ask("0.10.in-addr.arpa.", "PTR", records=REVERSE_RECORDS) is None


def test_names_outside_the_zone_are_forwarded():
    assert ask("example.org.", "A") is None
    assert ask("cluster.local.example.org.", "A") is None


@pytest.mark.parametrize("mode, rcode", [("disabled", NX)], ids=["84-85-disabled"])
def test_pods_disabled(mode, rcode):
    for name in ("10-240-0-1.podns.pod.cluster.local.", "172-0-0-2.podns.pod.cluster.local.", "podns.pod.cluster.local."):
        assert ask(name, "A", settings=Settings.for_domain("cluster.local", pods=PODS_DISABLED)).rcode == rcode


# `pods verified` (handler_pod_verified_test.go): the Pod index holds podns/foo at 10.240.0.1
def pod(ns, name, ip, phase="Running", deleting=False):
    meta = {"namespace": ns, "name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}] if ip else []}}


VERIFIED = Settings.for_domain("cluster.local", pods=PODS_VERIFIED)
VERIFIED_RECORDS = load(SERVICES, SLICES, namespaces=["testns", "podns", "svcns", "otherns"],
                        pods=[pod("podns", "foo", "10.240.0.1"), pod("podns", "six", "fd00:10::7"), pod("otherns", "bar", "10.240.0.2")])

PODS_VERIFIED_CASES = [
    case("79-verified-pod-a", "10-240-0-1.podns.pod.cluster.local.", "A", OK, ["10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"]),
    neg("80-verified-namespace-nodata", "podns.pod.cluster.local.", "A"),
    neg("81-verified-svc-namespace-nodata", "svcns.svc.cluster.local.", "A"),
    neg("82-verified-namespace-missing", "pod-nons.pod.cluster.local.", "A", NX),
    neg("83-verified-no-such-pod", "172-0-0-2.podns.pod.cluster.local.", "A", NX),
    # derived from findPods: the Pod's IP in another namespace is no Pod of this one
    neg("verified-other-namespace", "10-240-0-2.podns.pod.cluster.local.", "A", NX),
    case("verified-v6", "fd00-10--7.podns.pod.cluster.local.", "AAAA", OK, ["fd00-10--7.podns.pod.cluster.local. 5 IN AAAA fd00:10::7"]),
    neg("verified-other-family-nodata", "10-240-0-1.podns.pod.cluster.local.", "AAAA"),
    # CoreDNS compares the label's text with status.podIP: a differently spelled address is no Pod
    neg("verified-text-compared", "010-240-0-1.podns.pod.cluster.local.", "A", NX),
    neg("verified-not-an-address", "blah.podns.pod.cluster.local.", "A", NX),
    case("verified-case-insensitive", "10-240-0-1.PodNS.POD.cluster.local.", "A", OK, ["10-240-0-1.PodNS.POD.cluster.local. 5 IN A 10.240.0.1"]),
]


@pytest.mark.parametrize("qname, qtype, rcode, answer, authority, extra", PODS_VERIFIED_CASES)
def test_pods_verified(qname, qtype, rcode, answer, authority, extra):
    check(qname, qtype, rcode, answer, authority, extra, records=VERIFIED_RECORDS, settings=VERIFIED)


def pod_rcode(records, name="10-240-0-1.podns.pod.cluster.local."):
    return dns.rcode.to_text(ask(name, "A", records=records, settings=VERIFIED).rcode)


def test_verified_follows_the_pod_informer():
    records = load(namespaces=["podns"])
    assert pod_rcode(records) == "NXDOMAIN"
    records.set_pod(pod("podns", "foo", ""))  # no IP yet: no record
    assert pod_rcode(records) == "NXDOMAIN"
    records.set_pod(pod("podns", "foo", "10.240.0.1"))
    assert pod_rcode(records) == "NOERROR"
    generation = records.generation
    records.set_pod(pod("podns", "foo", "10.240.0.1", phase="Running"))  # status churn, same IP: nothing DNS shows changed
    assert records.generation == generation
    # terminating: CoreDNS's ToPod skips the event, the Pod stays as last kept until it is deleted
    records.set_pod(pod("podns", "foo", "10.240.0.1", deleting=True))
    assert pod_rcode(records) == "NOERROR"
    records.delete_pod(pod("podns", "foo", "10.240.0.1", deleting=True))
    assert pod_rcode(records) == "NXDOMAIN"
    # one first seen terminating is never kept
    records.set_pod(pod("podns", "foo", "10.240.0.1", deleting=True))
    assert pod_rcode(records) == "NXDOMAIN"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Unknown"])
def test_verified_forgets_pods_that_are_done(phase):
    # CoreDNS lists and watches Pods with status.phase!=Succeeded,!=Failed,!=Unknown
    records = load(namespaces=["podns"], pods=[pod("podns", "foo", "10.240.0.1")])
    records.set_pod(pod("podns", "foo", "10.240.0.1", phase=phase))
    assert pod_rcode(records) == "NXDOMAIN"


def test_verified_two_pods_one_ip():
    # a Pod IP reused by a new Pod while the old one is still listed: the record holds until both are gone
    records = load(namespaces=["podns"], pods=[pod("podns", "old", "10.240.0.1"), pod("podns", "new", "10.240.0.1")])
    records.delete_pod(pod("podns", "old", "10.240.0.1"))
    assert pod_rcode(records) == "NOERROR"
    records.set_pod(pod("podns", "new", "10.240.0.9"))  # its IP changed
    assert pod_rcode(records) == "NXDOMAIN"
    assert pod_rcode(records, "10-240-0-9.podns.pod.cluster.local.") == "NOERROR"


def test_external_name_outside_the_zone_is_chased_upstream():
    # 43: the CNAME first, then the target's records as the upstream gives them (the server appends them)
    reply = check("external.testns.svc.cluster.local.", "A", OK, ["external.testns.svc.cluster.local. 5 IN CNAME ext.interwebs.test."])
    assert (reply.chase, reply.chase_type) == (dns.name.from_text("ext.interwebs.test."), dns.rdatatype.A)


def test_not_synced_nxdomain_is_servfail():
    # 47: before the informers synced, a name that would be NXDOMAIN is SERVFAIL (with the SOA)
    check("svc0.testns.svc.cluster.local.", "A", SERVFAIL, authority=[SOA], synced=False)
    check("svc1.testns.svc.cluster.local.", "A", OK, ["svc1.testns.svc.cluster.local. 5 IN A 10.0.0.1"], synced=False)


def test_case_is_preserved_and_ignored():
    # 48-51 (handler_case_test.go): owners keep the question's spelling, built names take the zone's
    check("SvC1.TeStNs.SvC.cLuStEr.LoCaL.", "A", OK, ["SvC1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN A 10.0.0.1"])
    check("_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL.", "SRV", OK,
          ["_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN SRV 0 100 80 svc1.testns.svc.cLuStEr.LoCaL."],
          extra=["svc1.testns.svc.cLuStEr.LoCaL. 5 IN A 10.0.0.1"])
    check("not-a-service.testns.svc.ClUsTeR.lOcAl.", "A", NX,
          authority=["ClUsTeR.lOcAl. 5 IN SOA ns.dns.ClUsTeR.lOcAl. hostmaster.ClUsTeR.lOcAl. 3 7200 1800 86400 5"])
    check("Cluster.local.", "SOA", OK, ["Cluster.local. 5 IN SOA ns.dns.Cluster.local. hostmaster.Cluster.local. 3 7200 1800 86400 5"])


def test_apex_ns_names_the_dns_service_serving_from_this_address():
    # 54: CoreDNS finds the Service whose endpoint is its own address; without one, ns.dns.<zone>
    own = Settings.for_domain("cluster.local", self_addresses=("172.0.0.100",))
    check("cluster.local.", "NS", OK, ["cluster.local. 5 IN NS kubedns.kube-system.svc.cluster.local."],
          extra=["kubedns.kube-system.svc.cluster.local. 5 IN A 10.0.0.10"], settings=own)
    lone = Settings.for_domain("cluster.local", self_addresses=("127.0.0.1",))
    check("cluster.local.", "NS", OK, ["cluster.local. 5 IN NS ns.dns.cluster.local."], extra=["ns.dns.cluster.local. 5 IN A 127.0.0.1"], settings=lone)
    check("ns.dns.cluster.local.", "A", OK, ["ns.dns.cluster.local. 5 IN A 127.0.0.1"], settings=lone)


def test_ttl_is_the_plugin_ttl_and_soa_ttl_is_capped_at_300():
    long = Settings.for_domain("cluster.local", ttl=3600)
    check("svc1.testns.svc.cluster.local.", "A", OK, ["svc1.testns.svc.cluster.local. 3600 IN A 10.0.0.1"], settings=long)
    check("svc0.testns.svc.cluster.local.", "A", NX,
          authority=["cluster.local. 300 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 3 7200 1800 86400 3600"], settings=long)


def test_other_cluster_domain():
    records = load([service("default", "web", ["10.96.0.20"])])
    check("web.default.svc.example.internal.", "A", OK, ["web.default.svc.example.internal. 5 IN A 10.96.0.20"],
          records=records, settings=Settings.for_domain("example.internal"))
    assert ask("web.default.svc.cluster.local.", "A", records=records, settings=Settings.for_domain("example.internal")) is None


def test_changes_apply_per_event():
    records = load([service("default", "web", ["10.96.0.20"])], namespaces=["default"])
    name = "web.default.svc.cluster.local."
    assert ask(name, "A", records=records).rcode == OK
    records.set_service(service("default", "web", ["10.96.0.21"]))
    assert lines(ask(name, "A", records=records).answer) == {f"{name} 5 IN A 10.96.0.21"}
    assert ask("21.0.96.10.in-addr.arpa.", "PTR", records=records) is not None
    assert ask("20.0.96.10.in-addr.arpa.", "PTR", records=records) is None
    records.delete_service(service("default", "web", ["10.96.0.21"]))
    assert ask(name, "A", records=records).rcode == NX
    assert ask("21.0.96.10.in-addr.arpa.", "PTR", records=records) is None
    records.set_service(service("default", "h", headless=True, ports=()))
    records.set_slice(endpoint_slice("default", "h-1", "h", [("10.0.0.7", "a", True)]))
    assert lines(ask("a.h.default.svc.cluster.local.", "A", records=records).answer) == {"a.h.default.svc.cluster.local. 5 IN A 10.0.0.7"}
    records.set_slice(endpoint_slice("default", "h-1", "h", [("10.0.0.7", "a", False)]))
    assert ask("a.h.default.svc.cluster.local.", "A", records=records).rcode == NX
    assert ask("7.0.0.10.in-addr.arpa.", "PTR", records=records) is None  # not ready: no PTR either
    records.set_slice(endpoint_slice("default", "h-1", "h", [("10.0.0.7", "a", True)]))
    assert ask("7.0.0.10.in-addr.arpa.", "PTR", records=records) is not None
    records.delete_slice(endpoint_slice("default", "h-1", "h", []))
    assert ask("7.0.0.10.in-addr.arpa.", "PTR", records=records) is None


def test_response_message_is_authoritative_and_echoes_the_question():
    query = dns.message.make_query("SvC1.testns.svc.cluster.local.", "A", use_edns=0)
    response = respond(query, ask("SvC1.testns.svc.cluster.local.", "A"))
    parsed = dns.message.from_wire(response.to_wire())
    assert parsed.id == query.id and parsed.question[0].name.to_text() == "SvC1.testns.svc.cluster.local."
    assert parsed.flags & dns.flags.AA and parsed.flags & dns.flags.QR and not parsed.flags & dns.flags.RA
    assert parsed.edns == 0
