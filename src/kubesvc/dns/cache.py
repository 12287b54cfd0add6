"""The answer cache for forwarded names, as CoreDNS's ``cache 30`` in k3s's Corefile
(plugin/cache/README.md).

- An answer is cached under its question (name lowercased, type, class) and the DO bit.
- How long: the smallest TTL of its records (answer and authority; for a denial, NXDOMAIN or
  NODATA, the SOA's), capped at 30 s (``cache 30``: the cap for both success and denial) and
  raised to at least 5 s (the default ``MINTTL`` of both); SERVFAIL is cached 5 s (the
  default ``servfail`` duration). Other failures (REFUSED, FORMERR, ...) are not cached.
- Capacity: 9984 entries per kind (success, denial), CoreDNS's default (256 shards of 39); a
  full cache evicts a random entry, as CoreDNS does.
- Every record of a cached answer carries the cache's TTL, less the time it spent in the
  cache (CoreDNS sets them all to the item's remaining TTL, and caps the TTLs of the answer
  that filled the cache the same way, "to avoid jarring TTL experience 1799 -> 8"); a hit is
  answered under the question as the client asked it (its id and spelling); truncated answers
  are not cached.

Hits count as ``success`` or ``denial`` (``coredns_cache_hits_total{type}``), lookups that find
nothing as misses. The clock is injected.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

SUCCESS = "success"
DENIAL = "denial"
MAX_TTL = 30
MIN_TTL = 5
SERVFAIL_TTL = 5
CAPACITY = 9984

Key = tuple


def cache_key(query: dns.message.Message) -> Key:
    """The question (a dnspython Name hashes and compares case-insensitively) and the DO bit."""
    question = query.question[0]
    return (question.name, question.rdtype, question.rdclass, bool(query.ednsflags & dns.flags.DO))


def classify(response: dns.message.Message) -> str | None:
    """``success``, ``denial`` or None (not cacheable)."""
    rcode = response.rcode()
    if response.flags & dns.flags.TC:
        return None
    if rcode == dns.rcode.NXDOMAIN or (rcode == dns.rcode.NOERROR and not response.answer):
        return DENIAL
    if rcode == dns.rcode.NOERROR:
        return SUCCESS
    if rcode == dns.rcode.SERVFAIL:
        return DENIAL
    return None


def cache_ttl(response: dns.message.Message, kind: str) -> int:
    if response.rcode() == dns.rcode.SERVFAIL:
        return SERVFAIL_TTL
    if kind == DENIAL:
        soas = [rrset for rrset in response.authority if rrset.rdtype == dns.rdatatype.SOA]
        ttls = [min(rrset.ttl, rrset[0].minimum) for rrset in soas]
    else:
        ttls = [rrset.ttl for rrset in (*response.answer, *response.authority)]
    return max(MIN_TTL, min([MAX_TTL, *ttls]))


@dataclass
class Entry:
    response: dns.message.Message
    stored: float
    ttl: int
    kind: str


@dataclass
class CacheHit:
    response: dns.message.Message
    kind: str
    stored: float  # when the answer was cached (this cache's clock)
    ttl: int  # how long it is cached for
    age: int  # whole seconds since: every TTL of ``response`` is ``ttl - age``

    @property
    def fresh_until(self) -> float:
        """Until when ``response`` stays the same: the next whole second of its age."""
        return self.stored + self.age + 1

    @property
    def expires(self) -> float:
        return self.stored + self.ttl


class AnswerCache:
    def __init__(self, capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic):
        self.capacity = capacity
        self.clock = clock
        self.entries: dict[str, dict[Key, Entry]] = {SUCCESS: {}, DENIAL: {}}

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.entries.values())

    def get(self, query: dns.message.Message) -> tuple[dns.message.Message, str] | None:
        """The cached answer to ``query`` and its kind, or None."""
        found = self.lookup(query)
        return (found.response, found.kind) if found else None

    def lookup(self, query: dns.message.Message) -> CacheHit | None:
        """The cached answer to ``query`` (its TTLs what is left of the cache's), or None."""
        key = cache_key(query)
        for kind, entries in self.entries.items():
            entry = entries.get(key)
            if entry is None:
                continue
            age = int(self.clock() - entry.stored)
            if age >= entry.ttl:
                del entries[key]
                return None
            return CacheHit(self._answer(query, entry, age), kind, entry.stored, entry.ttl, age)
        return None

    def put(self, query: dns.message.Message, response: dns.message.Message) -> int | None:
        """Cache ``response`` if it may be; the TTL it is cached for, or None."""
        kind = classify(response)
        if kind is None:
            return None
        entries = self.entries[kind]
        key = cache_key(query)
        if key not in entries and len(entries) >= self.capacity:
            del entries[random.choice(list(entries))]
        ttl = cache_ttl(response, kind)
        entries[key] = Entry(response, self.clock(), ttl, kind)
        return ttl

    @staticmethod
    def _answer(query: dns.message.Message, entry: Entry, age: int) -> dns.message.Message:
        cached = entry.response
        reply = dns.message.make_response(query)
        reply.flags = (reply.flags & ~(dns.flags.AA | dns.flags.RA | dns.flags.AD)) | (cached.flags & (dns.flags.RA | dns.flags.AD))
        reply.set_rcode(cached.rcode())
        for section, source in ((reply.answer, cached.answer), (reply.authority, cached.authority), (reply.additional, cached.additional)):
            section.extend(with_ttl(source, entry.ttl - age))
        return reply


def with_ttl(rrsets: list, ttl: int) -> list:
    """Copies of ``rrsets`` carrying TTL ``ttl`` (CoreDNS's filterRRSlice sets every one)."""
    copies = []
    for rrset in rrsets:
        copy = rrset.copy()
        copy.ttl = max(0, ttl)
        copies.append(copy)
    return copies
