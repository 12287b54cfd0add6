"""Forwarding names outside the cluster domain, as CoreDNS's ``forward`` plugin in k3s's
Corefile (``forward . /etc/resolv.conf``; plugin/forward/README.md).

- **Upstreams**: the ``nameserver`` lines of a resolv.conf (the DNS Pod runs with
  ``dnsPolicy: Default``, so its own /etc/resolv.conf is the node's), or ``--upstream``
  flags (``IP``, ``IP:port``, ``[IPv6]:port``); at most 15, as CoreDNS.
- **Policy** ``random``: each query tries the upstreams in a random order, healthy ones
  first; an upstream is unhealthy after ``max_fails`` (2) failures in a row and healthy again
  after its next success. When every upstream is unhealthy they are all still tried (CoreDNS
  tries a random one unless ``failfast_all_unhealthy_upstreams``).
- **Transport**: the client's: a query that came over UDP goes over UDP (a truncated upstream
  answer is handed back truncated, and the client retries over TCP, which is forwarded over
  TCP). ``read_timeout`` 2 s per try.
- The query is sent as the client sent it (id, flags, EDNS); the answer comes back as the
  upstream gave it. No upstream answering is SERVFAIL (the caller's).
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
from dataclasses import dataclass, field

import dns.asyncquery
import dns.exception
import dns.message

MAX_UPSTREAMS = 15
READ_TIMEOUT = 2.0
MAX_FAILS = 2


class BadUpstream(ValueError):
    pass


def parse_upstream(text: str) -> tuple[str, int]:
    """``10.0.0.1`` / ``10.0.0.1:5353`` / ``fd00::1`` / ``[fd00::1]:5353`` -> (host, port)."""
    text = text.strip().removeprefix("dns://")
    host, port = text, 53
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            port = _port(text, rest.removeprefix(":"))
    elif text.count(":") == 1:
        host, rest = text.split(":")
        port = _port(text, rest)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise BadUpstream(f"upstream {text!r}: not an IP address") from None
    return host, port


def _port(text: str, value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise BadUpstream(f"upstream {text!r}: bad port")
    return int(value)


def nameservers(resolv_conf: str) -> list[str]:
    """The ``nameserver`` addresses of a resolv.conf text, in order (comments skipped)."""
    found = []
    for line in resolv_conf.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            found.append(fields[1])
    return found


@dataclass
class Upstream:
    host: str
    port: int
    fails: int = 0

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class Forwarder:
    upstreams: list[Upstream] = field(default_factory=list)
    timeout: float = READ_TIMEOUT
    max_fails: int = MAX_FAILS

    @classmethod
    def to(cls, addresses: list[str], **kwargs) -> Forwarder:
        return cls([Upstream(*parse_upstream(a)) for a in addresses[:MAX_UPSTREAMS]], **kwargs)

    def order(self) -> list[Upstream]:
        shuffled = random.sample(self.upstreams, len(self.upstreams))
        return sorted(shuffled, key=lambda u: u.fails >= self.max_fails)

    async def query(self, query: dns.message.Message, *, tcp: bool = False) -> tuple[dns.message.Message, Upstream] | None:
        """The first upstream answer (and who gave it), or None when none answered."""
        for upstream in self.order():
            try:
                if tcp:
                    answer = await dns.asyncquery.tcp(query, upstream.host, timeout=self.timeout, port=upstream.port)
                else:
                    answer = await dns.asyncquery.udp(query, upstream.host, timeout=self.timeout, port=upstream.port,
                                                      ignore_unexpected=True)
            except (dns.exception.DNSException, OSError, EOFError, asyncio.TimeoutError):
                upstream.fails += 1
                continue
            upstream.fails = 0
            return answer, upstream
        return None
