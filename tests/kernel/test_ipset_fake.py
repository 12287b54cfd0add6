"""The ipset fake (``kernel/fake/ipset.py``) against the real ``ipset`` in a namespace of the
test's own: every command or restore text is given to both; both must accept it or both
refuse it with the same message, and afterwards hold the same sets (``ipset save`` read back
through the fake's ``parse_save``: type, family and members in ipset's canonical text).

Cases: each thing ipset refuses (and a few it accepts that one might not expect: ``-exist``
on a create with other options, ``tcp`` as the default protocol, a net stored as its network),
a restore that fails half way (the lines before stay), and the restore texts the IPVS mode
writes (``proxy.ipvs.rules.ipset_restore_input``) sync after sync, in both families.
"""

from __future__ import annotations

import pytest

from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.fake.ipset import FakeIpset, parse_save
from kubesvc.proxy.ipvs.rules import build_state, ipset_restore_input
from kubesvc.proxy.types import IPV4, IPV6
from tests.support.builders import ep, options, port, request
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


@pytest.fixture
def pair():
    ns = Netns.create("ipset")
    try:
        yield ns, FakeIpset()
    finally:
        ns.close()


def _message(stderr: str) -> str:
    return stderr.strip().removeprefix("ipset v7.17: ")


def both(ns: Netns, fake: FakeIpset, *argv: str, restore: str | None = None) -> str | None:
    """Run on both; assert they agree on accept/refuse and message; the message (None: accepted)."""
    real = ns.run("ipset", *(("restore",) if restore is not None else argv), check=False, input=restore)
    try:
        fake.restore_sync(restore) if restore is not None else fake.command(*argv)
        fake_error = None
    except CommandFailed as err:
        fake_error = _message(err.stderr)
    real_error = _message(real.stderr) if real.returncode else None
    assert fake_error == real_error, (argv, restore)
    assert fake.state() == parse_save(ns.run("ipset", "save").stdout), (argv, restore)
    return real_error


CASES = [
    ("create", "A", "hash:ip,port", "family", "inet", "hashsize", "1024", "maxelem", "65536"),
    ("create", "A", "hash:ip,port", "family", "inet", "hashsize", "1024", "maxelem", "65536"),  # exists
    ("create", "A", "hash:ip,port", "family", "inet", "hashsize", "2048", "-exist"),  # same type: fine
    ("create", "A", "hash:ip", "family", "inet", "-exist"),  # another type: refused even with -exist
    ("add", "A", "1.2.3.4,tcp:80"),
    ("add", "A", "1.2.3.4,tcp:80"),  # already added
    ("add", "A", "1.2.3.4,80"),  # tcp is the default: the same member, already added
    ("add", "A", "1.2.3.4,tcp:80", "-exist"),
    ("add", "A", "1.2.3.4,udp:53"),
    ("add", "A", "1.2.3.4,sctp:80"),
    ("add", "A", "1.2.3.4"),  # second element missing
    ("add", "A", "1.2.3.4,foo:80"),  # unknown protocol
    ("add", "A", "fd00::1,tcp:80"),  # not this family
    ("add", "A", "1.2.3.4,udp:80,1.1.1.1"),  # one dimension too many
    ("add", "NOPE", "1.2.3.4,tcp:80"),  # no such set
    ("del", "A", "9.9.9.9,tcp:1"),  # not added
    ("del", "A", "9.9.9.9,tcp:1", "-exist"),
    ("del", "A", "1.2.3.4,udp:53"),
    ("create", "C", "hash:ip"),
    ("add", "C", "10.0.0.1"),
    ("swap", "A", "C"),  # type mismatch
    ("create", "D", "hash:ip,port", "family", "inet6"),
    ("add", "D", "1.2.3.4,tcp:80"),  # not this family
    ("add", "D", "fd00::0:1,tcp:80"),
    ("swap", "A", "D"),  # family mismatch
    ("swap", "A", "NOPE"),
    ("swap", "NOPE", "A"),
    ("create", "B", "hash:ip,port", "family", "inet"),
    ("add", "B", "5.6.7.8,udp:53"),
    ("swap", "A", "B"),
    ("create", "E", "hash:ip,port,net", "family", "inet"),
    ("add", "E", "1.2.3.4,tcp:80,10.1.0.0/8"),  # stored as 10.0.0.0/8
    ("add", "E", "1.2.3.4,tcp:80,10.0.0.0/8"),  # the same: already added
    ("add", "E", "1.2.3.4,tcp:80,10.0.0.7"),
    ("create", "F", "hash:ip,port,ip", "family", "inet"),
    ("add", "F", "10.0.0.1,tcp:80,10.0.0.1"),
    ("create", "P", "bitmap:port", "range", "0-65535"),
    ("add", "P", "80"),
    ("add", "P", "tcp:81"),
    ("add", "P", "81"),  # tcp:81 was 81: already added
    ("flush", "A"),
    ("flush", "NOPE"),  # no such set
    ("destroy", "NOPE"),  # no such set
    ("destroy", "B"),
    ("create", "A-NAME-THAT-IS-LONGER-THAN-31-CHARS", "hash:ip"),  # too long
]


