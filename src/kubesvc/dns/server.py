"""The ``kubesvc dns`` server: the thin shell around ``answer``, ``cache`` and ``forward``.

What CoreDNS does with k3s's Corefile, in one process:

- **DNS** on UDP and TCP (``--dns-port``, 53): each query is parsed with dnspython; a name in
  the cluster domain, or a reverse name of a cluster IP, is answered from memory by
  ``answer.resolve`` (authoritative, TTL 5 s, no negative cache: a Service change is visible
  on the next query); anything else is looked up in the cache and, on a miss, forwarded
  (``forward.Forwarder``) and cached. An ExternalName whose target is outside the zone gets its
  CNAME followed upstream, the upstream's records appended and its TC bit kept. A UDP answer
  that does not fit 512 bytes (or the client's EDNS size) is truncated with TC set, so the
  client retries over TCP (CoreDNS's ``Scrub``). A malformed query is FORMERR, an opcode other
  than QUERY is NOTIMP, a query with no way out (no upstream answering) is SERVFAIL.
- **Informers** on Services, EndpointSlices and Namespaces (and Pods in ``pods verified``
  mode) feed ``records.ClusterRecords``; until all of them have synced an answer that would be NXDOMAIN is SERVFAIL and ``/ready``
  is 503 (CoreDNS's ``ready`` plugin lists the plugins not ready: ``kubernetes``).
- **Prerendered answers** (``prerender``): the A and AAAA answers of every Service's name,
  rendered when the Service or its slices change, sent to a UDP query of that name with the
  query's id, RD bit and question bytes; a name asked for the first time costs a dictionary
  lookup, not a parse and a rendering.
- **Rendered answers**: a UDP question whose bytes (all but the id) were answered before gets
  that rendered answer again with its own id, while it holds: for cluster names until any
  informer event (``ClusterRecords.generation``), for cached forwarded names while they stay
  in the cache, their TTL fields (found once per answer by ``render_with_ttl_slots``) set to
  what is left;
  the rest of the path (parse, answer, render with dnspython) runs once per distinct
  question. A cache hit for a forwarded name is answered inline; only an upstream query waits.
- **HTTP**: ``/health`` (``:8080``) is 200 ``OK`` while the process serves; ``/ready``
  (``:8181``) as above; ``/metrics`` (``:9153``) CoreDNS's metrics (``metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype

from kubesvc.dns.answer import Reply, Settings, resolve, respond
from kubesvc.dns.cache import AnswerCache, CacheHit, with_ttl
from kubesvc.dns.forward import Forwarder
from kubesvc.dns.metrics import DNSMetrics
from kubesvc.dns.prerender import Prerenderer
from kubesvc.dns.records import ClusterRecords

log = logging.getLogger("kubesvc.dns")

UDP_MIN_SIZE = 512
TCP_MAX_SIZE = 65535
ROOT_ZONE = "."


@dataclass
class Handled:
    wire: bytes | None
    zone: str
    plugin: str
    rcode: int
    cache_hit: CacheHit | None = None  # a cache hit: what was found


@dataclass
class Rendered:
    """A UDP answer as sent, after its 2-byte id: the same query bytes (flags, question in the
    same spelling, EDNS) get the same answer while the records have not changed (cluster
    names) or, for a cached forwarded name, while it stays in the cache, its TTLs (``slots``)
    set to what is left of the cache's as the seconds pass. Only the id differs."""

    tail: bytes
    generation: int  # records.generation it was rendered at (-1: a cache answer)
    synced: bool
    expires: float  # on the answer cache's clock (inf: cluster names)
    zone: str
    plugin: str
    rcode: str
    qtype: str
    kind: str = ""  # the cache hit's kind (success, denial)
    slots: tuple[int, ...] = ()  # a cache answer: where its TTLs sit in the wire (render_with_ttl_slots)
    stored: float = 0.0  # a cache answer: when it was cached, for how long, and the age ``tail`` carries
    ttl: int = 0
    age: int = 0

    def refresh(self, now: float) -> None:
        """A cache answer's TTLs for its age at ``now`` (CoreDNS: ``ttl - age`` on every record)."""
        age = int(now - self.stored)
        if age != self.age:
            tail, value = bytearray(self.tail), (self.ttl - age).to_bytes(4, "big")
            for slot in self.slots:
                tail[slot - 2:slot + 2] = value  # the tail starts after the 2-byte id
            self.tail, self.age = bytes(tail), age


