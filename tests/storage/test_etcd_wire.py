"""The etcd backend's hand-written TxnRequest bytes (storage/etcd/wire.py) are the message the
generated classes (aetcd's compiled etcdserverpb) make for the same fields: read back equal,
and byte for byte the same."""

from __future__ import annotations

import pytest
from aetcd import rpc

from kubesvc.storage.etcd import wire

MOD = rpc.Compare.CompareTarget.MOD
EQUAL, GREATER = rpc.Compare.CompareResult.EQUAL, rpc.Compare.CompareResult.GREATER

SHORT = b"/registry/services/specs/default/web"
LONG = b"/registry/configmaps/default/" + b"n" * 300  # lengths of two varint bytes
HUGE = b"v" * 70_000  # three varint bytes


def generated(compares, success, failure) -> rpc.TxnRequest:
    return rpc.TxnRequest(compare=compares, success=success, failure=failure)


@pytest.mark.parametrize("key,value", [(SHORT, b'{"kind":"Service"}'), (LONG, HUGE), (SHORT, b"")])
def test_create_is_the_generated_message(key, value):
    ours = wire.txn([wire.compare_mod_revision(key, wire.EQUAL, 0)], [wire.put(key, value)], [wire.get(key)])
    theirs = generated([rpc.Compare(key=key, target=MOD, result=EQUAL, mod_revision=0)],
                       [rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))],
                       [rpc.RequestOp(request_range=rpc.RangeRequest(key=key))])
    assert rpc.TxnRequest.FromString(ours) == theirs
    assert ours == theirs.SerializeToString()
    # the oneof's zero is there: etcd must see that mod_revision (not version) is compared
    assert rpc.TxnRequest.FromString(ours).compare[0].WhichOneof("target_union") == "mod_revision"


@pytest.mark.parametrize("revision", [1, 127, 128, 300_000, 2**40])
def test_update_and_delete_are_the_generated_message(revision):
    ours = wire.txn(
        [wire.compare_mod_revision(SHORT, wire.EQUAL, revision), wire.compare_mod_revision(LONG, wire.GREATER, 0)],
        [wire.put(SHORT, b"new", prev_kv=True), wire.delete(LONG, prev_kv=True)],
        [wire.get(SHORT), wire.get(LONG)])
    theirs = generated(
        [rpc.Compare(key=SHORT, target=MOD, result=EQUAL, mod_revision=revision),
         rpc.Compare(key=LONG, target=MOD, result=GREATER, mod_revision=0)],
        [rpc.RequestOp(request_put=rpc.PutRequest(key=SHORT, value=b"new", prev_kv=True)),
         rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=LONG, prev_kv=True))],
        [rpc.RequestOp(request_range=rpc.RangeRequest(key=SHORT)), rpc.RequestOp(request_range=rpc.RangeRequest(key=LONG))])
    assert rpc.TxnRequest.FromString(ours) == theirs
    assert ours == theirs.SerializeToString()


def test_varint():
    # protobuf's documented examples: 1 is 01, 150 is 96 01, 300 is ac 02
    assert wire.varint(1) == b"\x01"
    assert wire.varint(150) == b"\x96\x01"
    assert wire.varint(300) == b"\xac\x02"
