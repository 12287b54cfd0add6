"""The nftables fake (``kernel/fake/nftables.py``) against the real ``nft``, in namespaces of
the test's own: for every transaction both must accept it or both reject it (with the same
errno text), and afterwards hold the same ruleset.

"The same ruleset" is decided by nft itself: the fake's ``dump()`` is loaded into a second,
empty namespace, and both namespaces' ``nft -j list ruleset`` are compared without handles,
with set elements sorted (the kernel lists a hash set in its own order) and rules in chain
order. The fake's ``list_table`` must also read back, through ``kernel.nftables.table_contents``,
exactly what the real listing reads back (the proxier's full-sync snapshot).

Three kinds of cases: hand-written transactions for each thing nft rejects (and a few it
accepts that one might not expect); the transactions our proxier writes, sync after sync,
through the shared ``Proxier`` and ``NftablesBackend`` over a tee that gives each transaction to
both; and a seeded random walk of Service changes through the same tee.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.nftables import FakeKernel, FakeNFTables
from kubesvc.kernel.nftables import NFTables, table_contents
from kubesvc.proxy.backend import SyncFailed
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.nftables.proxier import NftablesBackend
from kubesvc.proxy.proxier import Proxier
from tests.support.builders import TEST_NODE_NAME, ep, options, port, request
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel

ERRNOS = ("No such file or directory", "File exists", "Device or resource busy", "Operation not supported", "Invalid argument",
          "syntax error", "datatype mismatch", "flags interval")


def errno_of(stderr: str) -> str:
    """The kind of an nft failure: its errno text, or ``syntax error``, or the first error line."""
    for line in stderr.splitlines():
        if "Error:" in line:
            message = line.split("Error:", 1)[1].strip()
            return next((e for e in ERRNOS if e in message), message)
    return stderr.strip()


def canonical(listing: str) -> dict:
    """``nft -j list ruleset`` without handles: objects by (kind, family, table, name), set
    elements sorted, rules per chain in order."""
    out: dict = {}
    for obj in json.loads(listing or '{"nftables": []}')["nftables"]:
        ((kind, body),) = obj.items()
        if kind == "metainfo":
            continue
        body = {k: v for k, v in body.items() if k != "handle"}
        if kind == "rule":
            out.setdefault(("rules", body["family"], body["table"], body["chain"]), []).append(body["expr"])
            continue
        if "elem" in body:
            body["elem"] = sorted(json.dumps(e, sort_keys=True) for e in body["elem"])
        out[(kind, body["family"], body.get("table", ""), body["name"])] = body
    return out


class Real:
    """The real ruleset of one namespace."""

    def __init__(self, ns: Netns):
        self.ns = ns

    def run(self, text: str) -> str | None:
        """None if nft accepted ``text``, else its errno kind."""
        result = self.ns.run("nft", "-f", "-", input=text, check=False)
        return None if result.returncode == 0 else errno_of(result.stderr)

    def listing(self) -> dict:
        return canonical(self.ns.run("nft", "-j", "list", "ruleset").stdout)

    def reset(self) -> None:
        self.ns.run("nft", "flush", "ruleset")


def fake_run(kernel: FakeKernel, text: str) -> str | None:
    try:
        FakeNFTables(kernel=kernel).run_sync(text)
    except CommandFailed as err:
        return errno_of(err.stderr)
    return None


@pytest.fixture(scope="module")
def namespaces():
    made = []
    try:
        for role in ("nftfake", "nftdump"):
            made.append(Netns.create(role))
        yield Real(made[0]), Real(made[1])
    finally:
        for ns in made:
            ns.close()


def fake_listing(kernel: FakeKernel, reload: Real) -> dict:
    """The fake's ruleset as nft lists it: its dump loaded into the empty ``reload`` namespace."""
    reload.reset()
    script = kernel.dump()
    assert reload.run(script) is None, f"nft rejected the fake's dump:\n{script}"
    return reload.listing()


# -- what nft rejects and accepts, one transaction after a common base ---------------------------

BASE = """\
add table ip t
add chain ip t a
add chain ip t b
add rule ip t a jump b
add set ip t s { type ipv4_addr ; }
add map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; }
add element ip t s { 10.0.0.1 }
add element ip t m { 10.0.0.1 . tcp . 80 : goto b }
"""

