"""The generic REST store: Kubernetes object semantics on top of a revisioned key-value Backend.

This is k8s.io/apiserver's ``registry/generic/registry.Store`` + ``storage/etcd3`` in one:

* ``resourceVersion`` is the storage revision of the object's last write; it is not stored in
  the value but filled in on every read (upstream's APIObjectVersioner does the same).
* create: generateName, uid, creationTimestamp, defaults, validation, managedFields, then one
  storage transaction (the object plus the strategy's extra operations, e.g. an allocation).
* update and patch share one ``GuaranteedUpdate`` loop: read, apply the change to the current
  object, and write at the read revision; a lost race re-reads and re-applies unless the client
  pinned a resourceVersion (then 409 Conflict). A write that changes nothing is not written
  (same resourceVersion, no watch event): ``kubectl patch`` then prints "patched (no change)".
* delete honours preconditions, finalizers (mark with deletionTimestamp; the last finalizer's
  removal deletes), graceful deletion (Pods on a node) and ``DeleteOptions.propagationPolicy``:
  ``Orphan`` (or the deprecated ``orphanDependents: true``) puts the ``orphan`` finalizer on the
  object, ``Foreground`` the ``foregroundDeletion`` finalizer, ``Background`` neither; without a
  policy the object keeps the ones it has. The garbage collector (controllers/gc) acts on those
  finalizers and removes them, which completes the deletion (upstream
  ``deletionFinalizersForGarbageCollection`` and ``updateForGracefulDeletionAndFinalizers``).
* list pages with an opaque ``continue`` token bound to the first page's revision, exactly like
  etcd3's ``{"v":"meta.k8s.io/v1","rv":N,"start":"<next key>"}``.
* watch streams ADDED/MODIFIED/DELETED from a revision, translating selector transitions into
  ADDED/DELETED as the watch cache does.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import AsyncIterator, Callable, Mapping

import msgspec

from kubesvc.api import errors
from kubesvc.api.decode import copy_json
from kubesvc.api.errors import StatusError
from kubesvc.api.managedfields import track_update
from kubesvc.api.scheme import KindInfo
from kubesvc.api.selectors import FieldSelector, LabelSelector
from kubesvc.api.validation_meta import FINALIZER_FOREGROUND, FINALIZER_ORPHAN
from kubesvc.apiserver.admission import namespace_lifecycle
from kubesvc.apiserver.registry.strategy import Strategy, strategy_for
from kubesvc.apiserver.registry.txn import Txn
from kubesvc.storage import base as storage
from kubesvc.util import golang
from kubesvc.util.clock import Clock
from kubesvc.util.golang import parse_rfc3339, rfc3339

_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode

# upstream names.SimpleNameGenerator: 5 chars from an alphabet without vowels and lookalikes
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# a create whose generated name exists tries another, this many times at most
_MAX_NAME_ATTEMPTS = 8
_SYSTEM_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


def encode(obj: dict) -> bytes:
    meta = obj.get("metadata") or {}
    if "resourceVersion" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return _json_encode(obj)


def decode(kv: storage.KeyValue, revision: int | None = None) -> dict:
    obj = _json_decode(kv.value)
    obj.setdefault("metadata", {})["resourceVersion"] = str(revision if revision is not None else kv.mod_revision)
    return obj


def parse_resource_version(text: str | None) -> int | None:
    """None for unset; else upstream's ``APIObjectVersioner.ParseResourceVersion``, a uint64
    (``strconv.ParseUint``), and the storage layer's 400 for anything else."""
    if text in (None, ""):
        return None
    try:
        return golang.parse_uint(text)
    except ValueError as err:
        raise errors.bad_request(f"invalid resource version: resourceVersion: Invalid value: {golang.quote(text)}: {err}") from None


def _omit_empty_lists(meta: dict) -> None:
    """ObjectMeta's lists are ``omitempty`` upstream: an empty ownerReferences or finalizers
    list (e.g. after a patch deleted the last element) is not stored or shown."""
    for name in ("ownerReferences", "finalizers"):
        if meta.get(name) == []:
            del meta[name]


def _changed_value(new: dict, stored: storage.KeyValue, old: dict) -> bytes | None:
    """What to store for ``new``, or None when it is the object ``stored`` holds (``old`` is
    that object, decoded): a write that changes nothing is not written. The stored bytes are
    ``encode(old)`` for everything this store wrote, so they are compared first and the new
    object is encoded once for both the comparison and the write; ``encode(old)`` still
    decides for a value written otherwise."""
    value = encode(new)
    return None if value == stored.value or value == encode(old) else value