def render_with_ttl_slots(render: Callable[..., bytes], response: dns.message.Message, ttl: int) -> tuple[bytes, tuple[int, ...] | None]:
    """dnspython's rendering of ``response``, whose records all carry ``ttl`` (a cache answer:
    CoreDNS gives them all the item's TTL), in the order they were cached (not shuffled), and
    where its TTL fields sit (None if that cannot be told). dnspython renders the same answer
    again with the TTL's every bit flipped (TTLs change neither names nor compression): the
    bytes that differ, in runs of four, are the TTL fields; checked by setting them to ``ttl``
    in that second rendering and getting the first back."""
    sections = [rrset for section in (response.answer, response.authority, response.additional) for rrset in section]
    for rrset in sections:
        rrset.ttl = ttl
    wire = render(response, want_shuffle=False)
    for rrset in sections:
        rrset.ttl = ttl ^ 0xFFFFFFFF
    probe = render(response, want_shuffle=False)
    for rrset in sections:
        rrset.ttl = ttl
    return wire, _ttl_slots(wire, probe, ttl)


def _ttl_slots(wire: bytes, probe: bytes, ttl: int) -> tuple[int, ...] | None:
    if len(probe) != len(wire):
        return None
    differ = [i for i in range(len(wire)) if wire[i] != probe[i]]
    slots = tuple(differ[::4])
    if len(differ) != 4 * len(slots) or any(differ[4 * k + j] != slot + j for k, slot in enumerate(slots) for j in range(4)):
        return None
    patched, value = bytearray(probe), ttl.to_bytes(4, "big")
    for slot in slots:
        patched[slot:slot + 4] = value
    return slots if slots and bytes(patched) == wire else None


RENDERED_MAX = 50000


