"""The answer builder: one question and the cluster's records in, the DNS reply out. Pure.

The contract is the Kubernetes DNS-Based Service Discovery specification (kubernetes/dns
docs/specification.md, schema 1.1.0); where it is silent, CoreDNS's ``kubernetes`` plugin as
k3s runs it (plugin/kubernetes: parse.go, kubernetes.go, handler.go, reverse.go, ns.go and
plugin/backend_lookup.go). Names inside the cluster domain (``<zone>``, ``cluster.local`` by
default) are read right to left, as CoreDNS's ``parseRequest`` does:

==========================================  ===================================================
``<zone>``                                  the apex: SOA and NS answered, NODATA otherwise
``dns-version.<zone>``                      TXT ``"1.1.0"``, TTL 28800 (spec §2.2)
``svc.<zone>``, ``pod.<zone>``              NODATA (empty non-terminals)
``<ns>.svc.<zone>``                         NODATA if the namespace exists, else NXDOMAIN
``<svc>.<ns>.svc.<zone>``                   A/AAAA: every ClusterIP of the Service (one per
                                            family, §2.3.1), or for a headless Service every
                                            ready endpoint (§2.4.1; not-ready ones too with
                                            ``publishNotReadyAddresses``); CNAME for an
                                            ExternalName Service (§2.5); SRV for every port
                                            (CoreDNS's bare-name SRV, kept for peer-finder)
``<ep>.<svc>.<ns>.svc.<zone>``              the endpoints whose name (``hostname``, else the
                                            dashed address) is ``<ep>``, under headless and
                                            ClusterIP Services alike (CoreDNS)
``_<port>._<proto>.<svc>.<ns>.svc.<zone>``  SRV (§2.3.2, §2.4.2): priority 0, weight
                                            floor(100/n) (at least 1), the Service port
                                            (ClusterIP) or the EndpointSlice port (headless),
                                            targets' addresses in the additional section
``<a-b-c-d>.<ns>.pod.<zone>``               the address in the name (the spec dropped pod
                                            records in 2019; CoreDNS's ``pods`` option): when
                                            the namespace exists, ``insecure`` (k3s, kubeadm)
                                            answers it unchecked, ``verified`` only when a Pod
                                            of that namespace has it as ``status.podIP``
                                            (NXDOMAIN otherwise), ``disabled`` never
``ns.dns.<zone>``                           the server's own addresses (CoreDNS ns.go)
anything else, or more labels               NXDOMAIN
==========================================  ===================================================

Negative answers (CoreDNS handler.go): a name that exists without the asked type is NOERROR
with no answer (NODATA); one that does not exist is NXDOMAIN; both carry the zone's SOA in the
authority section: ``<zone> min(ttl,300) SOA ns.dns.<zone>. hostmaster.<zone>. <serial> 7200
1800 86400 <ttl>``. Existence never depends on the type: an unknown type (HINFO, MX, ANY, ...)
is answered as an A lookup would be, an A query on an IPv6-only Service is NODATA. Until the
informers have synced an answer that would be NXDOMAIN is SERVFAIL. SOA on a non-apex name is
NODATA without a lookup (a CoreDNS quirk kept), zone transfers are REFUSED. A headless Service
with no ready endpoint, an unknown port or protocol, any label under an ExternalName Service, and
an ExternalName that looks like an IP address are NXDOMAIN. ``*`` and ``any`` are plain labels
(CoreDNS removed wildcards in v1.9.0). One divergence, said here: ``dns-version.<zone>`` with a
type other than TXT is NODATA (the name exists), where CoreDNS answers NXDOMAIN.

Every name compares case-insensitively; answer owners keep the question's spelling and names
the server builds (SRV and PTR targets) are the objects' names under the zone as the question
spelled it. Every record carries the plugin TTL (5 s by default), the dns-version TXT 28800.

PTR (§2.3.3, §2.4.3): a ClusterIP names its Service (the first one holding it), otherwise an
endpoint address names ``<ep>.<svc>.<ns>.svc.<zone>`` for each Service selecting it. Reverse
names nobody in the cluster owns, and every name outside the zone, are not answered here
(``resolve`` returns None): the server forwards them, as k3s's ``fallthrough in-addr.arpa
ip6.arpa`` and ``forward .`` do.

For an ExternalName whose target is outside the zone, the A/AAAA/TXT answer is the CNAME and
``Reply.chase`` names the target: the server resolves it upstream and appends what it gets
(CoreDNS resolves it through its own chain); a target inside the zone is followed here (at most
10 links, ``x CNAME x`` dropped). The CNAME always comes first (glibc needs that order).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.reversename
import dns.rrset
from dns.rdtypes.ANY.CNAME import CNAME
from dns.rdtypes.ANY.NS import NS
from dns.rdtypes.ANY.PTR import PTR
from dns.rdtypes.ANY.SOA import SOA
from dns.rdtypes.ANY.TXT import TXT
from dns.rdtypes.IN.A import A
from dns.rdtypes.IN.AAAA import AAAA
from dns.rdtypes.IN.SRV import SRV

from kubesvc.dns.records import CLUSTER_IP, EXTERNAL_NAME, ClusterRecords, Port, canonical_ip

IN = dns.rdataclass.IN
T = dns.rdatatype
SCHEMA_VERSION = "1.1.0"
SCHEMA_VERSION_TTL = 28800
DEFAULT_TTL = 5
MAX_CNAME_CHAIN = 10
REVERSE_ZONES = (dns.name.from_text("in-addr.arpa."), dns.name.from_text("ip6.arpa."))
PODS_INSECURE = "insecure"
PODS_VERIFIED = "verified"
PODS_DISABLED = "disabled"
POD_MODES = (PODS_INSECURE, PODS_VERIFIED, PODS_DISABLED)


@dataclass(frozen=True)
class Settings:
    zone: dns.name.Name = dns.name.from_text("cluster.local.")
    ttl: int = DEFAULT_TTL
    pods: str = PODS_INSECURE
    self_addresses: tuple[str, ...] = ()  # the server's own IPs (NS glue, ns.dns.<zone>)

    @classmethod
    def for_domain(cls, domain: str, **kwargs) -> Settings:
        return cls(zone=dns.name.from_text(domain.strip(".").lower() + "."), **kwargs)


@dataclass
class Reply:
    """What to send: rcode and sections; ``chase`` is an ExternalName target outside the
    zone whose ``chase_type`` records the server appends after resolving it upstream."""

    rcode: int = dns.rcode.NOERROR
    answer: list[dns.rrset.RRset] = field(default_factory=list)
    authority: list[dns.rrset.RRset] = field(default_factory=list)
    additional: list[dns.rrset.RRset] = field(default_factory=list)
    authoritative: bool = True
    chase: dns.name.Name | None = None
    chase_type: int = 0


@dataclass(frozen=True)
class Hit:
    """One thing a name stands for (CoreDNS's msg.Service): an address (or, for an
    ExternalName, the target name), a port (-1: none) and the leading labels of the name an SRV
    record would target."""

    host: str
    port: int = -1
    target: tuple[str, ...] = ()
    cname: bool = False


NXDOMAIN = None  # find(): the name does not exist


def resolve(qname: dns.name.Name, qtype: int, records: ClusterRecords, settings: Settings, *, synced: bool = True) -> Reply | None:
    """The reply for ``qname``/``qtype``, or None when the name is not the cluster's to answer
    (outside the zone, or a reverse name of no cluster IP): the server forwards those."""
    if qtype in (T.AXFR, T.IXFR):
        if qname.is_subdomain(settings.zone):
            return Reply(rcode=dns.rcode.REFUSED, authoritative=False)
        return None
    if qname.is_subdomain(settings.zone):
        reply = _in_zone(qname, qtype, records, settings, depth=0)
    else:
        reply = _reverse(qname, qtype, records, settings)
        if reply is None:
            return None
    if reply.rcode == dns.rcode.NXDOMAIN and not synced:
        reply.rcode = dns.rcode.SERVFAIL
    return reply


# -- the zone ------------------------------------------------------------------------------


def _zone_as_asked(qname: dns.name.Name, zone: dns.name.Name) -> dns.name.Name:
    return dns.name.Name(qname.labels[len(qname.labels) - len(zone.labels):])


def soa(zone: dns.name.Name, records: ClusterRecords, settings: Settings) -> dns.rrset.RRset:
    rrset = dns.rrset.RRset(zone, IN, T.SOA)
    rdata = SOA(IN, T.SOA, dns.name.Name((b"ns", b"dns", *zone.labels)), dns.name.Name((b"hostmaster", *zone.labels)),
                records.serial, 7200, 1800, 86400, settings.ttl)
    rrset.add(rdata, min(settings.ttl, 300))
    return rrset


def _negative(rcode: int, zone: dns.name.Name, records: ClusterRecords, settings: Settings) -> Reply:
    return Reply(rcode=rcode, authority=[soa(zone, records, settings)])


def _labels(qname: dns.name.Name, zone: dns.name.Name) -> list[str]:
    """The labels left of the zone, lowercase, in the question's order."""
    return [label.decode("ascii", "replace").lower() for label in qname.labels[: len(qname.labels) - len(zone.labels)]]