def test_each_command_is_accepted_or_refused_alike(pair):
    ns, fake = pair
    refused = [case for case in CASES if both(ns, fake, *case) is not None]
    assert len(refused) == 20  # those marked above as refused (and the second of a pair), so none goes unnoticed


def test_a_restore_stops_at_the_failing_line_and_keeps_what_was_sent(pair):
    ns, fake = pair
    text = "create X hash:ip family inet\nadd X 1.1.1.1\nadd Y 1.1.1.1\nadd X 2.2.2.2\n"
    assert both(ns, fake, restore=text) == "Error in line 3: The set with the given name does not exist"
    assert fake.members("X") == set()  # line 2 waited in the tool's batch for more of X: lost

    text = "create Z hash:ip\nadd X 1.1.1.1\nadd Z 2.2.2.2\nadd X bar\n"
    assert both(ns, fake, restore=text) == "Error in line 4: Syntax error: cannot parse bar: resolving to IPv4 address failed"
    assert (fake.members("X"), fake.members("Z")) == ({"1.1.1.1"}, set())  # X's batch was sent when Z's began

    text = "add X 3.3.3.3\nadd X 1.1.1.1\nadd X 4.4.4.4\ncreate W hash:ip\n"
    assert both(ns, fake, restore=text) == "Error in line 2: Element cannot be added to the set: it's already added"
    assert fake.members("X") == {"1.1.1.1", "3.3.3.3"} and "W" not in fake.sets  # the kernel stops at line 2


@pytest.mark.parametrize("family", [IPV4, IPV6])
def test_the_ipvs_modes_restore_texts_sync_after_sync(pair, family):
    ns, fake = pair
    v6 = family == IPV6
    vip, node, pod = ("fd00:30::41", "fd00::2", "fd00:180::") if v6 else ("172.30.0.41", "192.168.0.2", "10.180.0.")
    lb_ip, source = ("fd00:77::9", "fd00:1::/64") if v6 else ("192.168.77.9", "203.0.113.0/24")
    svc = port("ns1", "svc", cluster_ip=vip, node_port=3001)
    lb = port("ns1", "lb", cluster_ip=vip.replace("41", "42"), node_port=3002, lb_ips=[lb_ip], source_ranges=[source],
              etp_local=True, health_check_node_port=30000)
    steps = [
        [(svc, (ep(f"{pod}1"), ep(f"{pod}2")))],
        [(svc, (ep(f"{pod}1"),)), (lb, (ep(f"{pod}3", 8080, "node1"),))],
        [],
    ]
    opts = options("fd00:180::/64" if v6 else "10.180.0.0/16", family)
    for ports in steps:
        state = build_state(request(ports), opts, node_ips=[node])
        assert both(ns, fake, restore=ipset_restore_input(state, family)) is None
    assert fake.sets and not any(s.members for s in fake.sets.values())
