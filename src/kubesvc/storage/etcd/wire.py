"""etcd's ``TxnRequest`` written as protobuf bytes directly, for the backend's every write.

Every create, update and delete of the apiserver is one etcd ``Txn`` (backend.py's table): a
``Compare`` on each key's ``mod_revision``, a ``Put`` or ``DeleteRange`` of each key, and a
``Range`` of each key on failure. Building that through the generated message classes
(``rpc.Compare``, ``rpc.RequestOp``, ``rpc.PutRequest``, ... then ``SerializeToString``) costs
the apiserver about twice as much CPU as writing the few fields it sets, on every write; the
bytes here are the same message (``rpc.TxnRequest.FromString`` reads them back equal, which
tests/storage/test_etcd_wire.py checks), written in field order as the generated code writes
them.

The encoding (protobuf's wire format, etcd's ``api/etcdserverpb/rpc.proto``): a field is its
tag (``number << 3 | wire type``) then, for bytes and sub-messages (wire type 2), the length as
a varint and the payload; integers and enums (wire type 0) are varints. proto3 leaves out a
field equal to its default, except a member of a ``oneof``: ``Compare.mod_revision`` is in
``target_union``, so ``mod_revision == 0`` (the key does not exist) is written, as Go's and
Python's generated code write it and as etcd needs it to know what is compared.
"""

from __future__ import annotations

from kubesvc.util.protowire import varint

# TxnRequest: compare = 1, success = 2, failure = 3 (all repeated, wire type 2)
_COMPARE, _SUCCESS, _FAILURE = b"\x0a", b"\x12", b"\x1a"
# RequestOp: request_range = 1, request_put = 2, request_delete_range = 3
_OP_RANGE, _OP_PUT, _OP_DELETE = b"\x0a", b"\x12", b"\x1a"
# Compare: result = 1, target = 2 (enums), key = 3, mod_revision = 6 (int64, in target_union)
_RESULT, _TARGET_MOD, _KEY, _MOD_REVISION = b"\x08", b"\x10\x02", b"\x1a", b"\x30"
EQUAL, GREATER = 0, 1  # Compare.CompareResult
# PutRequest: key = 1, value = 2, prev_kv = 4; DeleteRangeRequest: key = 1, prev_kv = 3;
# RangeRequest: key = 1
_PUT_KEY, _PUT_VALUE, _PUT_PREV_KV = b"\x0a", b"\x12", b"\x20\x01"
_DELETE_PREV_KV = b"\x18\x01"

_SMALL = [bytes([n]) for n in range(128)]


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def compare_mod_revision(key: bytes, result: int, revision: int) -> bytes:
    """``Compare{key, target: MOD, result, mod_revision: revision}``."""
    result_field = _RESULT + _SMALL[result] if result else b""  # EQUAL is the default: left out
    return result_field + _TARGET_MOD + _field(_KEY, key) + _MOD_REVISION + varint(revision)


def put(key: bytes, value: bytes, prev_kv: bool = False) -> bytes:
    """``RequestOp{request_put: PutRequest{key, value, prev_kv}}``."""
    request = _field(_PUT_KEY, key) + (_field(_PUT_VALUE, value) if value else b"") + (_PUT_PREV_KV if prev_kv else b"")
    return _field(_OP_PUT, request)


def delete(key: bytes, prev_kv: bool = True) -> bytes:
    """``RequestOp{request_delete_range: DeleteRangeRequest{key, prev_kv}}`` (one key)."""
    return _field(_OP_DELETE, _field(_PUT_KEY, key) + (_DELETE_PREV_KV if prev_kv else b""))


def get(key: bytes) -> bytes:
    """``RequestOp{request_range: RangeRequest{key}}`` (one key)."""
    return _field(_OP_RANGE, _field(_PUT_KEY, key))


def txn(compares: list[bytes], success: list[bytes], failure: list[bytes] = ()) -> bytes:
    """``TxnRequest{compare, success, failure}`` from the encoded parts above."""
    return b"".join([*[_COMPARE + varint(len(compare)) + compare for compare in compares],
                     *[_SUCCESS + varint(len(op)) + op for op in success],
                     *[_FAILURE + varint(len(op)) + op for op in failure]])