@dataclass
class ListOptions:
    label_selector: LabelSelector | None = None
    field_selector: FieldSelector | None = None
    limit: int = 0
    continue_token: str = ""
    resource_version: int | None = None
    resource_version_match: str = ""

    def matches(self, obj: dict) -> bool:
        if self.label_selector is not None and not self.label_selector.matches((obj.get("metadata") or {}).get("labels") or {}):
            return False
        if self.field_selector is not None and not self.field_selector.matches(obj):
            return False
        return True

    @property
    def filtered(self) -> bool:
        return self.label_selector is not None or self.field_selector is not None


_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def encode_continue(revision: int, start_key: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start_key}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str, key_prefix: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        revision, start = int(data["rv"]), str(data["start"])
        if data.get("v") != "meta.k8s.io/v1" or not 0 < revision < 2**63 or "\x00" in start[:-1]:
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
        raise errors.bad_request(f"continue key is not valid: {token[:100]}") from None
    return revision, key_prefix + start


# ---- deletion: graceful deletion and the garbage collector's finalizers ---------------------


def should_orphan_dependents(finalizers: list[str], options: Mapping, default_policy: str = "") -> bool:
    """Upstream shouldOrphanDependents: the options decide (orphanDependents, then
    propagationPolicy), else a GC finalizer the object already has, else the kind's default."""
    if default_policy == "Unsupported":
        return False
    if options.get("orphanDependents") is not None:
        return bool(options["orphanDependents"])
    policy = options.get("propagationPolicy")
    if policy in ("Orphan", "Background", "Foreground"):
        return policy == "Orphan"
    for finalizer in finalizers:
        if finalizer == FINALIZER_ORPHAN:
            return True
        if finalizer == FINALIZER_FOREGROUND:
            return False
    return default_policy == "OrphanDependents"


def should_delete_dependents(finalizers: list[str], options: Mapping, default_policy: str = "") -> bool:
    """Upstream shouldDeleteDependents: foreground deletion, by the same precedence (a set
    orphanDependents, true or false, always means not foreground)."""
    if default_policy == "Unsupported":
        return False
    if options.get("orphanDependents") is not None:
        return False
    policy = options.get("propagationPolicy")
    if policy in ("Orphan", "Background", "Foreground"):
        return policy == "Foreground"
    for finalizer in finalizers:
        if finalizer == FINALIZER_FOREGROUND:
            return True
        if finalizer == FINALIZER_ORPHAN:
            return False
    return False


def deletion_finalizers_for_gc(finalizers: list[str], options: Mapping, default_policy: str = "") -> tuple[bool, list[str]]:
    """Upstream deletionFinalizersForGarbageCollection: (changed, finalizers). Both GC
    finalizers are removed and added back as the policy asks; other finalizers keep their
    order. ``changed`` compares as sets, so a mere reordering is no change."""
    orphan = should_orphan_dependents(finalizers, options, default_policy)
    foreground = should_delete_dependents(finalizers, options, default_policy)
    new = [f for f in finalizers if f not in (FINALIZER_ORPHAN, FINALIZER_FOREGROUND)]
    if orphan:
        new.append(FINALIZER_ORPHAN)
    if foreground:
        new.append(FINALIZER_FOREGROUND)
    if set(new) == set(finalizers):
        return False, list(finalizers)
    return True, new


@dataclass(frozen=True)
class DeletePlan:
    """What one DELETE does: ``keep`` (graceful deletion already pending: answer with the
    object as it is), ``mark`` (store ``obj``: deletionTimestamp, grace period, finalizers),
    or ``delete`` (remove it now)."""

    action: str
    obj: dict


def _mark_as_deleting(meta: dict, now: datetime) -> None:
    """Upstream markAsDeleting: deletionTimestamp now (unless already earlier), grace 0, and a
    generation bump on the first mark."""
    existing = meta.get("deletionTimestamp")
    if not existing and int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    if not existing or parse_rfc3339(existing) > now:
        meta["deletionTimestamp"] = rfc3339(now)
    meta["deletionGracePeriodSeconds"] = 0


