"""The etcd calls a managed member needs, over etcd's gRPC API with TLS: ``MemberList``,
``MemberAdd`` (as a learner), ``MemberPromote``, ``MemberRemove``, ``Status``, a
health read, and ``Maintenance.Snapshot``.

aetcd (the project's etcd client) has neither TLS nor learners (``add_member`` takes no
``isLearner``, there is no ``MemberPromote``), so this shell calls the generated stubs aetcd
ships (``aetcd.rpc``) over the etcd backend's TLS channel (``storage.etcd.client``), one per
endpoint, presenting the client certificate of the etcd CA. Endpoints are tried in order: a call that finds one unreachable
(``UNAVAILABLE``, a deadline) goes to the next, as clientv3's balancer does for requests
that were never sent. Every gRPC error leaves here as :class:`EtcdError`, its text etcd's own
(``etcdserver: ...``), so callers decide on etcd's words (``etcd_member.promote_outcome``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Sequence

# ``kubesvc up`` forks its components (and restarts etcd) after these calls have started gRPC's
# threads. With gRPC's fork support on, a child forked while another thread is inside gRPC may
# die of SIGSEGV before it execs (seen: "Other threads are currently calling into gRPC,
# skipping fork() handlers", then the restarted etcd killed by signal 11). Our children exec
# at once and never use this process's gRPC, so the fork handlers are not wanted; the setting
# is read when grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc  # noqa: E402
from aetcd.rpc import rpc_pb2 as rpc  # noqa: E402
from aetcd.rpc import rpc_pb2_grpc as stubs  # noqa: E402

from kubesvc.cluster.etcd_member import Member  # noqa: E402
from kubesvc.storage.etcd.client import EtcdConfig, open_channel  # noqa: E402

DEFAULT_TIMEOUT = 5.0
HEALTH_KEY = b"health"  # etcdctl endpoint health reads it; it need not exist
UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class EtcdError(Exception):
    """An etcd call failed: ``message`` is etcd's (or gRPC's) text, ``endpoint`` where."""

    def __init__(self, message: str, endpoint: str = "", code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message, self.endpoint, self.code = message, endpoint, code

    @property
    def unreachable(self) -> bool:
        return self.code in UNREACHABLE


def member_of(proto) -> Member:
    return Member(proto.ID, proto.name, tuple(proto.peerURLs), tuple(proto.clientURLs), proto.isLearner)


class EtcdAPI:
    """Member and maintenance calls against ``endpoints`` (``https://host:port``), with the CA,
    client certificate and key files of the etcd CA."""

    def __init__(self, endpoints: Sequence[str], ca: Path, cert: Path, key: Path, *, timeout: float = DEFAULT_TIMEOUT):
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._files = (str(ca), str(cert), str(key))
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _channel(self, endpoint: str) -> grpc.aio.Channel:
        if endpoint not in self._channels:
            ca, cert, key = self._files
            self._channels[endpoint] = open_channel(EtcdConfig(servers=(endpoint,), ca_file=ca, cert_file=cert, key_file=key))
        return self._channels[endpoint]

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(c.close() for c in channels), return_exceptions=True)

    async def __aenter__(self) -> "EtcdAPI":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, service: str, method: str, request, *, endpoints: Sequence[str] | None = None, timeout: float | None = None):
        """``service.method(request)`` on the first endpoint that answers."""
        last: EtcdError | None = None
        for endpoint in endpoints or self.endpoints:
            stub = getattr(stubs, f"{service}Stub")(self._channel(endpoint))
            try:
                return await getattr(stub, method)(request, timeout=timeout or self.timeout)
            except grpc.aio.AioRpcError as err:
                last = EtcdError(err.details() or err.code().name, endpoint, err.code())
                if not last.unreachable:
                    raise last from None
        assert last is not None
        raise last

    # -- members

    async def members(self) -> list[Member]:
        response = await self._call("Cluster", "MemberList", rpc.MemberListRequest())
        return [member_of(m) for m in response.members]

    async def add_learner(self, peer_urls: Sequence[str]) -> Member:
        response = await self._call("Cluster", "MemberAdd", rpc.MemberAddRequest(peerURLs=list(peer_urls), isLearner=True))
        return member_of(response.member)

    async def promote(self, member_id: int) -> list[Member]:
        response = await self._call("Cluster", "MemberPromote", rpc.MemberPromoteRequest(ID=member_id))
        return [member_of(m) for m in response.members]

    async def remove(self, member_id: int) -> None:
        await self._call("Cluster", "MemberRemove", rpc.MemberRemoveRequest(ID=member_id))

    # -- health

    async def status(self, endpoint: str) -> rpc.StatusResponse:
        """``Maintenance.Status`` of one member (a learner answers too)."""
        return await self._call("Maintenance", "Status", rpc.StatusRequest(), endpoints=[endpoint])

    async def healthy(self, endpoint: str, *, serializable: bool = False) -> None:
        """A read of ``health`` on ``endpoint``, as ``etcdctl endpoint health``: linearizable (it
        needs a leader and a quorum) unless ``serializable`` (a learner refuses the other)."""
        await self._call("KV", "Range", rpc.RangeRequest(key=HEALTH_KEY, serializable=serializable), endpoints=[endpoint])

    # -- snapshots

    async def snapshot(self, out, *, endpoint: str | None = None, timeout: float = 300.0) -> int:
        """Stream ``Maintenance.Snapshot`` of one member into the binary file ``out`` (the
        database, then etcd's SHA-256 of it, which ``etcdctl snapshot restore`` checks);
        the bytes written."""
        stub = stubs.MaintenanceStub(self._channel(endpoint or self.endpoints[0]))
        written = 0
        try:
            async for response in stub.Snapshot(rpc.SnapshotRequest(), timeout=timeout):
                out.write(response.blob)
                written += len(response.blob)
        except grpc.aio.AioRpcError as err:
            raise EtcdError(err.details() or err.code().name, endpoint or self.endpoints[0], err.code()) from None
        return written