@dataclass
class Resolver:
    """Everything that turns a query into a reply."""

    records: ClusterRecords
    settings: Settings
    forwarder: Forwarder | None = None
    cache: AnswerCache = field(default_factory=AnswerCache)
    metrics: DNSMetrics | None = None
    synced: Callable[[], bool] = lambda: True
    clock: Callable[[], float] = time.perf_counter
    rendered: dict[bytes, Rendered] = field(default_factory=dict)
    prerendered: Prerenderer | None = None  # A/AAAA of every Service, rendered when it changes (default: made here)

    def __post_init__(self) -> None:
        self.zone_text = self.settings.zone.to_text()
        if self.prerendered is None:
            self.prerendered = Prerenderer(self.records, self.settings)

    def render_cached(self, query_wire: bytes, query: dns.message.Message, hit: CacheHit) -> bytes:
        """A cache answer to a UDP query, rendered (in the order it was cached: two renderings,
        ``render_with_ttl_slots``) and remembered: until the entry leaves the cache, with its
        TTLs rewritten as it ages, or, if its TTL fields cannot be told, until its next second."""
        answer_wire, slots = render_with_ttl_slots(lambda response, **kw: self.render(response, query, False, **kw), hit.response,
                                                   hit.ttl - hit.age)
        rendered = Rendered(b"", -1, True, hit.fresh_until, ROOT_ZONE, "cache", dns.rcode.to_text(hit.response.rcode()), _qtype(query), hit.kind)
        if slots is not None:
            rendered.expires, rendered.slots, rendered.stored, rendered.ttl, rendered.age = hit.expires, slots, hit.stored, hit.ttl, hit.age
        self.remember(query_wire, answer_wire, rendered)
        return answer_wire

    def remember(self, query_wire: bytes, answer_wire: bytes, rendered: Rendered) -> None:
        if len(self.rendered) >= RENDERED_MAX:
            self.rendered.clear()
        rendered.tail = answer_wire[2:]
        self.rendered[query_wire[2:]] = rendered

    def recall(self, query_wire: bytes) -> Rendered | None:
        """The answer already rendered for these query bytes, if it still holds."""
        hit = self.rendered.get(query_wire[2:])
        if hit is None:
            return None
        if hit.generation >= 0:
            if hit.generation == self.records.generation and hit.synced == self.synced():
                return hit
        else:
            now = self.cache.clock()
            if now < hit.expires:
                if hit.slots:
                    hit.refresh(now)
                return hit
        del self.rendered[query_wire[2:]]
        return None

    # -- the fast path: parse, answer from memory, render; None when the answer needs I/O

    def parse(self, wire: bytes) -> dns.message.Message | bytes | None:
        """The query, or the wire of an error answer to it, or None (drop: not even a header)."""
        try:
            query = dns.message.from_wire(wire)
        except dns.message.ShortHeader:
            return None
        except dns.exception.DNSException:
            return self._error_wire(wire, dns.rcode.FORMERR)
        if query.flags & dns.flags.QR:
            return None
        if query.opcode() != dns.opcode.QUERY:
            return self._error_wire(wire, dns.rcode.NOTIMP, query)
        if len(query.question) != 1:
            return self._error_wire(wire, dns.rcode.FORMERR, query)
        return query

    @staticmethod
    def _error_wire(wire: bytes, rcode: int, query: dns.message.Message | None = None) -> bytes:
        if query is not None:
            response = dns.message.make_response(query, recursion_available=False)
        else:
            response = dns.message.Message(id=int.from_bytes(wire[:2], "big"))
            response.flags = dns.flags.QR
        response.set_rcode(rcode)
        return response.to_wire()

    def local(self, query: dns.message.Message) -> Reply | None:
        question = query.question[0]
        return resolve(question.name, question.rdtype, self.records, self.settings, synced=self.synced())

    @staticmethod
    def render(response: dns.message.Message, query: dns.message.Message, tcp: bool, **kw) -> bytes:
        if tcp:
            limit = TCP_MAX_SIZE
        else:
            limit = max(UDP_MIN_SIZE, query.payload) if query.edns >= 0 else UDP_MIN_SIZE
        return response.to_wire(max_size=limit, prefer_truncation=True, **kw)

    # -- the whole path

    async def handle(self, query: dns.message.Message, reply: Reply | None, tcp: bool) -> Handled:
        if reply is not None:
            response = respond(query, reply)
            if reply.chase is not None:
                await self._chase(query, response, reply, tcp)
            return Handled(self.render(response, query, tcp), self.settings.zone.to_text(), "kubernetes", response.rcode())
        cached = self.cache.lookup(query)
        if cached is not None:
            if self.metrics:
                self.metrics.cache_hit(cached.kind)
            return Handled(self.render(cached.response, query, tcp), ROOT_ZONE, "cache", cached.response.rcode(), cached)
        if self.metrics:
            self.metrics.cache_miss()
        response = await self._forward(query, tcp)
        return Handled(self.render(response, query, tcp), ROOT_ZONE, "forward", response.rcode())

    async def _forward(self, query: dns.message.Message, tcp: bool) -> dns.message.Message:
        got = await self.forwarder.query(query, tcp=tcp) if self.forwarder and self.forwarder.upstreams else None
        if got is None:
            response = dns.message.make_response(query)
            response.set_rcode(dns.rcode.SERVFAIL)
            return response
        answer, _ = got
        cached_for = self.cache.put(query, answer)
        if self.metrics:
            for kind, entries in self.cache.entries.items():
                self.metrics.cache_size(kind, len(entries))
        response = dns.message.make_response(query)  # the question as the client spelled it
        response.flags = (response.flags & ~dns.flags.AA) | (answer.flags & (dns.flags.RA | dns.flags.AD | dns.flags.TC | dns.flags.AA))
        response.set_rcode(answer.rcode())
        response.answer, response.authority, response.additional = answer.answer, answer.authority, answer.additional
        if cached_for is not None:
            response.answer, response.authority, response.additional = (with_ttl(section, cached_for) for section in
                                                                          (answer.answer, answer.authority, answer.additional))
        return response

    async def _chase(self, query: dns.message.Message, response: dns.message.Message, reply: Reply, tcp: bool) -> None:
        """An ExternalName target outside the zone: its records from upstream, after the CNAME."""
        upstream_query = dns.message.make_query(reply.chase, reply.chase_type, use_edns=query.edns if query.edns >= 0 else None)
        upstream_query.flags |= dns.flags.RD
        cached = self.cache.get(upstream_query)
        answer = cached[0] if cached is not None else await self._forward(upstream_query, tcp)
        response.answer += answer.answer
        if answer.flags & dns.flags.TC:
            response.flags |= dns.flags.TC


