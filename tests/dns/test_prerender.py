"""Prerendered answers (``kubesvc.dns.prerender``) say exactly what the ordinary path says.

Each query below is answered twice: by the prerendered bytes, and by the ordinary path (parsed
by dnspython, ``answer.resolve``, ``answer.respond``, rendered by dnspython); the two must be
the same message: id, flags, the question as the client spelled it, every section, EDNS.
Queries of any other shape, and names whose answer is not a positive A/AAAA of a Service, are
not prerendered; a change of a Service or its slices drops its answers at once.
"""

from __future__ import annotations

import random

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest

from kubesvc.dns.answer import Settings, resolve, respond
from kubesvc.dns.prerender import Prerenderer
from kubesvc.dns.records import load

SETTINGS = Settings.for_domain("cluster.local")


def service(name, cluster_ips=(), *, headless=False, external=None, publish_not_ready=False):
    spec = {"ports": [{"name": "http", "protocol": "TCP", "port": 80}], "publishNotReadyAddresses": publish_not_ready}
    if external:
        spec |= {"type": "ExternalName", "externalName": external}
    elif headless:
        spec |= {"clusterIP": "None", "clusterIPs": ["None"]}
    else:
        spec |= {"clusterIP": cluster_ips[0], "clusterIPs": list(cluster_ips)}
    return {"metadata": {"namespace": "testns", "name": name}, "spec": spec}


def endpoint_slice(name, service_name, addresses):
    return {"metadata": {"namespace": "testns", "name": name, "labels": {"kubernetes.io/service-name": service_name}},
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a, ready in addresses]}


def records():
    return load([service("web", ["10.96.0.20"]), service("six", ["fd00:96::20"]), service("dual", ["10.96.0.30", "fd00:96::30"]),
                 service("hdls", headless=True), service("pub", headless=True, publish_not_ready=True), service("ext", external="example.org"),
                 service("empty", headless=True)],
                [endpoint_slice("hdls-a", "hdls", [("10.244.0.5", True), ("10.244.0.6", True), ("fd00:244::7", True), ("10.244.0.8", False)]),
                 endpoint_slice("pub-a", "pub", [("10.244.1.5", False)]), endpoint_slice("empty-a", "empty", [("10.244.2.5", False)])],
                namespaces=["testns"])


def prerenderer(recs=None):
    found = Prerenderer(recs or records(), SETTINGS)
    found.drain()
    return found


def ordinary(recs, wire: bytes) -> dns.message.Message:
    query = dns.message.from_wire(wire)
    question = query.question[0]
    return respond(query, resolve(question.name, question.rdtype, recs, SETTINGS))


def records_of(rrsets) -> list[str]:
    """One line per record, sorted (dnspython shuffles an RRset's records when it renders)."""
    return sorted(line for rrset in rrsets for line in rrset.to_text().splitlines())


def same(got: bytes, expected: dns.message.Message) -> None:
    answer = dns.message.from_wire(got)
    assert (answer.id, answer.flags, answer.ednsflags, answer.edns, answer.payload, answer.options) == \
           (expected.id, expected.flags, expected.ednsflags, expected.edns, expected.payload, expected.options)
    assert [q.to_text() for q in answer.question] == [q.to_text() for q in expected.question]  # the client's spelling
    for section in ("answer", "authority", "additional"):  # an SOA's text carries its serial
        assert records_of(getattr(answer, section)) == records_of(getattr(expected, section))
    assert answer.rcode() == expected.rcode() == dns.rcode.NOERROR


def query(name, rdtype="A", *, qid=4242, flags=dns.flags.RD, **edns) -> bytes:
    made = dns.message.make_query(name, rdtype, id=qid, **edns)
    made.flags = flags
    return made.to_wire()


ANSWERED = [
    ("web.testns.svc.cluster.local.", "A"),
    ("WeB.TestNS.Svc.CLUSTER.local.", "A"),  # 0x20: the question comes back as spelled
    ("six.testns.svc.cluster.local.", "AAAA"),
    ("dual.testns.svc.cluster.local.", "A"),
    ("dual.testns.svc.cluster.local.", "AAAA"),
    ("hdls.testns.svc.cluster.local.", "A"),  # every ready endpoint
    ("hdls.testns.svc.cluster.local.", "AAAA"),
    ("pub.testns.svc.cluster.local.", "A"),  # publishNotReadyAddresses
    ("web.testns.svc.cluster.local.", "AAAA"),  # NODATA, the zone's SOA in authority
    ("Six.TESTNS.svc.Cluster.Local.", "A"),  # NODATA: the SOA's owner is the zone as spelled
    ("pub.testns.svc.cluster.local.", "AAAA"),
]
SHAPES = {
    "rd": {},
    "no-rd": {"flags": 0},
    "ad-cd-bits": {"flags": dns.flags.RD | dns.flags.AD | dns.flags.CD},
    "edns": {"use_edns": 0, "payload": 1232},
    "edns-small-payload-do": {"use_edns": 0, "payload": 512, "want_dnssec": True},
}


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("name, rdtype", ANSWERED, ids=[f"{n.split('.')[0]}-{t}" for n, t in ANSWERED])
def test_prerendered_is_what_the_ordinary_path_answers(name, rdtype, shape):
    recs = records()
    pre = prerenderer(recs)
    wire = query(name, rdtype, **SHAPES[shape])
    got = pre.answer(wire)
    assert got is not None
    same(got[0], ordinary(recs, wire))
    assert got[1].qtype == rdtype