CASES = {
    # rejected: missing objects
    "element into a missing set": ("add element ip t nos { 10.0.0.1 }", "No such file or directory"),
    "delete a missing chain": ("delete chain ip t nochain", "No such file or directory"),
    "flush a missing chain": ("flush chain ip t nochain", "No such file or directory"),
    "rule in a missing chain": ("add rule ip t nochain accept", "No such file or directory"),
    "rule jumps to a missing chain": ("add rule ip t a jump nochain", "No such file or directory"),
    "rule goes to a missing chain": ("add rule ip t a goto nochain", "No such file or directory"),
    "rule names a missing set": ("add rule ip t a ip daddr @nos accept", "No such file or directory"),
    "map element goes to a missing chain": ("add element ip t m { 10.0.0.2 . tcp . 80 : goto nochain }",
                                            "No such file or directory"),
    "delete a missing element": ("delete element ip t s { 10.0.0.9 }", "No such file or directory"),
    "delete an element twice": ("delete element ip t s { 10.0.0.1 }\ndelete element ip t s { 10.0.0.1 }",
                                "No such file or directory"),
    "delete a missing set": ("delete set ip t nos", "No such file or directory"),
    "flush map on a set": ("flush map ip t s", "No such file or directory"),
    "delete a missing table": ("delete table ip nope", "No such file or directory"),
    "chain in a missing table": ("add chain ip nope c", "No such file or directory"),
    # rejected: exists
    "create an existing element": ("create element ip t s { 10.0.0.1 }", "File exists"),
    "create a key twice": ("create element ip t s { 10.0.0.2, 10.0.0.2 }", "File exists"),
    "add an element with another value": ("add element ip t m { 10.0.0.1 . tcp . 80 : goto a }", "File exists"),
    "create an existing chain": ("create chain ip t a", "File exists"),
    "create an existing table": ("create table ip t", "File exists"),
    "create an existing set": ("create set ip t s { type ipv4_addr ; }", "File exists"),
    "add a set over one of another type": ("add set ip t s { type ipv6_addr ; }", "File exists"),
    "add a set over a map": ("add set ip t m { type ipv4_addr ; }", "File exists"),
    "add a hook to a regular chain": ("add chain ip t a { type filter hook input priority 0 ; }", "File exists"),
    # rejected: busy, unsupported, syntax, type
    "delete a chain still jumped to": ("delete chain ip t b", "Device or resource busy"),
    "delete a chain a map element still names": ("flush chain ip t a\ndelete chain ip t b", "Device or resource busy"),
    "delete a set a rule names": ("add rule ip t a ip daddr @s accept\ndelete set ip t s", "Device or resource busy"),
    "change a base chain's priority": ("add chain ip t c { type filter hook input priority 0 ; }\n"
                                       "add chain ip t c { type filter hook input priority 10 ; }", "Operation not supported"),
    "destroy (nft 1.0.6 has none)": ("destroy table ip nope", "syntax error"),
    "an IPv6 address in an ipv4_addr set": ("add element ip t s { fd00::1 }",
                                            "Could not resolve hostname: Address family for hostname not supported"),
    "vmap over a set": ("add rule ip t a ip daddr . meta l4proto . th dport vmap @s", "Expression is not a map"),
    "a failure undoes the whole transaction": ("add chain ip t c\nadd element ip t s { 10.0.0.5 }\n"
                                               "delete chain ip t nochain", "No such file or directory"),
    "a map element without a value": ("add element ip t m { 10.0.0.2 . tcp . 80 }", "Invalid argument"),
    "a value for a set element": ("add element ip t s { 10.0.0.2 : accept }", "set is not a map"),
    "a key of the wrong length": ("add element ip t m { 10.0.0.2 . tcp : accept }", "datatype mismatch"),
    "a prefix without flags interval": ("add element ip t s { 10.0.0.0/24 }", "flags interval"),
    "a range without flags interval": ("add element ip t s { 10.0.0.5-10.0.0.9 }", "flags interval"),
    "a key twice in one delete": ("delete element ip t s { 10.0.0.1, 10.0.0.1 }", "No such file or directory"),
    "a rule jumps to a base chain": ("add chain ip t c { type filter hook input priority 0 ; }\nadd rule ip t a jump c",
                                     "Operation not supported"),
    "a map element goes to a base chain": ("add chain ip t c { type filter hook input priority 0 ; }\n"
                                           "add element ip t m { 10.0.0.2 . tcp . 80 : goto c }", "Operation not supported"),
    "delete a chain a new map element names": ("add element ip t m { 10.0.0.2 . tcp . 80 : goto a }\ndelete chain ip t a",
                                               "Device or resource busy"),
    # accepted
    "prefixes in an interval set": ("add set ip t i { type ipv4_addr ; flags interval ; }\n"
                                    "add element ip t i { 10.0.0.0/24, 10.1.0.0/16 }", None),
    "a lookup in a map as in a set": ("add map ip t m4 { type ipv4_addr : verdict ; }\nadd rule ip t a ip daddr @m4 accept", None),
    "delete an element by key and another value": ("delete element ip t m { 10.0.0.1 . tcp . 80 : goto a }", None),
    "a jump back (a loop no base chain reaches)": ("add rule ip t b jump a", None),
    "add an existing element again": ("add element ip t s { 10.0.0.1 }", None),
    "a key twice in one add": ("add element ip t s { 10.0.0.2, 10.0.0.2 }", None),
    "add a chain and delete it": ("add chain ip t x\ndelete chain ip t x", None),
    "add a set and delete it": ("add set ip t y { type ipv4_addr ; }\ndelete set ip t y", None),
    "delete a chain with rules": ("delete chain ip t a", None),
    "flush the jumps, then delete": ("flush chain ip t a\nflush map ip t m\ndelete chain ip t b", None),
    "delete an element by key alone": ("delete element ip t m { 10.0.0.1 . tcp . 80 }", None),
    "delete a map as a set": ("delete set ip t m", None),
    "add an existing set with a comment": ('add set ip t s { type ipv4_addr ; comment "x" ; }', None),
    "re-add an element without its comment": ('add element ip t s { 10.0.0.3 comment "c" }\nadd element ip t s { 10.0.0.3 }', None),
    "flush table keeps elements": ("flush table ip t", None),
    "delete and re-create the table": ("delete table ip t\nadd table ip t\nadd chain ip t z", None),
    "a dynamic set updated from a rule": ("add set ip t d { type ipv4_addr ; flags dynamic,timeout ; timeout 10s ; }\n"
                                          "add rule ip t a ip saddr @d update @d { ip saddr } accept", None),
    "a typeof map with concatenated data": ("add map ip t e { typeof numgen random mod 1 : ip daddr . tcp dport ; }\n"
                                            "add element ip t e { 0 : 10.0.0.1 . 80, 1 : 10.0.0.2 . 8080 }\n"
                                            "add rule ip t a meta l4proto tcp dnat ip addr . port to numgen random mod 2 map @e",
                                            None),
    "a base chain added twice alike": ("add chain ip t c { type nat hook prerouting priority -100 ; }\n"
                                       "add chain ip t c { type nat hook prerouting priority -100 ; }\nadd chain ip t c", None),
}