def _in_zone(qname: dns.name.Name, qtype: int, records: ClusterRecords, settings: Settings, depth: int) -> Reply:
    zone = _zone_as_asked(qname, settings.zone)
    labels = _labels(qname, settings.zone)

    if not labels:  # the apex
        if qtype == T.SOA:
            return Reply(answer=[soa(zone, records, settings)])
        if qtype == T.NS:
            return _apex_ns(qname, zone, records, settings)
        return _negative(dns.rcode.NOERROR, zone, records, settings)
    if qtype == T.SOA:  # CoreDNS runs no lookup for SOA below the apex: NODATA whatever the name
        return _negative(dns.rcode.NOERROR, zone, records, settings)
    if labels == ["dns-version"]:
        if qtype != T.TXT:
            return _negative(dns.rcode.NOERROR, zone, records, settings)
        rrset = dns.rrset.RRset(qname, IN, T.TXT)
        rrset.add(TXT(IN, T.TXT, [SCHEMA_VERSION]), SCHEMA_VERSION_TTL)
        return Reply(answer=[rrset])

    hits = find(labels, records, settings)
    if hits is NXDOMAIN:
        return _negative(dns.rcode.NXDOMAIN, zone, records, settings)

    if qtype in (T.A, T.AAAA, T.TXT, T.CNAME) and any(hit.cname for hit in hits):
        return _external_name(qname, qtype, hits[0].host, zone, records, settings, depth)
    if qtype in (T.A, T.AAAA):
        rrset = _addresses(qname, qtype, (hit.host for hit in hits), settings.ttl)
        return Reply(answer=[rrset]) if rrset else _negative(dns.rcode.NOERROR, zone, records, settings)
    if qtype == T.SRV:
        return _srv(qname, hits, zone, records, settings)
    return _negative(dns.rcode.NOERROR, zone, records, settings)  # the name exists, not with this type