def _qtype(query: dns.message.Message) -> str:
    return dns.rdatatype.to_text(query.question[0].rdtype)


def family_of(address: tuple) -> str:
    return "2" if ":" in address[0] else "1"


class UDPServer(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver):
        self.resolver = resolver
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: set[asyncio.Task] = set()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        # the two shortcuts first, in as few steps as they can be: each is the whole cost of its answer
        resolver = self.resolver
        started = resolver.clock()
        hit = resolver.recall(data)
        if hit is not None:  # the same question again: the answer rendered last time, this query's id
            self.transport.sendto(data[:2] + hit.tail, addr)
            metrics = resolver.metrics
            if metrics is not None:
                if hit.kind:
                    metrics.cache_hit(hit.kind)
                metrics.observe(hit.zone, "udp", family_of(addr), hit.qtype, hit.rcode, hit.plugin, resolver.clock() - started)
            return
        prerendered = resolver.prerendered
        answered = prerendered.answer(data) if prerendered is not None else None
        if answered is not None:  # a Service's A or AAAA, rendered when the Service last changed
            self.transport.sendto(answered[0], addr)
            metrics = resolver.metrics
            if metrics is not None:
                metrics.observe(resolver.zone_text, "udp", family_of(addr), answered[1].qtype, "NOERROR", "kubernetes", resolver.clock() - started)
            return
        parsed = self.resolver.parse(data)
        if parsed is None:
            return
        if isinstance(parsed, bytes):
            self.transport.sendto(parsed, addr)
            return
        try:
            reply = self.resolver.local(parsed)
        except Exception:  # noqa: BLE001 - one bad question must not stop the server
            log.exception("answering %s", parsed.question[0])
            self.transport.sendto(Resolver._error_wire(data, dns.rcode.SERVFAIL, parsed), addr)
            return
        if reply is not None and reply.chase is None:  # from memory: answer inline, no task
            response = respond(parsed, reply)
            wire = self.resolver.render(response, parsed, False)
            self.transport.sendto(wire, addr)
            zone = self.resolver.settings.zone.to_text()
            self.resolver.remember(data, wire, Rendered(b"", self.resolver.records.generation, self.resolver.synced(), float("inf"), zone,
                                                        "kubernetes", dns.rcode.to_text(reply.rcode), _qtype(parsed)))
            self._observe(parsed, addr, zone, "kubernetes", reply.rcode, started)
            return
        if reply is None:  # outside the zone: a cache hit is answered inline too, only a miss waits for upstream
            cached = self.resolver.cache.lookup(parsed)
            if cached is not None:
                self.transport.sendto(self.resolver.render_cached(data, parsed, cached), addr)
                if self.resolver.metrics is not None:
                    self.resolver.metrics.cache_hit(cached.kind)
                self._observe(parsed, addr, ROOT_ZONE, "cache", cached.response.rcode(), started)
                return
        task = asyncio.create_task(self._slow(data, parsed, reply, addr, started))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _slow(self, data, query, reply, addr, started) -> None:
        try:
            handled = await self.resolver.handle(query, reply, tcp=False)
        except Exception:  # noqa: BLE001
            log.exception("answering %s", query.question[0])
            return
        if handled.wire is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(handled.wire, addr)
            if handled.cache_hit is not None:
                self.resolver.render_cached(data, query, handled.cache_hit)
        self._observe(query, addr, handled.zone, handled.plugin, handled.rcode, started)

    def _observe(self, query, addr, zone, plugin, rcode, started) -> None:
        metrics = self.resolver.metrics
        if metrics is not None:
            metrics.observe(zone, "udp", family_of(addr), dns.rdatatype.to_text(query.question[0].rdtype), dns.rcode.to_text(rcode),
                            plugin, self.resolver.clock() - started)