@pytest.mark.parametrize("tx,rejected", CASES.values(), ids=list(CASES))
def test_fake_accepts_and_rejects_as_nft(namespaces, tx, rejected):
    real, reload = namespaces
    real.reset()
    kernel = FakeKernel()
    assert real.run(BASE) is None and fake_run(kernel, BASE) is None
    got_real, got_fake = real.run(tx + "\n"), fake_run(kernel, tx + "\n")
    assert got_real == rejected, "the case's expectation is wrong about nft itself"
    assert got_fake == got_real
    assert fake_listing(kernel, reload) == real.listing()


def test_fake_reports_the_failing_line_as_nft(namespaces):
    kernel = FakeKernel()
    with pytest.raises(CommandFailed) as failed:
        FakeNFTables(kernel=kernel).run_sync(BASE + "delete chain ip t b\n")
    assert failed.value.first_error_line.startswith("/dev/stdin:9:")
    assert failed.value.input_text.endswith("delete chain ip t b\n") and failed.value.argv == ("nft", "-f", "-")
    assert kernel.tables == {}


# -- the transactions our proxier writes -------------------------------------------------------


class Tee:
    """``NFTables`` for the proxier that gives every transaction to the real nft (in a
    namespace) and to the fake, and checks they agree; listings come from the real one."""

    def __init__(self, real: NFTables, fake: FakeNFTables):
        self.real, self.fake = real, fake
        self.family_name = real.family_name
        self.transactions = 0

    async def run(self, text: str) -> None:
        errors = []
        for nft in (self.real, self.fake):
            try:
                await nft.run(text)
                errors.append(None)
            except CommandFailed as err:
                errors.append(err)
        self.transactions += 1
        real, fake = (errno_of(e.stderr) if e else None for e in errors)
        assert fake == real, f"nft: {errors[0]}\nfake: {errors[1]}"
        if errors[0]:
            raise errors[0]

    async def list_table(self, *, terse: bool = False) -> list[dict]:
        return await self.real.list_table(terse=terse)

    async def chain_rule_count(self, chain: str) -> int | None:
        count = await self.real.chain_rule_count(chain)
        assert await self.fake.chain_rule_count(chain) == count
        return count


