"""The thin shell around ``etcd_member``'s decisions: run this machine's etcd member as a
supervised child of ``kubesvc up`` (``cmd.supervisor``: its log in ``<data-dir>/logs/etcd.log``,
restarted with back-off when it dies) and create, join or restart it.

* **create** (no data, nothing to join): start with ``--initial-cluster-state new`` and wait
  for a linearizable read to succeed (the member elected itself leader);
* **join** (no data, endpoints of a running cluster): plan from ``MemberList``, remove a
  learner an earlier join of this machine left, add a learner (or reuse the one added for us
  and never started), start with ``existing``, wait until the member answers
  ``Status``, then ``MemberPromote`` every half second until it is a voter. A failure after
  the add stops the member, removes the learner and deletes its data directory;
* **restart** (data present): start as it was and wait until it answers ``Status``, not for a
  quorum (the other machines may be starting too; the apiserver retries etcd meanwhile). A
  member that was killed while still a learner is promoted as in a join.

Every failure is :class:`EtcdFailed`, one line that says what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kubesvc.cluster import etcd_member as em
from kubesvc.cluster.etcd_api import EtcdAPI, EtcdError
from kubesvc.cmd.supervisor import ComponentFailed, Supervisor

log = logging.getLogger("kubesvc.etcd")

COMPONENT = "etcd"
START_TIMEOUT = 60.0  # seconds for the process to log and then answer Status
PROMOTE_TIMEOUT = 120.0  # a learner that has not caught up by then is removed (k3s: 5 min without progress)
PROMOTE_EVERY = 0.5
STOP_GRACE = 10.0


class EtcdFailed(Exception):
    """The member could not be created, joined or started; the message is one line."""


@dataclass(frozen=True)
class RunningMember:
    spec: em.MemberSpec
    tls: em.MemberTLS
    member_id: int
    joined: bool  # it joined (or rejoined) an existing cluster

    @property
    def client_urls(self) -> list[str]:
        return [self.spec.local_client_url]


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise EtcdFailed("etcd is not installed: apt-get install etcd-server (Debian's etcd 3.4), then retry")
    return path


async def start_member(supervisor: Supervisor, data_dir: Path, address: str, *, join: Sequence[str] = (), hostname: str | None = None,
                       start_timeout: float = START_TIMEOUT, promote_timeout: float = PROMOTE_TIMEOUT) -> RunningMember:
    """Create, join (``join``: client URLs of running members) or restart this machine's
    member under ``data_dir``; returns once it serves (see the module docstring)."""
    binary = etcd_binary()
    spec = em.member_spec(data_dir, address, hostname)
    tls = em.member_tls(data_dir, [spec.address], hostname)
    if em.has_wal(data_dir):
        return await _restart(supervisor, data_dir, spec, tls, binary, join, start_timeout, promote_timeout)
    if not join:
        em.save_spec(data_dir, spec)
        await _run(supervisor, em.etcd_argv(spec, data_dir, tls, em.initial_cluster([(spec.name, [spec.peer_url])]), "new", binary),
                   start_timeout)
        async with _api([spec.local_client_url], tls) as api:
            await _until(lambda: api.healthy(spec.local_client_url), start_timeout, "etcd did not elect itself leader",
                         supervisor=supervisor)
            status = await api.status(spec.local_client_url)
        return RunningMember(spec, tls, status.header.member_id, joined=False)
    return await _join(supervisor, data_dir, spec, tls, binary, join, start_timeout, promote_timeout)


async def _join(supervisor, data_dir, spec, tls, binary, join, start_timeout, promote_timeout) -> RunningMember:
    async with _api(join, tls) as api:
        try:
            members = await api.members()
        except EtcdError as err:
            raise EtcdFailed(_unreachable(join, err)) from None
        try:
            plan = em.plan_join(members, spec)
        except em.JoinRefused as refused:
            raise EtcdFailed(str(refused)) from None
        for stale in plan.stale:
            log.warning("removing etcd learner %s (ID %s, %s) left by an earlier join of this machine", stale.name, stale.hex_id,
                        ",".join(stale.peer_urls))
            try:
                await api.remove(stale.id)
            except EtcdError as err:
                raise EtcdFailed(f"cannot remove the learner {stale.name} an earlier join of this machine left ({err.message}): "
                                 f"remove it from a running member (etcdctl member remove {stale.hex_id}), then retry") from None
        added = None
        try:
            if plan.reuse is None:
                added = await _add_learner(api, spec, start_timeout)
            ours = plan.reuse or added
            em.save_spec(data_dir, spec)
            await _run(supervisor, em.etcd_argv(spec, data_dir, tls, plan.cluster(spec, ours), "existing", binary), start_timeout)
            await _until(lambda: api.status(spec.local_client_url), start_timeout, "etcd did not start", supervisor=supervisor)
            await _promote(api, ours.id, promote_timeout)
        except BaseException:
            await _undo_join(supervisor, api, data_dir, added)
            raise
        return RunningMember(spec, tls, ours.id, joined=True)


async def _restart(supervisor, data_dir, spec, tls, binary, join, start_timeout, promote_timeout) -> RunningMember:
    # the --initial-* flags are ignored with a WAL; they are given only because etcd insists on a valid set
    await _run(supervisor, em.etcd_argv(spec, data_dir, tls, em.initial_cluster([(spec.name, [spec.peer_url])]), "existing", binary),
               start_timeout)
    async with _api([spec.local_client_url], tls) as local:
        status = await _until(lambda: local.status(spec.local_client_url), start_timeout, "etcd did not start", supervisor=supervisor)
        if not status.isLearner:
            return RunningMember(spec, tls, status.header.member_id, joined=bool(join))
        peers = list(join)
        if not peers:
            with contextlib.suppress(EtcdError):
                peers = [u for m in await local.members() if not m.is_learner for u in m.client_urls]
    async with _api(peers or [spec.local_client_url], tls) as api:
        await _promote(api, status.header.member_id, promote_timeout)
    return RunningMember(spec, tls, status.header.member_id, joined=True)


# ---- steps -------------------------------------------------------------------------------------


def _api(endpoints: Sequence[str], tls: em.MemberTLS) -> EtcdAPI:
    return EtcdAPI(endpoints, tls.ca, tls.client_cert, tls.client_key)


def _unreachable(endpoints: Sequence[str], err: EtcdError) -> str:
    if err.unreachable:
        return (f"cannot reach etcd at {', '.join(endpoints)} ({err.message}): check that the first server runs with --cluster-init "
                f"and that this machine reaches its port {em.CLIENT_PORT}")
    return f"etcd at {err.endpoint} refused the member list: {err.message}"


async def _run(supervisor: Supervisor, argv: list[str], timeout: float) -> None:
    try:
        await supervisor.start(COMPONENT, argv, ready_timeout=timeout)
    except ComponentFailed:
        raise EtcdFailed(_exit_line(supervisor)) from None


def last_error(lines) -> str:
    """etcd's own words for why it stopped: the ``msg`` and ``error`` of its last zap line
    that has an error (or the last line as it is)."""
    fallback = ""
    for line in reversed(list(lines)):
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            fallback = fallback or line.strip()
        elif entry.get("error") or entry.get("level") in ("fatal", "panic", "error"):
            return ": ".join(str(entry[k]) for k in ("msg", "error") if entry.get(k))
        else:
            fallback = fallback or str(entry.get("msg", ""))
    return fallback


def _exit_line(supervisor: Supervisor) -> str:
    component = supervisor.components.get(COMPONENT)
    lines = component.last_lines if component else ()
    log_path = supervisor.log_dir / f"{COMPONENT}.log"
    return f"etcd exited: {last_error(lines) or 'no output'} (its log: {log_path})"


def _exited(supervisor: Supervisor) -> bool:
    component = supervisor.components.get(COMPONENT)
    return component is not None and (bool(component.exits) or (component.process is not None
                                                                 and component.process.returncode is not None))


async def _until(call, timeout: float, what: str, every: float = 0.2, supervisor: Supervisor | None = None):
    """``await call()`` until it succeeds; EtcdFailed naming ``what`` and etcd's last word, at
    once when the etcd process has exited meanwhile (a port in use, a bad data directory)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await call()
        except EtcdError as err:
            if supervisor is not None and _exited(supervisor):
                raise EtcdFailed(_exit_line(supervisor)) from None
            if asyncio.get_running_loop().time() > deadline:
                raise EtcdFailed(f"{what} within {timeout:g}s: {err.message}") from None
        await asyncio.sleep(every)