def find(labels: list[str], records: ClusterRecords, settings: Settings) -> list[Hit] | None:
    """What the name (labels left of the zone, lowercase) stands for; [] for a name that
    exists with no records of its own (an empty non-terminal), NXDOMAIN (None) if it does not
    exist."""
    count = len(labels)
    if count == 1:
        return [] if labels[0] in ("svc", "pod") else NXDOMAIN
    if count == 2:
        namespace, kind = labels
        if (namespace, kind) == ("ns", "dns"):
            return [Hit(ip) for ip in settings.self_addresses]
        if kind == "svc" or (kind == "pod" and settings.pods != PODS_DISABLED):
            return [] if records.namespace_exists(namespace) else NXDOMAIN
        return NXDOMAIN
    if labels[-1] == "pod":
        return _pod(labels, records, settings) if count == 3 else NXDOMAIN
    if labels[-1] != "svc":
        return NXDOMAIN
    if count == 3:
        return _service_hits(records, labels[1], labels[0])
    if count == 4:
        return _service_hits(records, labels[2], labels[1], endpoint=labels[0])
    if count == 5:
        return _service_hits(records, labels[3], labels[2], port=labels[0].removeprefix("_"), protocol=labels[1].removeprefix("_"))
    return NXDOMAIN


def _matches(port: Port, name: str | None, protocol: str | None) -> bool:
    return (name is None or port.name.lower() == name) and (protocol is None or port.protocol.lower() == protocol)