def plan_delete(obj: dict, options: Mapping, strategy: Strategy, now: datetime) -> DeletePlan:
    """Upstream Store.Delete with rest.BeforeDelete and updateForGracefulDeletionAndFinalizers.

    1. Graceful deletion (Pods): the first DELETE sets deletionTimestamp = now + grace and
       deletionGracePeriodSeconds; a later one may only shorten the grace period, otherwise
       it changes nothing (not even finalizers) and answers with the object.
    2. The propagation policy sets the GC finalizers (:func:`deletion_finalizers_for_gc`);
       an object already marked for deletion gets them updated by a later DELETE.
    3. With finalizers left (or a grace period running) the object is marked and stored;
       without, it goes now.
    """
    options = dict(options)
    grace_option = options.get("gracePeriodSeconds")
    if isinstance(grace_option, int) and grace_option < 0:
        grace_option = options["gracePeriodSeconds"] = 1  # upstream: negative means 1 s
    new = copy.deepcopy(obj)
    meta = new["metadata"]
    graceful = False
    if strategy.graceful_deletion:
        if meta.get("deletionTimestamp"):
            current = meta.get("deletionGracePeriodSeconds")
            if current:  # a grace period is running: it may only get shorter
                if grace_option is None or grace_option >= current:
                    return DeletePlan("keep", obj)
                started = parse_rfc3339(meta["deletionTimestamp"]) - timedelta(seconds=current)
                meta["deletionTimestamp"] = rfc3339(started + timedelta(seconds=grace_option))
                meta["deletionGracePeriodSeconds"] = grace_option
                graceful = True
        else:
            period = strategy.graceful_delete_seconds(obj, options)
            meta["deletionTimestamp"] = rfc3339(now + timedelta(seconds=period))
            meta["deletionGracePeriodSeconds"] = period
            if int(meta.get("generation") or 0) > 0:
                meta["generation"] = int(meta["generation"]) + 1
            graceful = True
    changed, finalizers = deletion_finalizers_for_gc(list(meta.get("finalizers") or []), options, strategy.gc_policy)
    if changed:
        if finalizers:
            meta["finalizers"] = finalizers
        else:
            meta.pop("finalizers", None)
    pending_finalizers = strategy.deletion_blocked(new)
    if not graceful:
        if not pending_finalizers:
            return DeletePlan("delete", obj)
        _mark_as_deleting(meta, now)
    elif not pending_finalizers and not meta.get("deletionGracePeriodSeconds"):
        return DeletePlan("delete", obj)
    strategy.mark_deleting(new)
    return DeletePlan("mark", new)


def _delete_during_update(old: dict, new: dict, strategy: Strategy) -> bool:
    """Upstream shouldDeleteDuringUpdate: an update of an object marked for deletion with a
    zero grace period that leaves no finalizers deletes it (the garbage collector removing
    ``orphan`` / ``foregroundDeletion`` completes the deletion this way). A Pod still in its
    grace period stays until its kubelet deletes it."""
    meta, old_meta = new["metadata"], old["metadata"]
    return bool(meta.get("deletionTimestamp")) and not strategy.deletion_blocked(new) and not old_meta.get("deletionGracePeriodSeconds")