NOT_PRERENDERED = {
    "no-ready-endpoint-nxdomain": query("empty.testns.svc.cluster.local.", "A"),
    "unknown-service": query("nope.testns.svc.cluster.local.", "A"),
    "external-name": query("ext.testns.svc.cluster.local.", "A"),
    "srv": query("web.testns.svc.cluster.local.", "SRV"),
    "endpoint-name": query("10-244-0-5.hdls.testns.svc.cluster.local.", "A"),
    "outside": query("example.org.", "A"),
    "edns-with-an-option": dns.message.make_query("web.testns.svc.cluster.local.", "A", use_edns=0,
                                                  options=[dns.edns.GenericOption(dns.edns.OptionType.COOKIE, b"\x01" * 8)]).to_wire(),
    "class-chaos": dns.message.make_query("web.testns.svc.cluster.local.", "A", rdclass=dns.rdataclass.CH).to_wire(),
    "a-response": query("web.testns.svc.cluster.local.", "A", flags=dns.flags.QR),
    "trailing-bytes": query("web.testns.svc.cluster.local.", "A") + b"\x00",
    "truncated": query("web.testns.svc.cluster.local.", "A")[:-2],
    "header-only": query("web.testns.svc.cluster.local.", "A")[:12],
}


def _opcode(wire: bytes, opcode) -> bytes:
    message = dns.message.from_wire(wire)
    message.set_opcode(opcode)
    return message.to_wire()


NOT_PRERENDERED["notify"] = _opcode(query("web.testns.svc.cluster.local.", "A"), dns.opcode.NOTIFY)


@pytest.mark.parametrize("wire", NOT_PRERENDERED.values(), ids=list(NOT_PRERENDERED))
def test_other_questions_take_the_ordinary_path(wire):
    assert prerenderer().answer(wire) is None


def addresses(found) -> list[str]:
    return sorted(rr.to_text() for rrset in dns.message.from_wire(found[0]).answer for rr in rrset)


def test_a_change_drops_the_answers_at_once_and_they_come_back_rendered_anew():
    recs = records()
    pre = prerenderer(recs)
    wire = query("hdls.testns.svc.cluster.local.", "A")
    assert addresses(pre.answer(wire)) == ["10.244.0.5", "10.244.0.6"]
    recs.set_slice(endpoint_slice("hdls-a", "hdls", [("10.244.0.5", True), ("10.244.0.9", True)]))
    assert pre.answer(wire) is None  # not yet rendered again: the ordinary path answers meanwhile
    pre.drain()
    assert addresses(pre.answer(wire)) == ["10.244.0.5", "10.244.0.9"]
    assert addresses(pre.answer(query("hdls.testns.svc.cluster.local.", "AAAA"))) == []  # its IPv6 endpoint went: NODATA
    recs.delete_slice(endpoint_slice("hdls-a", "hdls", []))
    pre.drain()
    assert pre.answer(wire) is None  # NXDOMAIN now: not prerendered
    recs.delete_service(service("web", ["10.96.0.20"]))
    pre.drain()
    assert pre.answer(query("web.testns.svc.cluster.local.", "A")) is None
    recs.set_service(service("web", ["10.96.0.21"]))
    pre.drain()
    assert addresses(pre.answer(query("web.testns.svc.cluster.local.", "A"))) == ["10.96.0.21"]


def test_answers_over_512_bytes_are_left_to_the_ordinary_path():
    many = [(f"10.244.3.{i}", True) for i in range(1, 41)]  # 40 A records: 12 + 33 + 40 * 16 > 512
    recs = load([service("big", headless=True)], [endpoint_slice("big-a", "big", many)], namespaces=["testns"])
    assert prerenderer(recs).answer(query("big.testns.svc.cluster.local.", "A")) is None