NO_PORT = Port("", "", -1)  # CoreDNS's sentinel for a slice without ports: addresses, no SRV


def _service_hits(records: ClusterRecords, namespace: str, name: str, *, endpoint: str | None = None,
                  port: str | None = None, protocol: str | None = None) -> list[Hit] | None:
    service = records.service(namespace, name)
    if service is None:
        return NXDOMAIN
    if service.kind == EXTERNAL_NAME:
        if endpoint is not None or port is not None or _looks_like_ip(service.external_name) or not service.external_name:
            return NXDOMAIN
        return [Hit(service.external_name, cname=True)]
    hits: list[Hit] = []
    if service.kind == CLUSTER_IP and endpoint is None:
        target = (service.name.lower(), service.namespace.lower(), "svc")
        for ip in service.cluster_ips:
            for p in service.ports or (NO_PORT,):
                if p is NO_PORT and port is not None:
                    continue
                if _matches(p, port, protocol):
                    hits.append(Hit(ip, p.port, target))
        return hits or NXDOMAIN
    for slice_, ep in records.endpoints(service):
        if endpoint is not None and ep.hostname.lower() != endpoint:
            continue
        target = (ep.hostname.lower(), service.name.lower(), service.namespace.lower(), "svc")
        for p in slice_.ports or (NO_PORT,):
            if p is NO_PORT and port is not None:
                continue
            if _matches(p, port, protocol):
                hits.append(Hit(ep.address, p.port, target))
    return hits or NXDOMAIN


def _pod(labels: list[str], records: ClusterRecords, settings: Settings) -> list[Hit] | None:
    """``<dashed-ip>.<ns>.pod.<zone>`` (CoreDNS findPods); the namespace must exist. The label
    is turned back into an address: three ``-`` and no ``--`` is IPv4, anything else IPv6.
    ``insecure`` answers any label that is an address, not checked against any Pod;
    ``verified`` answers only when a Pod of the namespace has that text as its
    ``status.podIP`` (CoreDNS compares the strings, so ``010-0-0-1`` is not ``10.0.0.1``)."""
    if settings.pods == PODS_DISABLED or not records.namespace_exists(labels[1]):
        return NXDOMAIN
    label = labels[0]
    text = label.replace("-", ".") if label.count("-") == 3 and "--" not in label else label.replace("-", ":")
    if settings.pods == PODS_VERIFIED:
        return [Hit(text)] if records.pod_exists(labels[1], text) else NXDOMAIN
    try:
        return [Hit(str(ipaddress.ip_address(text)))]
    except ValueError:
        return NXDOMAIN


