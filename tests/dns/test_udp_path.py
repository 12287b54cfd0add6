"""The UDP handler's shortcuts, driven in-process with a transport that keeps what is sent:
an answer rendered for the same query bytes is sent again (with the new query's id) only while
the records are unchanged; a forwarded name found in the answer cache is answered without
waiting for anything; the metrics count each of them as CoreDNS's would."""

from __future__ import annotations

import dns.message
import dns.rcode
import dns.rrset

from kubesvc.dns.answer import Settings
from kubesvc.dns.cache import AnswerCache
from kubesvc.dns.metrics import DNSMetrics
from kubesvc.dns.records import load
from kubesvc.dns.server import Resolver, UDPServer
from kubesvc.util.clock import FakeClock

CLIENT = ("10.244.0.9", 40000)


class Transport:
    def __init__(self):
        self.sent: list[bytes] = []

    def sendto(self, data, addr):
        self.sent.append(data)

    def is_closing(self):
        return False


def server(records, cache=None):
    resolver = Resolver(records, Settings.for_domain("cluster.local"), cache=cache or AnswerCache(), metrics=DNSMetrics("dns://:53"))
    udp = UDPServer(resolver)
    udp.transport = Transport()
    return udp


def service(ip):
    return {"metadata": {"namespace": "default", "name": "web"}, "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"port": 80}]}}


def ask(udp, name="web.default.svc.cluster.local.", qid=1) -> dns.message.Message:
    query = dns.message.make_query(name, "A", id=qid)
    udp.datagram_received(query.to_wire(), CLIENT)
    answer = dns.message.from_wire(udp.transport.sent[-1])
    assert answer.id == qid
    return answer


def addresses(answer):
    return [rr.to_text() for rrset in answer.answer for rr in rrset]


def test_repeated_question_is_answered_again_until_the_records_change():
    records = load([service("10.96.0.20")], namespaces=["default"])
    udp = server(records)
    assert addresses(ask(udp, qid=1)) == ["10.96.0.20"]
    assert addresses(ask(udp, qid=2)) == ["10.96.0.20"]
    assert len(udp.resolver.rendered) == 1
    records.set_service(service("10.96.0.21"))
    assert addresses(ask(udp, qid=3)) == ["10.96.0.21"]
    records.delete_service(service("10.96.0.21"))
    assert ask(udp, qid=4).rcode() == dns.rcode.NXDOMAIN
    requests = udp.resolver.metrics.requests[("cluster.local.", "udp", "1", "A")]
    assert requests == 4


def test_a_cached_forwarded_name_is_answered_inline():
    cache = AnswerCache()
    query = dns.message.make_query("outside.example.", "A")
    response = dns.message.make_response(query)
    response.answer.append(dns.rrset.from_text("outside.example.", 60, "IN", "A", "192.0.2.7"))
    cache.put(query, response)
    udp = server(load([]), cache)
    answer = ask(udp, "outside.example.", qid=7)  # no task, no upstream: answered before datagram_received returned
    assert addresses(answer) == ["192.0.2.7"] and answer.answer[0].ttl == 30
    assert not udp.pending
    ask(udp, "outside.example.", qid=8)  # the rendered answer this time
    assert udp.resolver.metrics.cache_hits["success"] == 2


def test_a_cached_answer_sent_again_counts_its_ttls_down_and_leaves_with_the_entry():
    # CoreDNS's cache gives every record of a hit the item's TTL less its age; an answer sent
    # again from its rendered bytes must say the same as one rendered afresh, to the end
    clock = FakeClock()  # monotonic() starts at 1000.0
    cache = AnswerCache(clock=clock.monotonic)
    query = dns.message.make_query("outside.example.", "MX", use_edns=0)
    response = dns.message.make_response(query)
    response.answer.append(dns.rrset.from_text("outside.example.", 60, "IN", "MX", "10 mail.outside.example.", "20 mx2.other.example."))
    response.authority.append(dns.rrset.from_text("outside.example.", 45, "IN", "NS", "ns1.outside.example."))
    response.additional.append(dns.rrset.from_text("mail.outside.example.", 50, "IN", "A", "192.0.2.25"))
    cache.put(query, response)  # cached for 30 s (cache 30)
    udp = server(load([]), cache)
    seen = []
    for elapsed in (0, 0.5, 1.2, 7.9, 29.5):
        clock.advance(1000.0 + elapsed - clock.monotonic())
        query.id = len(seen)
        udp.datagram_received(query.to_wire(), CLIENT)
        answer = dns.message.from_wire(udp.transport.sent[-1])
        assert answer.id == query.id
        seen.append(sorted({rrset.ttl for section in (answer.answer, answer.authority, answer.additional) for rrset in section}))
        assert sorted(rr.to_text() for rr in answer.answer[0]) == ["10 mail.outside.example.", "20 mx2.other.example."]
    assert seen == [[30], [30], [29], [23], [1]]
    assert udp.resolver.metrics.cache_hits["success"] == 5
    (rendered,) = udp.resolver.rendered.values()  # one rendering, sent five times, its 4 TTL fields (2 MX, NS, A) rewritten
    assert len(rendered.slots) == 4
    clock.advance(1030.0 - clock.monotonic())  # gone from the cache: asked upstream (there is none here: SERVFAIL)
    assert udp.resolver.recall(query.to_wire()) is None