async def _add_learner(api: EtcdAPI, spec: em.MemberSpec, timeout: float) -> em.Member:
    """``MemberAdd(isLearner)``, again while etcd finds the cluster not yet healthy enough."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await api.add_learner([spec.peer_url])
        except EtcdError as err:
            waiting = err.unreachable or em.add_outcome(err.message) == "wait"
            if not waiting or asyncio.get_running_loop().time() > deadline:
                raise EtcdFailed(f"etcd refused to add this machine ({spec.peer_url}) as a member: {err.message}") from None
        await asyncio.sleep(PROMOTE_EVERY)


async def _promote(api: EtcdAPI, member_id: int, timeout: float) -> None:
    """``MemberPromote`` until etcd says the learner is a voter (or was already)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await api.promote(member_id)
            outcome, message = "done", ""
        except EtcdError as err:
            outcome, message = em.promote_outcome(err.message), err.message
            if err.unreachable:
                outcome = "wait"
        if outcome == "done":
            log.info("etcd member %x is a voting member", member_id)
            return
        if outcome == "failed" or asyncio.get_running_loop().time() > deadline:
            raise EtcdFailed(f"etcd member {member_id:x} was not promoted from learner within {timeout:g}s ({message}): "
                             "check that the other members reach this machine's peer port "
                             f"{em.PEER_PORT}, then retry")
        await asyncio.sleep(PROMOTE_EVERY)


async def _undo_join(supervisor: Supervisor, api: EtcdAPI, data_dir: Path, added: em.Member | None) -> None:
    """What a failed join made, unmade: the process, the learner, the data directory."""
    if COMPONENT in supervisor.components:
        await supervisor.stop([COMPONENT], STOP_GRACE)
    if added is not None:
        try:
            await api.remove(added.id)
        except EtcdError as err:
            log.warning("could not remove learner %s after a failed join (remove it: etcdctl member remove %s): %s",
                        added.hex_id, added.hex_id, err.message)
    em.remove_tree(em.etcd_dir(data_dir))


async def stop_member(supervisor: Supervisor, grace: float = STOP_GRACE) -> int | None:
    """SIGTERM the member (etcd flushes and exits), SIGKILL after ``grace``; its exit code."""
    codes = await supervisor.stop([COMPONENT], grace)
    return codes.get(COMPONENT)

