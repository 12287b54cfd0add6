"""etcd's gRPC errors as storage errors, translated once, here (kine's ``translateErr``; the
etcd3 store's ``interpretListError`` / ``interpretWatchError``).

What etcd 3.4 answers, and what it becomes:

* ``OUT_OF_RANGE "etcdserver: mvcc: required revision has been compacted"``: a read below the
  compact revision (reading *at* it succeeds): :class:`~kubesvc.storage.base.Compacted`, 410.
* ``OUT_OF_RANGE "etcdserver: mvcc: required revision is a future revision"``:
  :class:`~kubesvc.storage.base.FutureRevision` (kube-apiserver: 504 "Too large resource version").
* Anything else (``UNAVAILABLE`` when no member answers or there is no leader,
  ``DEADLINE_EXCEEDED`` when a request outlives its timeout, ``etcdserver: request timed out``
  without quorum, ``etcdserver: request is too large`` past ``--max-request-bytes``):
  :class:`Unavailable`. kube-apiserver passes these through ``ErrorToAPIStatus`` as a 500 whose
  message is etcd's text; the client sees the failure at once instead of a hung request.

The caller knows the revision it asked for and the last compact revision it saw, which the
Compacted and FutureRevision errors carry; the decision is this pure function of the status.
"""

from __future__ import annotations

import grpc

from kubesvc.storage.base import StorageError

COMPACTED = "required revision has been compacted"
FUTURE = "required revision is a future revision"


class Unavailable(StorageError):
    """etcd did not answer, or answered with a failure that is not a conflict (500 upstream)."""


def kind_of(error: grpc.aio.AioRpcError) -> str:
    """``compacted``, ``future`` or ``unavailable``."""
    details = error.details() or ""
    if error.code() == grpc.StatusCode.OUT_OF_RANGE and COMPACTED in details:
        return "compacted"
    if error.code() == grpc.StatusCode.OUT_OF_RANGE and FUTURE in details:
        return "future"
    return "unavailable"


def unavailable(error: grpc.aio.AioRpcError, endpoints: str) -> Unavailable:
    details = (error.details() or "").strip() or error.code().name
    if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        details = f"request to etcd timed out ({details})"
    return Unavailable(f"etcd ({endpoints}): {details}")