async def serve_tcp_connection(resolver: Resolver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """RFC 7766: any number of length-prefixed queries on one connection, answered in order."""
    peer = writer.get_extra_info("peername") or ("0.0.0.0", 0)
    try:
        while True:
            try:
                size = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), timeout=10.0), "big")
                wire = await asyncio.wait_for(reader.readexactly(size), timeout=10.0)
            except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
                return
            started = resolver.clock()
            parsed = resolver.parse(wire)
            if parsed is None:
                return
            if isinstance(parsed, bytes):
                out = parsed
            else:
                handled = await resolver.handle(parsed, resolver.local(parsed), tcp=True)
                out = handled.wire or b""
                if resolver.metrics is not None:
                    resolver.metrics.observe(handled.zone, "tcp", family_of(peer), dns.rdatatype.to_text(parsed.question[0].rdtype),
                                             dns.rcode.to_text(handled.rcode), handled.plugin, resolver.clock() - started)
            writer.write(len(out).to_bytes(2, "big") + out)
            await writer.drain()
    except Exception:  # noqa: BLE001 - one connection's failure is its own
        log.exception("TCP connection from %s", peer)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def start_dns(resolver: Resolver, address: str, port: int) -> tuple[asyncio.DatagramTransport, asyncio.AbstractServer]:
    """UDP and TCP listeners on ``address``:``port`` (port 0: one free port for both)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    tcp = await asyncio.start_server(lambda r, w: serve_tcp_connection(resolver, r, w), address, port, family=family, reuse_address=True)
    port = tcp.sockets[0].getsockname()[1]
    udp, _ = await loop.create_datagram_endpoint(lambda: UDPServer(resolver), local_addr=(address, port), family=family)
    return udp, tcp


# -- HTTP: /health, /ready, /metrics ---------------------------------------------------------------


def http_app(resolver: Resolver):
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def health(request):
        return web.Response(text="OK")

    async def ready(request):
        if resolver.synced():
            return web.Response(text="OK")
        return web.Response(status=503, text="kubernetes")

    async def metrics(request):
        registry = resolver.metrics.registry if resolver.metrics else None
        body = generate_latest(registry) if registry else b""
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    return app


# -- informers ---------------------------------------------------------------------------------------


POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"  # CoreDNS's podListFunc/podWatchFunc


def watch_cluster(client, records: ClusterRecords, *, pods: bool = False) -> list:
    """Informers on Services, EndpointSlices and Namespaces (every namespace) feeding ``records``
    (CoreDNS's controller.go; unlike kube-proxy's, the slice informer keeps headless Services'
    slices), and with ``pods`` (``pods verified``) one on Pods that are not done, as CoreDNS
    starts only in that mode. Returns them unstarted; ready means all of them synced."""
    from kubesvc.client.informer import Informer
    from kubesvc.client.rest import ENDPOINTSLICES, NAMESPACES, PODS, SERVICES

    services = Informer(client, SERVICES)
    services.add_event_handler(records.set_service, lambda old, new: records.set_service(new), records.delete_service)
    slices = Informer(client, ENDPOINTSLICES)
    slices.add_event_handler(records.set_slice, lambda old, new: records.set_slice(new), records.delete_slice)
    namespaces = Informer(client, NAMESPACES)
    namespaces.add_event_handler(records.set_namespace, lambda old, new: None, records.delete_namespace)
    if not pods:
        return [services, slices, namespaces]
    pod_informer = Informer(client, PODS, field_selector=POD_FIELD_SELECTOR)
    pod_informer.add_event_handler(records.set_pod, lambda old, new: records.set_pod(new), records.delete_pod)
    return [services, slices, namespaces, pod_informer]