class Store:
    def __init__(self, info: KindInfo, backend: storage.Backend, clock: Clock, registry: "Registry", strategy: Strategy):
        self.info = info
        self.backend = backend
        self.clock = clock
        self.registry = registry
        self.strategy = strategy
        self._now_second: int | None = None  # now_text's last second and its text
        self._now_text = ""

    # ---- helpers -----------------------------------------------------------------------------
    def _key(self, namespace: str | None, name: str) -> str:
        return self.info.key(namespace, name)

    def _not_found(self, name: str) -> StatusError:
        return errors.not_found(self.info.resource, name, self.info.group)

    def now_text(self) -> str:
        """The clock's time as ``metav1.Time`` is written (UTC, whole seconds): formatted once a
        second, not for every object a create stamps (its own and its IPAddress's)."""
        now = self.clock.now()
        second = math.floor(now.timestamp())
        if second != self._now_second:
            self._now_second, self._now_text = second, rfc3339(now)
        return self._now_text

    async def _get_kv(self, namespace: str | None, name: str) -> storage.KeyValue:
        kv = await self.backend.get(self._key(namespace, name))
        if kv is None:
            raise self._not_found(name)
        return kv

    def _invalid(self, name: str, field_errors) -> StatusError:
        return errors.invalid(self.info.kind, name, field_errors, self.info.group)

    def _check_preconditions(self, name: str, meta: dict, preconditions: Mapping) -> None:
        """Upstream storage.Preconditions: a uid or resourceVersion the client pinned must be the
        stored object's, else 409 Conflict (InterpretUpdateError/InterpretDeleteError)."""
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise errors.conflict(self.info.resource, name, self.info.group,
                                  f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {meta.get('uid')}")
        if preconditions.get("resourceVersion") and str(preconditions["resourceVersion"]) != meta["resourceVersion"]:
            raise errors.conflict(self.info.resource, name, self.info.group,
                                  f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, ResourceVersion in object meta: {meta['resourceVersion']}")

    # ---- read --------------------------------------------------------------------------------
    async def get(self, namespace: str | None, name: str) -> dict:
        return decode(await self._get_kv(namespace, name))

    async def list(self, namespace: str | None, opts: ListOptions) -> tuple[list[dict], dict]:
        prefix = self.info.key_prefix(namespace)
        revision = 0
        start_key = prefix
        if opts.continue_token:
            revision, start_key = decode_continue(opts.continue_token, prefix)
        elif opts.resource_version and opts.resource_version_match == "Exact":
            revision = opts.resource_version
        name = opts.field_selector.exact_name() if opts.field_selector is not None else None
        try:
            if name is not None and "/" not in name:
                return await self._list_one(namespace, name, opts, revision)
            return await self._list_range(prefix, start_key, opts, revision)
        except storage.Compacted:
            if opts.continue_token:
                raise errors.gone(_CONTINUE_TOO_OLD) from None
            raise errors.gone(f"too old resource version: {opts.resource_version} ({self.backend.compact_revision()})") from None
        except storage.FutureRevision as exc:
            raise StatusError(504, "Timeout", f"Too large resource version: {exc.requested}, current: {exc.current}") from None

    async def _list_one(self, namespace, name, opts: ListOptions, revision: int) -> tuple[list[dict], dict]:
        at = revision or await self.backend.current_revision()
        items = []
        if self.info.namespaced and namespace is None:
            result = await self.backend.list(self.info.key_prefix(), revision=at)
            items = [decode(kv) for kv in result.kvs if kv.key.rsplit("/", 1)[-1] == name]
        else:
            kv = await self.backend.get(self._key(namespace, name), revision=at)
            items = [decode(kv)] if kv else []
        return [o for o in items if opts.matches(o)], {"resourceVersion": str(at)}

    async def _list_range(self, prefix: str, start_key: str, opts: ListOptions, revision: int) -> tuple[list[dict], dict]:
        """One page. Without selectors the backend's limit is the page; with selectors, fetch
        batches until the page is full (as etcd3's store does), so the token may point past
        non-matching keys."""
        limit = max(0, opts.limit)
        if not opts.filtered:
            result = await self.backend.list(prefix, revision=revision, limit=limit, start_key=start_key)
            meta: dict = {"resourceVersion": str(result.revision)}
            if result.more and result.kvs:
                meta["continue"] = encode_continue(result.revision, result.kvs[-1].key[len(prefix):] + "\x00")
                meta["remainingItemCount"] = result.remaining
            return [decode(kv) for kv in result.kvs], meta
        items: list[dict] = []
        at, next_start = revision, start_key
        batch = max(limit * 2, 256) if limit else 0
        while True:
            result = await self.backend.list(prefix, revision=at, limit=batch, start_key=next_start)
            at = result.revision
            for kv in result.kvs:
                obj = decode(kv)
                if opts.matches(obj):
                    items.append(obj)
                    if limit and len(items) == limit:
                        next_start = kv.key + "\x00"
                        break
            else:
                if result.more and result.kvs:
                    next_start = result.kvs[-1].key + "\x00"
                    continue
                return items, {"resourceVersion": str(at)}
            break
        meta = {"resourceVersion": str(at)}
        if (await self.backend.list(prefix, revision=at, limit=1, start_key=next_start)).kvs:
            meta["continue"] = encode_continue(at, next_start[len(prefix):])
        return items, meta

    # ---- create ------------------------------------------------------------------------------
    async def admit_namespace_lifecycle(self, namespace: str | None, obj: dict | None = None) -> None:
        """NamespaceLifecycle admission for a create (admission/namespace_lifecycle.py): 404 for a
        missing namespace, 403 for one being deleted. Public: a subresource's create that stores
        nothing of its own kind (the Eviction of a Pod) is admitted through it too."""
        if not self.info.namespaced:
            return
        terminating = await self.registry.namespace_lister.lookup(self.backend, self.registry.store("", "namespaces").info, namespace or "")
        if terminating is None:
            raise errors.not_found("namespaces", namespace or "")
        if terminating:
            raise namespace_lifecycle.terminating(self.info, obj, namespace or "")

    async def prepare_new(self, namespace: str | None, obj: dict, *, field_manager: str, managed: bool = True) -> dict:
        """Everything a create does before the write: the object as it would be stored (no
        side effects: allocations are only checked, as for a dry run)."""
        new, txn = await self._prepare_new(namespace, obj, field_manager=field_manager, managed=managed, dry_run=True)
        txn.revert()
        return new

    async def _prepare_new(self, namespace: str | None, obj: dict, *, field_manager: str, managed: bool, dry_run: bool) -> tuple[dict, Txn]:
        obj = copy_json(obj)
        obj["apiVersion"], obj["kind"] = self.info.api_version, self.info.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise self._invalid("", [errors.invalid_value("metadata", meta, "must be an object")])
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        if self.info.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            meta["name"] = meta["generateName"] + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
        for system_field in _SYSTEM_METADATA:
            meta.pop(system_field, None)
        meta.pop("selfLink", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now = self.now_text()
        if self.strategy.bumps_generation:
            meta["generation"] = 1
        self.strategy.prepare_for_create(obj)
        self.strategy.default(obj)
        _omit_empty_lists(meta)
        txn = await self.strategy.begin_create(obj, dry_run)
        try:
            field_errors = self.strategy.validate(obj)
            if field_errors:
                raise self._invalid(meta.get("name") or "", field_errors)
            if managed:
                track_update(None, obj, manager=field_manager, schema=self.info.schema, api_version=self.info.api_version, now=now)
        except BaseException:
            txn.revert()
            raise
        return obj, txn

    async def create(self, namespace: str | None, obj: dict, *, field_manager: str, dry_run: bool = False, managed: bool = True) -> dict:
        await self.admit_namespace_lifecycle(namespace, obj)
        name_collisions = 0
        # an allocator's stale choice retries with the choice marked taken, so those retries
        # end at the latest with "range is full"; only generated names have an attempt limit
        while name_collisions < _MAX_NAME_ATTEMPTS:
            new, txn = await self._prepare_new(namespace, obj, field_manager=field_manager, managed=managed, dry_run=dry_run)
            key = self._key(namespace, new["metadata"]["name"])
            if dry_run:
                txn.revert()
                if await self.backend.get(key) is not None:
                    raise errors.already_exists(self.info.resource, new["metadata"]["name"], self.info.group)
                return new
            try:
                result = await self.backend.txn([*txn.ops, storage.Create(key, encode(new))])
            except storage.KeyExists as exc:
                failure = self._create_conflict(exc.key, key, obj, new, txn)
                txn.revert()
                if failure is None:
                    name_collisions += exc.key == key
                    continue
                raise failure from None
            except BaseException:
                txn.revert()
                raise
            await txn.commit()
            new["metadata"]["resourceVersion"] = str(result.revision)
            return new
        raise errors.StatusError(504, "AlreadyExists", "failed to generate a unique name")

    def _create_conflict(self, conflict_key: str, key: str, obj: dict, new: dict, txn: Txn) -> StatusError | None:
        """The error for a create whose transaction hit an existing key; None means retry
        (a generated name or an allocator's choice collided)."""
        if conflict_key == key:
            meta = obj.get("metadata") or {}
            if not meta.get("name") and meta.get("generateName"):
                return None
            return errors.already_exists(self.info.resource, new["metadata"]["name"], self.info.group)
        if txn.owns(conflict_key):
            return txn.conflict(conflict_key)
        return errors.internal(f"storage key {conflict_key} already exists")

    # ---- update ------------------------------------------------------------------------------
    async def guaranteed_update(
        self,
        namespace: str | None,
        name: str,
        mutate: Callable[[dict], dict],
        *,
        field_manager: str,
        subresource: str = "",
        dry_run: bool = False,
        precondition_rv: int | None = None,
        track: bool = True,
    ) -> dict:
        """Read, ``mutate(current) -> desired``, write at the read revision; retry lost races.

        ``mutate`` receives a private copy of the current object (with its resourceVersion) and
        may raise StatusError. A desired object whose resourceVersion differs from the current
        one is a 409 (the client's precondition)."""
        while True:
            kv = await self._get_kv(namespace, name)
            old = decode(kv)
            desired = mutate(decode(kv))  # the private copy: a second decode, ~10x cheaper than a deepcopy
            wanted_rv = (desired.get("metadata") or {}).get("resourceVersion") if isinstance(desired.get("metadata"), dict) else None
            if precondition_rv is not None and precondition_rv != kv.mod_revision:
                raise errors.conflict(self.info.resource, name, self.info.group)
            if wanted_rv not in (None, "") and str(wanted_rv) != str(kv.mod_revision):
                raise errors.conflict(self.info.resource, name, self.info.group)
            new, txn = await self._prepare_update(old, desired, field_manager=field_manager, subresource=subresource, track=track, dry_run=dry_run)
            value = _changed_value(new, kv, old)
            if dry_run or value is None:
                txn.revert()
                return new if dry_run and value is not None else old
            meta = new["metadata"]
            key = self._key(namespace, name)
            if _delete_during_update(old, new, self.strategy):
                txn.revert()
                txn = await self.strategy.begin_delete(old)
                write: storage.Op = storage.Delete(key, kv.mod_revision)
            else:
                write = storage.Update(key, value, kv.mod_revision)
            result = await self._write(txn, write, name)
            if result is None:
                continue
            meta["resourceVersion"] = str(result.revision)
            return new

    async def update_in_storage(self, namespace: str | None, name: str, mutate: Callable[[dict], dict], *,
                          preconditions: Mapping | None = None, dry_run: bool = False) -> dict:
        """Upstream ``Storage.GuaranteedUpdate`` on its own, as subresource REST code calls it
        (BindingREST): read, check ``preconditions`` (uid, resourceVersion), ``mutate(current)``,
        write at the read revision, and retry a lost race. No strategy, no validation, no
        managedFields: the mutation is the whole rule (a Pod update could never set
        ``spec.nodeName``). ``mutate`` may raise to refuse."""
        while True:
            kv = await self._get_kv(namespace, name)
            current = decode(kv)
            self._check_preconditions(name, current["metadata"], preconditions or {})
            new = mutate(decode(kv))  # a second decode is the copy: ~10x cheaper than deepcopy of the first
            value = None if dry_run else _changed_value(new, kv, current)
            if value is None:
                return new
            result = await self._write(Txn(), storage.Update(kv.key, value, kv.mod_revision), name)
            if result is None:
                continue
            new["metadata"]["resourceVersion"] = str(result.revision)
            return new

    async def _write(self, txn: Txn, write: storage.Op, name: str) -> storage.TxnResult | None:
        """One transaction: the strategy's operations and the object's own write, then the
        Txn's commit hooks. None means a lost race: re-read and try again (a precondition the
        client pinned is checked on the re-read). A vanished object is a 404; an allocation
        record that already exists is the allocator's to judge (retry, or its error)."""
        try:
            result = await self.backend.txn([*txn.ops, write])
        except storage.RevisionMismatch:
            txn.revert()
            return None
        except storage.KeyNotFound as exc:
            txn.revert()
            if exc.key == write.key:
                raise self._not_found(name) from None
            return None
        except storage.KeyExists as exc:
            failure = txn.conflict(exc.key) if txn.owns(exc.key) else errors.internal(f"storage key {exc.key} already exists")
            txn.revert()
            if failure is None:
                return None
            raise failure from None
        except BaseException:
            txn.revert()
            raise
        await txn.commit()
        return result

    async def _prepare_update(self, old: dict, desired: dict, *, field_manager: str, subresource: str, track: bool, dry_run: bool) -> tuple[dict, Txn]:
        if not isinstance(desired.get("metadata"), dict):
            raise self._invalid(old["metadata"]["name"], [errors.invalid_value("metadata", desired.get("metadata"), "must be an object")])
        new = desired
        new["apiVersion"], new["kind"] = self.info.api_version, self.info.kind
        meta, old_meta = new["metadata"], old["metadata"]
        for system_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation", "name", "namespace"):
            if system_field == "uid" and meta.get("uid"):
                continue  # upstream BeforeUpdate keeps a given uid: a different one is "field is immutable"
            if system_field in old_meta:
                meta[system_field] = old_meta[system_field]
            else:
                meta.pop(system_field, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if subresource and meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            # upstream validates the common metadata of every write, a subresource's too
            # (BeforeUpdate's validateCommonFields): another uid is "field is immutable", which is
            # what pins a status patch carrying the uid (PatchPodStatus, PodGC) to that very object;
            # the subresource strategies below would otherwise drop it with the rest of metadata
            raise self._invalid(old_meta["name"], [errors.invalid_value("metadata.uid", meta["uid"], "field is immutable")])
        if subresource == "status":
            self.strategy.prepare_for_status_update(new, old)
        elif subresource == "finalize":
            self.strategy.prepare_for_finalize(new, old)
        elif subresource:  # another view of the object (certificatesigningrequests/approval)
            self.strategy.prepare_for_subresource_update(subresource, new, old)
        else:
            self.strategy.prepare_for_update(new, old)
        self.strategy.default(new)
        _omit_empty_lists(new["metadata"])
        if self.strategy.bumps_generation and self.strategy.generation_changed(new, old):
            meta["generation"] = int(old_meta.get("generation", 1)) + 1
        txn = await self.strategy.begin_update(new, old, dry_run, subresource)
        try:
            field_errors = (self.strategy.validate_subresource_update(subresource, new, old) if subresource
                            else self.strategy.validate_update(new, old))
            if field_errors:
                raise self._invalid(old_meta["name"], field_errors)
            if track:
                track_update(old, new, manager=field_manager, schema=self.info.schema, api_version=self.info.api_version, now=self.now_text(), subresource=subresource)
        except BaseException:
            txn.revert()
            raise
        return new, txn

    async def update(self, namespace: str | None, name: str, obj: dict, *, field_manager: str, subresource: str = "", dry_run: bool = False) -> tuple[dict, bool]:
        """PUT: returns (object, created)."""
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        body_rv = parse_resource_version(str(meta.get("resourceVersion"))) if meta.get("resourceVersion") not in (None, "") else None
        if await self.backend.get(self._key(namespace, name)) is None:
            if self.strategy.allow_create_on_update and not subresource:
                await self.admit_namespace_lifecycle(namespace, obj)
                if body_rv:
                    raise self._not_found(name)
                return await self.create(namespace, obj, field_manager=field_manager, dry_run=dry_run), True
            raise self._not_found(name)

        def replace(current: dict) -> dict:
            desired = copy_json(obj)
            desired_meta = desired.setdefault("metadata", {})
            if isinstance(desired_meta, dict) and body_rv is None:
                desired_meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            return desired

        return await self.guaranteed_update(namespace, name, replace, field_manager=field_manager, subresource=subresource, dry_run=dry_run), False

    # ---- delete ------------------------------------------------------------------------------
    async def delete(self, namespace: str | None, name: str, options: dict, *, dry_run: bool = False) -> tuple[dict, bool]:
        """Returns (object, deleted_now). Marks instead of deleting when finalizers (including
        the garbage collector's, from the propagation policy) or a grace period keep the object
        around; see :func:`plan_delete`."""
        preconditions = options.get("preconditions") or {}
        while True:
            kv = await self._get_kv(namespace, name)
            obj = decode(kv)
            meta = obj["metadata"]
            self._check_preconditions(name, meta, preconditions)
            plan = plan_delete(obj, options, self.strategy, self.clock.now())
            if plan.action == "keep":
                return obj, False
            if dry_run and hasattr(self.strategy, "admit_delete"):
                await self.strategy.admit_delete(obj)  # admission refuses dry runs too
            if plan.action == "mark":
                new = plan.obj
                value = None if dry_run else _changed_value(new, kv, obj)
                if value is None:
                    return new, False
                # marking is an update: hooks see it (a ServiceCIDR being deleted stops serving)
                txn = await self.strategy.begin_update(new, obj, False, "")
                result = await self._write(txn, storage.Update(kv.key, value, kv.mod_revision), name)
                if result is None:
                    continue
                new["metadata"]["resourceVersion"] = str(result.revision)
                return new, False
            if dry_run:
                return obj, True
            result = await self._write(await self.strategy.begin_delete(obj), storage.Delete(kv.key, kv.mod_revision), name)
            if result is None:
                continue
            obj["metadata"]["resourceVersion"] = str(result.revision)
            return obj, True

    async def delete_collection(self, namespace: str | None, opts: ListOptions, options: dict, *, dry_run: bool = False) -> list[dict]:
        items, _ = await self.list(namespace, ListOptions(opts.label_selector, opts.field_selector))
        deleted = []
        for item in items:
            try:
                obj, _ = await self.delete(item["metadata"].get("namespace"), item["metadata"]["name"], options, dry_run=dry_run)
            except StatusError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(obj)
        return deleted

    # ---- watch -------------------------------------------------------------------------------
    async def watch(self, namespace: str | None, opts: ListOptions, *, send_initial: bool) -> "ObjectWatch":
        """Open a watch now (410 Expired is raised here, before anything streams). With
        ``send_initial`` it first lists and watches after that list's revision."""
        backend = self.backend
        prefix = self.info.key_prefix(namespace)
        initial: list[storage.KeyValue] = []
        after = opts.resource_version or 0
        if send_initial:
            listed = await backend.list(prefix)
            initial, after = listed.kvs, listed.revision
        elif after == 0:
            after = await backend.current_revision()
        try:
            stream = await backend.watch(prefix, after)
        except storage.Compacted:
            raise errors.gone(f"too old resource version: {after} ({backend.compact_revision()})") from None
        except storage.FutureRevision as exc:
            raise StatusError(504, "Timeout", f"Too large resource version: {exc.requested}, current: {exc.current}") from None
        return ObjectWatch(self, opts, initial, stream)


class ObjectWatch:
    """A watch of one kind's objects: (type, object) pairs, types ADDED / MODIFIED / DELETED /
    BOOKMARK. With ``send_initial`` it first lists (synthetic ADDEDs) and watches after that
    list's revision, so nothing falls between. Selector transitions become ADDED/DELETED as in
    the watch cache. ``request_progress()`` makes a BOOKMARK follow every event already due,
    where the backend can order it with the events (etcd before 3.4.31 / 3.5.13 cannot: no
    BOOKMARK is requested there, storage/etcd/watch.py).
    Opened by :meth:`Store.watch`."""

    def __init__(self, store: Store, opts: ListOptions, initial: list[storage.KeyValue], stream: storage.Watch):
        self.store, self.opts = store, opts
        self._initial = initial
        self._stream = stream

    def request_progress(self) -> None:
        self._stream.request_progress()

    def close(self) -> None:
        self._stream.close()

    async def __aiter__(self) -> AsyncIterator[tuple[str, dict]]:
        try:
            for kv in self._initial:
                obj = decode(kv)
                if self.opts.matches(obj):
                    yield "ADDED", obj
            self._initial = []
            async for batch in self._stream:
                for event in batch:
                    translated = self._translate(event)
                    if translated is not None:
                        yield translated
        finally:
            self._stream.close()

    def _translate(self, event: storage.Event) -> tuple[str, dict] | None:
        opts, revision = self.opts, event.kv.mod_revision
        if event.type == "PROGRESS":
            info = self.store.info
            return "BOOKMARK", {"kind": info.kind, "apiVersion": info.api_version, "metadata": {"resourceVersion": str(revision)}}
        if event.type == "DELETE":
            obj = decode(event.kv, revision)
            return ("DELETED", obj) if opts.matches(obj) else None
        obj = decode(event.kv)
        now_matches = opts.matches(obj)
        if event.prev_kv is None or event.is_create:
            return ("ADDED", obj) if now_matches else None
        if not opts.filtered:
            return "MODIFIED", obj
        prev = decode(event.prev_kv, revision)
        was_matching = opts.matches(prev)
        if now_matches:
            return ("MODIFIED" if was_matching else "ADDED"), obj
        return ("DELETED", prev) if was_matching else None


class Registry:
    """Every served kind's Store, over one Backend."""

    def __init__(self, kinds: list[KindInfo], backend: storage.Backend, clock: Clock,
                 strategies: Mapping[str, Callable[[KindInfo], Strategy]] | None = None,
                 namespace_lister: namespace_lifecycle.NamespaceLister | None = None):
        self.backend = backend
        self.clock = clock
        # where a create's namespace is read: NamespaceLifecycle's lister (the watch cache, once
        # the apiserver gives it one), storage without it
        self.namespace_lister = namespace_lister or namespace_lifecycle.NamespaceLister()
        self.stores: dict[tuple[str, str], Store] = {}
        for info in kinds:
            if info.create_only:  # access reviews and the like: answered, never stored
                continue
            self.stores[(info.group, info.resource)] = Store(info, backend, clock, self, strategy_for(info, strategies))

    def store(self, group: str, resource: str) -> Store | None:
        return self.stores.get((group, resource))

    def namespaced_stores(self) -> list[Store]:
        return [s for s in self.stores.values() if s.info.namespaced]