def test_on_the_event_loop_a_change_is_rendered_soon_after():
    import asyncio

    async def go():
        recs = load([], namespaces=["testns"])
        pre = Prerenderer(recs, SETTINGS)
        for i in range(50):  # the informer's initial list: rendered a few milliseconds at a time, between queries
            recs.set_service(service(f"svc-{i}", [f"10.96.1.{i}"]))
        assert pre.answer(query("svc-49.testns.svc.cluster.local.", "A")) is None
        for _ in range(1000):
            await asyncio.sleep(0)
            if not pre.pending:
                break
        assert addresses(pre.answer(query("svc-49.testns.svc.cluster.local.", "A"))) == ["10.96.1.49"]

    asyncio.run(go())


def test_a_nodata_answer_carries_the_serial_of_the_last_change():
    # CoreDNS's SOA serial is the time of the last change of anything, not of this Service
    clock = [100.0]
    recs = load([service("web", ["10.96.0.20"])], namespaces=["testns"], clock=lambda: clock[0])
    pre = prerenderer(recs)
    wire = query("web.testns.svc.cluster.local.", "AAAA")
    for moment in (100.0, 250.0, 2**32 + 7.0):
        clock[0] = moment
        recs.set_service(service("other", ["10.96.0.99"]))  # a change elsewhere: web's answer is not rendered again
        assert pre.keys_of.get(("testns", "web"))
        got = pre.answer(wire)
        assert got is not None
        same(got[0], ordinary(recs, wire))
        (soa,) = dns.message.from_wire(got[0]).authority
        assert soa[0].serial == int(moment) & 0xFFFFFFFF


def test_a_name_without_its_trailing_dot_is_the_same_question():
    recs = records()
    wire = query("WEB.testns.svc.cluster.local", "A")  # relative in text, absolute on the wire
    assert wire == query("WEB.testns.svc.cluster.local.", "A")
    got = prerenderer(recs).answer(wire)
    assert got is not None
    same(got[0], ordinary(recs, wire))


PRERENDERED_QUESTIONS = {(name.lower(), rdtype) for name, rdtype in ANSWERED}


def _promised(wire: bytes) -> bool:
    """dnspython reads ``wire`` as a question of the shape the prerenderer promises to answer:
    a plain query for a prerendered name and type, class IN, with no record but an OPT without
    options right after the question (the root as its owner)."""
    try:
        message = dns.message.from_wire(wire)
    except Exception:  # noqa: BLE001 - not a message
        return False
    if message.flags & dns.flags.QR or message.opcode() != dns.opcode.QUERY or len(message.question) != 1:
        return False
    if message.answer or message.authority or message.additional or message.options:
        return False
    (question,) = message.question
    if message.edns >= 0 and wire[12 + len(question.name.to_wire()) + 4:][:3] != b"\x00\x00\x29":
        return False
    return question.rdclass == dns.rdataclass.IN and (question.name.to_text().lower(), dns.rdatatype.to_text(question.rdtype)) in PRERENDERED_QUESTIONS


def test_the_lookup_on_the_wire_agrees_with_dnspythons_parse():
    """Thousands of queries mutated byte by byte (case of any byte, type and class bytes set to
    letters, truncated, extended): whatever the prerenderer answers is what the ordinary path
    answers, and every query dnspython reads as a prerendered question of the canonical shape
    is answered by it (none falls through to the slow path)."""
    recs = records()
    pre = prerenderer(recs)
    rng = random.Random(21)
    seeds = [query(name, rdtype, **SHAPES[shape]) for name, rdtype in ANSWERED for shape in SHAPES]
    seeds += [query("web.testns.svc.cluster.local.", "HTTPS"), query("nope.testns.svc.cluster.local.", "A")]
    answered = 0
    for _ in range(4000):
        wire = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(0, 3)):
            if len(wire) < 3:
                break
            at = rng.randrange(2, len(wire))
            mutation = rng.randrange(5)
            if mutation == 0:  # a letter's case, or a byte to a letter's code (type and class bytes too)
                wire[at] = wire[at] ^ 0x20 if chr(wire[at]).isalpha() else rng.choice(b"AZaz\x00\x01\x1c")
            elif mutation == 1:
                wire[at] = rng.randrange(256)
            elif mutation == 2:
                del wire[at:]
            elif mutation == 3:
                wire += bytes([rng.randrange(256)])
            else:  # the type or class of the question: letters, which lowercasing would change
                end = wire.find(0, 12)
                if 0 < end < len(wire) - 4:
                    wire[end + rng.randint(1, 4)] = rng.choice(b"AQZaqz")
        wire = bytes(wire)
        got = pre.answer(wire)
        if got is not None:
            answered += 1
            same(got[0], ordinary(recs, wire))
        elif _promised(wire):
            raise AssertionError(f"a prerendered question of the canonical shape fell through: {wire!r}")
    assert answered > 1000  # the mutations left many queries answerable