def _looks_like_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.rstrip("."))
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=65536)
def _address_rdata(host: str):
    """The A or AAAA rdata of an address (None: not an address); kept, since the same few
    thousand addresses are answered over and over."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return A(IN, T.A, str(ip)) if ip.version == 4 else AAAA(IN, T.AAAA, str(ip))


def _addresses(owner: dns.name.Name, qtype: int, hosts, ttl: int) -> dns.rrset.RRset | None:
    rrset = dns.rrset.RRset(owner, IN, qtype)
    for host in hosts:
        rdata = _address_rdata(host)
        if rdata is not None and rdata.rdtype == qtype:
            rrset.add(rdata, ttl)
    return rrset if len(rrset) else None


def _target(labels: tuple[str, ...], zone: dns.name.Name) -> dns.name.Name:
    return dns.name.Name((*(label.encode() for label in labels), *zone.labels))


def _srv(qname: dns.name.Name, hits: list[Hit], zone: dns.name.Name, records: ClusterRecords, settings: Settings) -> Reply:
    candidates = [hit for hit in hits if hit.port != -1 and not hit.cname]
    if not candidates:
        return _negative(dns.rcode.NOERROR, zone, records, settings)
    weight = max(1, 100 // len(candidates))
    answer = dns.rrset.RRset(qname, IN, T.SRV)
    extra: dict[tuple[dns.name.Name, int], dns.rrset.RRset] = {}
    for hit in candidates:
        target = _target(hit.target, zone)
        answer.add(SRV(IN, T.SRV, 0, weight, hit.port, target), settings.ttl)
        family = T.AAAA if ":" in hit.host else T.A
        rrset = extra.setdefault((target, family), dns.rrset.RRset(target, IN, family))
        rrset.add((AAAA if family == T.AAAA else A)(IN, family, hit.host), settings.ttl)
    return Reply(answer=[answer], additional=list(extra.values()))


def _external_name(qname: dns.name.Name, qtype: int, external: str, zone: dns.name.Name, records: ClusterRecords,
                   settings: Settings, depth: int) -> Reply:
    target = dns.name.from_text(external)  # relative to the root: CoreDNS makes the target an FQDN
    cname = dns.rrset.RRset(qname, IN, T.CNAME)
    cname.add(CNAME(IN, T.CNAME, target), settings.ttl)
    reply = Reply(answer=[cname])
    if qtype == T.CNAME or target == qname:
        return reply
    if target.is_subdomain(settings.zone):
        if depth + 1 >= MAX_CNAME_CHAIN:
            return reply
        followed = _in_zone(target, qtype, records, settings, depth + 1)
        reply.answer += followed.answer
        reply.additional += followed.additional
        return reply
    reply.chase, reply.chase_type = target, qtype
    return reply


def _apex_ns(qname: dns.name.Name, zone: dns.name.Name, records: ClusterRecords, settings: Settings) -> Reply:
    """``<zone> NS``: the Service whose endpoints are this server's own addresses
    (``kube-dns.kube-system.svc.<zone>.`` with its ClusterIPs), else ``ns.dns.<zone>.`` with
    the server's addresses (CoreDNS ns.go)."""
    name, addresses = _target(("ns", "dns"), zone), list(settings.self_addresses)
    for own in settings.self_addresses:
        for namespace, service_name, _ in records.by_endpoint_ip.get(canonical_ip(own), {}):
            service = records.service(namespace, service_name.lower())
            if service is not None and service.kind == CLUSTER_IP:
                name, addresses = _target((service.name.lower(), service.namespace.lower(), "svc"), zone), list(service.cluster_ips)
                break
        else:
            continue
        break
    ns = dns.rrset.RRset(qname, IN, T.NS)
    ns.add(NS(IN, T.NS, name), settings.ttl)
    glue = [rrset for rrset in (_addresses(name, T.A, addresses, settings.ttl), _addresses(name, T.AAAA, addresses, settings.ttl)) if rrset]
    return Reply(answer=[ns], additional=glue)


# -- reverse -------------------------------------------------------------------------------


def _reverse(qname: dns.name.Name, qtype: int, records: ClusterRecords, settings: Settings) -> Reply | None:
    reverse_zone = next((zone for zone in REVERSE_ZONES if qname.is_subdomain(zone)), None)
    if reverse_zone is None:
        return None
    try:
        ip = canonical_ip(dns.reversename.to_address(qname))
    except (dns.exception.SyntaxError, ValueError):
        return None
    rrset = dns.rrset.RRset(qname, IN, T.PTR)
    holders = records.by_cluster_ip.get(ip)
    if holders:
        namespace, name = holders[0]
        rrset.add(PTR(IN, T.PTR, _target((name, namespace, "svc"), settings.zone)), settings.ttl)
    else:
        for namespace, service, hostname in sorted(records.by_endpoint_ip.get(ip, {})):
            rrset.add(PTR(IN, T.PTR, _target((hostname.lower(), service.lower(), namespace, "svc"), settings.zone)), settings.ttl)
    if not len(rrset):
        return None
    if qtype != T.PTR:
        return _negative(dns.rcode.NOERROR, _zone_as_asked(qname, reverse_zone), records, settings)
    return Reply(answer=[rrset])


# -- the message ---------------------------------------------------------------------------


def respond(query: dns.message.Message, reply: Reply) -> dns.message.Message:
    """The response message to ``query`` (its id, question as asked, RD, EDNS) carrying
    ``reply``; authoritative answers set AA and, as CoreDNS's kubernetes plugin, not RA."""
    response = dns.message.make_response(query, recursion_available=False)
    response.set_rcode(reply.rcode)
    if reply.authoritative:
        response.flags |= dns.flags.AA
    response.answer = list(reply.answer)
    response.authority = list(reply.authority)
    response.additional = list(reply.additional)
    return response