# the scenario's addresses in either family
ADDRESSES = {
    4: {"cidrs": ("172.30.0.0/16",), "pods": "10.1.0.0/16", "node": "192.168.50.1", "web": "172.30.0.10",
        "local": "172.30.0.11", "sticky": "172.30.0.12", "dns": "172.30.0.13", "empty": "172.30.0.14",
        "ext": "192.168.99.11", "lb": "1.2.3.4", "lb2": "1.2.3.5", "allowed": "203.0.113.0/25",
        "ep1": "10.1.1.2", "ep2": "10.1.2.2", "ep3": "10.1.3.2"},
    6: {"cidrs": ("fd00:30::/112",), "pods": "fd00:1::/48", "node": "fd00:50::1", "web": "fd00:30::10",
        "local": "fd00:30::11", "sticky": "fd00:30::12", "dns": "fd00:30::13", "empty": "fd00:30::14",
        "ext": "fd00:99::11", "lb": "fd00:4::4", "lb2": "fd00:4::5", "allowed": "fd00:203::/120",
        "ep1": "fd00:1:1::2", "ep2": "fd00:1:2::2", "ep3": "fd00:1:3::2"},
}


def scenario(family: int) -> list[tuple[str, list, dict]]:
    """(name, ports with endpoints, request keywords), applied in order: full, partial and
    full-again syncs over every shape of Service the rules builder writes."""
    a = ADDRESSES[family]
    web = port("ns1", "web", cluster_ip=a["web"], node_port=30080, external_ips=(a["ext"],), lb_ips=(a["lb"],),
               source_ranges=(a["allowed"],))
    local = port("ns1", "local", cluster_ip=a["local"], node_port=30081, etp_local=True, lb_ips=(a["lb2"],))
    sticky = port("ns2", "sticky", cluster_ip=a["sticky"], affinity_seconds=60)
    dns = port("kube-system", "dns", "dns", 53, "UDP", cluster_ip=a["dns"])
    empty = port("ns2", "empty", cluster_ip=a["empty"])
    two = (ep(a["ep1"], 8080), ep(a["ep2"], 8080, TEST_NODE_NAME))
    three = two + (ep(a["ep3"], 8080),)
    first = [(web, two), (local, two), (sticky, two), (dns, (ep(a["ep1"], 53), ep(a["ep2"], 53))), (empty, ())]
    second = [(web, three), (local, two[:1]), (sticky, two[1:]), (dns, ()), (empty, (ep(a["ep3"]),))]
    third = [(web, three), (local, two[:1]), (empty, (ep(a["ep3"]),))]
    everything = {"ns1/web", "ns1/local", "ns2/sticky", "kube-system/dns", "ns2/empty"}
    return [
        ("first full sync", first, {"full": True}),
        ("endpoints change everywhere", second, {"full": False, "changed": everything}),
        ("nothing changed", second, {"full": False}),
        ("two Services removed", third, {"full": False, "changed": {"ns2/sticky", "kube-system/dns"}}),
        ("stale chains deleted", third, {"full": False}),
        ("full sync again", third, {"full": True}),
        ("NodePorts on chosen addresses", third, {"full": True, "nodeport_ips": (a["node"],)}),
        ("everything back", first, {"full": True}),
    ]


def proxier(tee: Tee, family: int, clock) -> Proxier:
    """The nftables mode inside the shared proxier, as in production (it decides full or
    partial and commits the state only once the kernel took the transaction)."""
    opts = options(ADDRESSES[family]["pods"], family=family)
    return Proxier(NftablesBackend(opts, nft=tee, clock=clock), opts, ProxyMetrics())


@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
async def test_proxier_transactions_agree_with_nft(namespaces, family):
    real, reload = namespaces
    real.reset()
    kernel = FakeKernel()
    tee = Tee(NFTables(family, netns=real.ns.name, in_process=False), FakeNFTables(family, kernel=kernel))
    clock = [1000.0]
    a = ADDRESSES[family]
    p = proxier(tee, family, lambda: clock[0])
    steps = scenario(family)
    for name, ports, kw in steps:
        await p.run_sync(request(ports, service_cidrs=a["cidrs"], **kw))
        clock[0] += 5.0
        assert fake_listing(kernel, reload) == real.listing(), name
        assert table_contents(await tee.fake.list_table()) == table_contents(await tee.real.list_table()), name
        assert await p.mode.table_intact(), name
    assert tee.transactions > len(steps)  # the stale-chain deletion is a transaction of its own


