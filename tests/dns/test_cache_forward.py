"""The forwarded-name cache (CoreDNS's ``cache 30``) and the forwarder's upstream parsing
(``forward . /etc/resolv.conf``), with an injected clock. Expected TTLs are CoreDNS's rules
written out: capped at 30 s, at least 5 s, denial from the SOA, SERVFAIL 5 s."""

from __future__ import annotations

import dns.message
import dns.rcode
import dns.rrset
import pytest

from kubesvc.dns.cache import DENIAL, SUCCESS, AnswerCache
from kubesvc.dns.forward import BadUpstream, nameservers, parse_upstream


class Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def answer(name="a.example.", ttl=60, rcode=dns.rcode.NOERROR, records=("192.0.2.1",), soa_ttl=None, soa_min=None):
    query = dns.message.make_query(name, "A")
    response = dns.message.make_response(query)
    response.set_rcode(rcode)
    if records:
        response.answer.append(dns.rrset.from_text(name, ttl, "IN", "A", *records))
    if soa_ttl is not None:
        response.authority.append(dns.rrset.from_text("example.", soa_ttl, "IN", "SOA", f"ns.example. h.example. 1 2 3 4 {soa_min}"))
    return query, response


@pytest.mark.parametrize("upstream_ttl, cached_ttl", [(60, 30), (20, 20), (1, 5)], ids=["capped-30", "kept", "raised-to-5"])
def test_success_ttl(upstream_ttl, cached_ttl):
    cache = AnswerCache(clock=(clock := Clock()))
    query, response = answer(ttl=upstream_ttl)
    assert cache.put(query, response) == cached_ttl
    hit, kind = cache.get(dns.message.make_query("A.EXAMPLE.", "A"))
    assert kind == SUCCESS and hit.answer[0].ttl == cached_ttl and hit.question[0].name.to_text() == "A.EXAMPLE."
    clock.now += 3
    assert cache.get(query)[0].answer[0].ttl == cached_ttl - 3
    clock.now += cached_ttl
    assert cache.get(query) is None


@pytest.mark.parametrize("rcode, records, soa, ttl", [(dns.rcode.NXDOMAIN, (), (3600, 10), 10), (dns.rcode.NOERROR, (), (3600, 900), 30),
                                                      (dns.rcode.SERVFAIL, (), None, 5)], ids=["nxdomain-soa-min", "nodata-capped", "servfail-5s"])
def test_denial_ttl(rcode, records, soa, ttl):
    cache = AnswerCache(clock=Clock())
    query, response = answer(rcode=rcode, records=records, soa_ttl=soa and soa[0], soa_min=soa and soa[1])
    assert cache.put(query, response) == ttl
    assert cache.get(query)[1] == DENIAL


def test_refused_and_truncated_are_not_cached():
    cache = AnswerCache(clock=Clock())
    query, response = answer(rcode=dns.rcode.REFUSED, records=())
    assert cache.put(query, response) is None
    query, response = answer()
    response.flags |= dns.flags.TC
    assert cache.put(query, response) is None and len(cache) == 0


def test_capacity_evicts():
    cache = AnswerCache(capacity=3, clock=Clock())
    for i in range(5):
        cache.put(*answer(name=f"n{i}.example."))
    assert len(cache) == 3


@pytest.mark.parametrize("text, parsed", [("10.0.0.1", ("10.0.0.1", 53)), ("10.0.0.1:5353", ("10.0.0.1", 5353)),
                                          ("fd00::1", ("fd00::1", 53)), ("[fd00::1]:5353", ("fd00::1", 5353)), ("dns://1.1.1.1", ("1.1.1.1", 53))])
def test_parse_upstream(text, parsed):
    assert parse_upstream(text) == parsed


@pytest.mark.parametrize("text", ["example.com", "10.0.0.1:0", "10.0.0.1:x", "[fd00::1]:70000"])
def test_bad_upstream(text):
    with pytest.raises(BadUpstream):
        parse_upstream(text)


def test_nameservers_of_resolv_conf():
    text = "# generated\nsearch lan\nnameserver 192.168.1.1\n  nameserver   fd00::53\noptions ndots:2\nnameserver 192.168.1.2\n"
    assert nameservers(text) == ["192.168.1.1", "fd00::53", "192.168.1.2"]
