"""Answers rendered before anyone asks: the A and AAAA records of every Service's name.

What Pods ask the cluster DNS most is the address of a Service, ``<svc>.<ns>.svc.<zone>`` A
(and AAAA: glibc asks both), and a name is often asked for the first time: a new Pod, a new
Service, a cache that expired. The ordinary path (``answer`` through dnspython: parse the
query, build the reply, render it) costs a few hundred microseconds for each; kube-dns's
dnsmasq answers the same from a hash table. So, as CoreDNS builds its per-object index when the
informer delivers the object, the answers are built when a Service or its EndpointSlices
change, not when they are asked:

- **What**: for each ClusterIP or headless Service, its name with type A and type AAAA, when
  the answer is NOERROR: the addresses, or NODATA (an IPv4-only Service asked for AAAA, which
  glibc asks beside every A). A NODATA answer's SOA carries the serial, the time of the last
  change of anything (CoreDNS's ``Modified``): its four bytes are written in as it is sent
  (where they sit, dnspython tells: see ``_serial_at``). NXDOMAIN is not prerendered.
- **How**: by the ordinary path itself (``answer.resolve`` and ``answer.respond``, rendered by
  dnspython), for a canonical query: the lowercase name, RD clear; rendered once without EDNS
  and once with the OPT record ``make_response`` gives an answer to a query with EDNS. What
  follows the question in that rendering does not depend on how a later query spells the
  name: the answer's owner is dnspython's compression pointer to the question (offset 12),
  and A/AAAA records hold addresses only. The response to
  a query is then its own id, the rendering's flags and counts with the query's RD bit
  (dnspython's ``make_response`` copies RD and nothing else), the query's own question bytes
  (its spelling: CoreDNS echoes the question as asked), and the rendering's rest.
- **Which queries**: exactly the shape the rendering was made for, checked on the query's
  bytes: QR clear, opcode QUERY, one question, no answer or authority records, and either no
  additional record or one OPT record (root owner) without options (an option can change the
  answer: dnspython pads a reply to a padded query), and a question (name, type, class IN)
  that, lowercased (DNS compares names without case), is a key. Anything else takes the
  ordinary path. Answers over 512 bytes are not prerendered (each client's buffer size decides
  how they are truncated).
- **The lookup** is the whole cost of a first ask, so it is a handful of operations on the
  query's bytes: the question ends four bytes after the name's first zero byte (a label's
  length is never 0, and a label holding a zero byte cannot make a key match: the name's bytes
  before it would have to be a whole name already); the question's bytes lowercased are the
  key (``bytes.lower`` changes A-Z only, and a key's type and class bytes, 0x00, 0x01 and
  0x1C, are neither such letters nor what one becomes, so only the name's case is folded). The
  two header variants (RD clear and set) are rendered once, shared by every answer with the
  same flags and counts.
- **When**: a change of a Service or of one of its slices drops that Service's answers at
  once (never a stale answer) and queues the Service; the queue is worked off on the event
  loop in slices of a few milliseconds, so an informer's initial list of 10,000 Services is
  not held up by rendering them; until its turn comes, a name takes the ordinary path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset

from kubesvc.dns.answer import Settings, resolve, respond
from kubesvc.dns.records import CLUSTER_IP, HEADLESS, ClusterRecords

log = logging.getLogger("kubesvc.dns")

UDP_MIN_SIZE = 512
ONE_QUESTION = b"\x00\x01\x00\x00\x00\x00\x00\x00"  # QDCOUNT 1, ANCOUNT, NSCOUNT, ARCOUNT 0
ONE_QUESTION_EDNS = b"\x00\x01\x00\x00\x00\x00\x00\x01"  # ... and one additional record: the OPT
OPT_TYPE = b"\x00\x29"
CLASS_IN = b"\x00\x01"
RD = 0x01  # the RD bit in the header's third byte
QR_OPCODE = 0xF8  # QR and the opcode in the header's third byte
OPT_ROOT = b"\x00\x00\x29"  # an OPT record's owner (the root) and type
NO_OPTIONS = b"\x00\x00"  # RDLENGTH 0
DRAIN_SLICE = 0.005  # seconds of rendering per turn of the event loop


@dataclass(frozen=True, slots=True)
class Prerendered:
    heads: tuple[bytes, bytes]  # the rendering's header after the id (flags and counts), with RD clear and with RD set
    tail: bytes  # what follows the question
    heads_edns: tuple[bytes, bytes]  # the same for a query carrying an OPT record
    tail_edns: bytes
    qtype: str  # the type's name, for the metrics
    serial_at: int = -1  # NODATA: where the SOA serial sits in ``tail`` (and ``tail_edns``: the OPT follows it); -1: none


@dataclass
class Prerenderer:
    records: ClusterRecords
    settings: Settings
    answers: dict[bytes, Prerendered] = field(default_factory=dict)  # the question's wire (name lowercase, type, class IN) -> answer
    keys_of: dict[tuple[str, str], list[bytes]] = field(default_factory=dict)  # Service -> its keys in ``answers``
    pending: dict[tuple[str, str], None] = field(default_factory=dict)  # Services to render, in order
    heads: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)  # a header (RD clear) -> it with RD clear and set, shared
    _scheduled: bool = False

    def __post_init__(self) -> None:
        self.records.listeners.append(self.changed)
        for key in self.records.services:
            self.changed(key)

    # -- the informer side

    def changed(self, service: tuple[str, str]) -> None:
        """``service`` (namespace, name; lowercase) or its slices changed: its answers go now,
        and it is queued to be rendered again."""
        for key in self.keys_of.pop(service, ()):
            self.answers.pop(key, None)
        self.pending[service] = None
        if not self._scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (set-up, tests): ``drain()`` renders
                return
            self._scheduled = True
            loop.call_soon(self._drain_slice)

    def _drain_slice(self) -> None:
        self._scheduled = False
        self.drain(time.perf_counter() + DRAIN_SLICE)
        if self.pending:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain_slice)

    def drain(self, until: float = float("inf")) -> None:
        """Render queued Services until the queue is empty or the clock passes ``until``."""
        while self.pending and time.perf_counter() < until:
            service = next(iter(self.pending))
            del self.pending[service]
            try:
                self._render(service)
            except Exception:  # noqa: BLE001 - that name takes the ordinary path; the others are still rendered
                log.exception("prerendering the answers of Service %s/%s", *service)

    def _render(self, service: tuple[str, str]) -> None:
        record = self.records.services.get(service)
        if record is None or record.kind not in (CLUSTER_IP, HEADLESS):
            return
        qname = dns.name.Name((record.name.lower().encode(), record.namespace.lower().encode(), b"svc", *self.settings.zone.labels))
        name_wire = qname.to_wire()
        keys = []
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            rendered = self._rendered(qname, name_wire, rdtype)
            if rendered is not None:
                key = name_wire + rdtype.to_bytes(2, "big") + CLASS_IN
                self.answers[key] = rendered
                keys.append(key)
        if keys:
            self.keys_of[service] = keys

    def _rendered(self, qname: dns.name.Name, name_wire: bytes, rdtype: int) -> Prerendered | None:
        reply = resolve(qname, rdtype, self.records, self.settings)
        if reply is None or reply.rcode != dns.rcode.NOERROR or reply.chase is not None:
            return None
        nodata = not reply.answer
        question = name_wire + rdtype.to_bytes(2, "big") + CLASS_IN
        query = dns.message.make_query(qname, rdtype, use_edns=None)
        query.flags = 0
        response = respond(query, reply)
        parts = []
        for edns in (False, True):
            if edns:  # the OPT record make_response gives the answer to a query with EDNS (tests hold the two paths equal)
                response.use_edns(0, 0, 8192, pad=0)
            wire = response.to_wire()
            if len(wire) > UDP_MIN_SIZE or wire[12:12 + len(question)] != question:
                return None
            parts.append((wire[2:12], wire[12 + len(question):]))
        (header, tail), (header_edns, tail_edns) = parts
        serial_at = -1
        if nodata:
            serial_at = self._serial_at(response, wire, len(question))
            if serial_at < 0:
                return None
        return Prerendered(self._heads(header), tail, self._heads(header_edns), tail_edns, dns.rdatatype.to_text(rdtype), serial_at)

    def _heads(self, header: bytes) -> tuple[bytes, bytes]:
        """``header`` (RD clear) and it with the query's RD bit set, as ``answer`` picks them by
        that bit: one pair for every answer with the same flags and counts."""
        heads = self.heads.get(header)
        if heads is None:
            heads = self.heads[header] = (header, bytes((header[0] | RD,)) + header[1:])
        return heads

    def _serial_at(self, response: dns.message.Message, wire: bytes, question_size: int) -> int:
        """Where the serial of a NODATA answer's SOA sits after the question (-1: not found).
        The serial is the time of the last change of anything (CoreDNS's ``Modified``), so
        it is written in when the answer is sent; where, dnspython tells: rendered (``wire``,
        the last rendering of ``response``) with a serial that differs from it in every byte,
        the answer differs in those four bytes only."""
        (soa,) = response.authority
        if soa.rdtype != dns.rdatatype.SOA or len(soa) != 1:
            return -1
        probed = dns.rrset.RRset(soa.name, soa.rdclass, soa.rdtype)
        probed.add(soa[0].replace(serial=soa[0].serial ^ 0xFFFFFFFF), soa.ttl)
        response.authority = [probed]
        probe = response.to_wire()
        response.authority = [soa]
        differ = [i for i in range(min(len(wire), len(probe))) if wire[i] != probe[i]]
        if len(wire) != len(probe) or len(differ) != 4 or differ[3] - differ[0] != 3:
            return -1
        return differ[0] - 12 - question_size

    # -- the query side

    def answer(self, query: bytes) -> tuple[bytes, Prerendered] | None:
        """The response to ``query`` (its wire) if it is a question prerendered, else None."""
        question_end = query.find(0, 12) + 5  # the name's root label, then type and class (no zero byte: 4, no key)
        found = self.answers.get(query[12:question_end].lower())
        if found is None or query[2] & QR_OPCODE:
            return None
        size = len(query)
        if size == question_end and query[4:12] == ONE_QUESTION:
            heads, tail = found.heads, found.tail
        elif (size == question_end + 11 and query[4:12] == ONE_QUESTION_EDNS and query[question_end:question_end + 3] == OPT_ROOT
              and query[question_end + 9:] == NO_OPTIONS):
            heads, tail = found.heads_edns, found.tail_edns  # an OPT record with no options
        else:
            return None
        if found.serial_at >= 0:  # NODATA: the SOA serial as of now
            tail = b"".join((tail[:found.serial_at], (self.records.serial & 0xFFFFFFFF).to_bytes(4, "big"), tail[found.serial_at + 4:]))
        return b"".join((query[:2], heads[query[2] & RD], query[12:question_end], tail)), found