async def test_a_transaction_on_a_table_deleted_underneath_fails_in_both(namespaces):
    """Someone deletes our table between syncs: the next partial sync is rejected by nft and by
    the fake alike (elements into missing sets), and neither changes."""
    real, reload = namespaces
    real.reset()
    kernel = FakeKernel()
    tee = Tee(NFTables(4, netns=real.ns.name, in_process=False), FakeNFTables(4, kernel=kernel))
    p = proxier(tee, 4, lambda: 0.0)
    web = port("ns1", "web", cluster_ip="172.30.0.10")
    cidrs = ADDRESSES[4]["cidrs"]
    await p.run_sync(request([(web, (ep("10.1.1.2"), ep("10.1.2.2")))], service_cidrs=cidrs))
    await tee.run("delete table ip kube-proxy\n")
    with pytest.raises(SyncFailed, match="No such file or directory"):
        await p.run_sync(request([(web, (ep("10.1.1.2"),))], full=False, changed={"ns1/web"}, service_cidrs=cidrs))
    assert kernel.tables == {} and real.listing() == {}
    assert not await p.mode.table_intact()
    result = await p.run_sync(request([(web, (ep("10.1.1.2"),))], full=False, service_cidrs=cidrs))
    assert result.full and fake_listing(kernel, reload) == real.listing()  # the next sync is full and rebuilds both alike


def random_steps(rng: random.Random, count: int) -> list[tuple[list, dict]]:
    """A seeded walk over Services: each step adds, removes or reshapes one (policies,
    affinity, protocols, external addresses, endpoints local or not, none at all), sometimes
    asking for a full sync or changing the NodePort addresses (which makes it full)."""
    a = ADDRESSES[4]
    services: dict[str, tuple] = {}
    steps = []
    for _ in range(count):
        name = f"ns{rng.randrange(3)}/svc{rng.randrange(6)}"
        if name in services and rng.random() < 0.25:
            del services[name]
        else:
            k = len(services) + rng.randrange(200)
            protocol = rng.choice(["TCP", "TCP", "UDP", "SCTP"])
            sp = port(*name.split("/"), "p80", rng.choice([80, 443, 53]), protocol,
                      cluster_ip=f"172.30.{k // 250}.{k % 250 + 1}", node_port=rng.choice([0, 30000 + k]),
                      external_ips=tuple(rng.sample(["192.168.99.11", "192.168.99.12"], rng.randrange(3))),
                      lb_ips=("1.2.3.4",) if rng.random() < 0.3 else (),
                      source_ranges=("203.0.113.0/25",) if rng.random() < 0.5 else (),
                      etp_local=rng.random() < 0.3, itp_local=rng.random() < 0.2,
                      affinity_seconds=60 if rng.random() < 0.2 else None)
            eps = tuple(ep(f"10.1.{rng.randrange(1, 4)}.{rng.randrange(2, 9)}", 8080, TEST_NODE_NAME if rng.random() < 0.4 else None)
                        for _ in range(rng.choice([0, 1, 2, 3, 5])))
            services[name] = (sp, tuple({e.endpoint: e for e in eps}.values()))
        kw: dict = {"full": rng.random() < 0.15, "changed": {name}}
        if rng.random() < 0.1:
            kw.update(full=True, nodeport_ips=(a["node"],))
        steps.append((list(services.values()), kw))
    return steps


SEED = int(os.environ.get("KUBESVC_FUZZ_SEED") or 16)


async def test_a_seeded_walk_of_syncs_agrees_with_nft(namespaces):
    """``KUBESVC_FUZZ_SEED`` picks the walk (16 by default): after every sync of it, the fake
    holds what nft holds."""
    real, reload = namespaces
    real.reset()
    kernel = FakeKernel()
    tee = Tee(NFTables(4, netns=real.ns.name, in_process=False), FakeNFTables(4, kernel=kernel))
    clock = [1000.0]
    p = proxier(tee, 4, lambda: clock[0])
    for i, (ports, kw) in enumerate(random_steps(random.Random(SEED), 24)):
        await p.run_sync(request(ports, service_cidrs=ADDRESSES[4]["cidrs"], **kw))
        clock[0] += 0.5 + i % 3  # stale chains go now after one sync, now after two
        assert fake_listing(kernel, reload) == real.listing(), f"seed {SEED}, step {i}"
