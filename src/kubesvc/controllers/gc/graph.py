"""The dependency graph: who owns whom, by uid (upstream graph.go and graph_builder.go).

Every object the garbage collector's informers see is a :class:`Node`, keyed by uid. A node
knows its ``owners`` (its ``metadata.ownerReferences``, as written) and its ``dependents``
(the nodes whose ownerReferences name its uid). An owner that has not been observed (yet, or
ever) still gets a node, a *virtual* one, built from the coordinates in the dependent's
reference: apiVersion, kind, name, uid, and the dependent's namespace (an owner of a namespaced
kind can only live in its dependent's namespace; a cluster-scoped owner has none, which the
garbage collector sorts out when it asks the apiserver). A virtual node goes to the
attempt-to-delete queue at once, where a live GET decides: the owner exists (the informer will
report it soon, the node stops being virtual) or it does not (a *virtual delete event* removes
the node and its dependents are re-checked).

:meth:`Graph.process` is upstream's ``processGraphChanges``: one informer event (or virtual
delete event) in, the graph updated, and an :class:`Effects` out, naming the nodes to queue
for attempt-to-delete (owners may be gone) and attempt-to-orphan (an owner was marked for
deletion with the ``orphan`` finalizer), and dependents whose ownerReference names an owner in
another namespace (a Warning Event ``OwnerRefInvalidNamespace``). It does no I/O: the
controller shell applies the effects. The graph is only ever changed here, by one task.

Transitions that start work (``processTransitions``):

* an object newly marked for deletion with ``orphan``: attempt-to-orphan (remove its
  ownerReference from every dependent, then the finalizer);
* one newly marked with ``foregroundDeletion``: it is *deleting dependents*; it and every
  dependent go to attempt-to-delete;
* a node removed (its object deleted): its dependents go to attempt-to-delete, its identity to
  the absent-owner cache, and its owners that are deleting dependents are re-checked (this
  may have been the last dependent blocking them);
* a dependent dropping (or un-blocking) an ownerReference with ``blockOwnerDeletion: true``
  re-checks that owner for the same reason.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Iterable

from kubesvc.api.validation_meta import FINALIZER_FOREGROUND, FINALIZER_ORPHAN

ADD, UPDATE, DELETE = "add", "update", "delete"


@dataclass(frozen=True, order=True)
class ObjectReference:
    """An object's identity in the graph (upstream ``objectReference``): the coordinates of an
    ownerReference plus a namespace ("" for cluster-scoped). Field order is upstream's
    ``referenceLessThan`` order: kind, apiVersion, namespace, name, uid."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str

    @classmethod
    def from_owner_reference(cls, ref: dict, namespace: str) -> ObjectReference:
        return cls(ref.get("kind", ""), ref.get("apiVersion", ""), namespace, ref.get("name", ""), ref.get("uid", ""))

    def __str__(self) -> str:
        return f"[{self.api_version}/{self.kind}, namespace: {self.namespace}, name: {self.name}, uid: {self.uid}]"


def matches_coordinates(ref: dict, identity: ObjectReference) -> bool:
    """upstream ownerReferenceMatchesCoordinates: uid, name, kind and apiVersion agree."""
    return (ref.get("uid", ""), ref.get("name", ""), ref.get("kind", ""), ref.get("apiVersion", "")) == (
        identity.uid, identity.name, identity.kind, identity.api_version)


def is_blocking(ref: dict) -> bool:
    return ref.get("blockOwnerDeletion") is True


def being_deleted(meta: dict) -> bool:
    return bool(meta.get("deletionTimestamp"))


def has_finalizer(meta: dict, finalizer: str) -> bool:
    return finalizer in (meta.get("finalizers") or [])


class Node:
    """One object (or a virtual owner). Compared by identity of the Python object, as
    upstream compares ``*node`` pointers: queues hold nodes, and a replaced node is a
    different item."""

    __slots__ = ("identity", "dependents", "owners", "deleting_dependents", "being_deleted", "virtual")

    def __init__(self, identity: ObjectReference, owners: list[dict] | None = None, *, virtual: bool = False,
                 being_deleted: bool = False, deleting_dependents: bool = False):
        self.identity = identity
        self.owners: list[dict] = list(owners or [])
        self.dependents: set[Node] = set()
        self.virtual = virtual
        self.being_deleted = being_deleted
        self.deleting_dependents = deleting_dependents

    @property
    def observed(self) -> bool:
        return not self.virtual

    def clone(self) -> Node:
        copy = Node(self.identity, self.owners, virtual=self.virtual, being_deleted=self.being_deleted,
                    deleting_dependents=self.deleting_dependents)
        copy.dependents = set(self.dependents)
        return copy

    def blocking_dependents(self) -> list[Node]:
        """Dependents whose ownerReference to this node has ``blockOwnerDeletion: true``: a
        foreground deletion waits for them."""
        uid = self.identity.uid
        return [dep for dep in self.dependents if any(ref.get("uid") == uid and is_blocking(ref) for ref in dep.owners)]

    def __repr__(self) -> str:
        flags = [name for name, on in (("virtual", self.virtual), ("beingDeleted", self.being_deleted),
                                        ("deletingDependents", self.deleting_dependents)) if on]
        return f"Node({self.identity}{', ' + ', '.join(flags) if flags else ''})"


@dataclass
class GraphEvent:
    """An informer event, or a virtual delete event (``virtual``) the garbage collector makes
    when the apiserver says an object the graph knows does not exist. ``api_version`` and
    ``kind`` are the monitored resource's (a watched object's own fields may be absent)."""

    type: str  # ADD | UPDATE | DELETE
    obj: dict
    api_version: str
    kind: str
    old: dict | None = None
    virtual: bool = False

    @property
    def meta(self) -> dict:
        return self.obj.get("metadata") or {}

    def identity(self) -> ObjectReference:
        meta = self.meta
        return ObjectReference(self.kind, self.api_version, meta.get("namespace") or "", meta.get("name", ""), meta.get("uid", ""))


@dataclass
class Effects:
    """What one graph change asks of the garbage collector, in order."""

    attempt_to_delete: list[Node] = field(default_factory=list)
    attempt_to_delete_rate_limited: list[Node] = field(default_factory=list)
    attempt_to_orphan: list[Node] = field(default_factory=list)
    # (dependent, owner uid): the ownerReference names an owner of another namespace
    invalid_namespace_refs: list[tuple[Node, str]] = field(default_factory=list)


class ReferenceCache:
    """An LRU set of identities known not to exist (upstream ``ReferenceCache``, 500 entries):
    dependents of a deleted owner find it absent without asking the apiserver each."""

    def __init__(self, size: int = 500):
        self.size = size
        self._items: OrderedDict[ObjectReference, None] = OrderedDict()

    def add(self, ref: ObjectReference) -> None:
        self._items[ref] = None
        self._items.move_to_end(ref)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def has(self, ref: ObjectReference) -> bool:
        if ref in self._items:
            self._items.move_to_end(ref)
            return True
        return False

    def __len__(self) -> int:
        return len(self._items)


def references_diffs(old: list[dict], new: list[dict]) -> tuple[list[dict], list[dict], list[tuple[dict, dict]]]:
    """upstream referencesDiffs: (added, removed, changed (old, new)) ownerReferences by uid."""
    old_by_uid = {ref.get("uid"): ref for ref in old}
    added, changed = [], []
    seen = set()
    for ref in new:
        uid = ref.get("uid")
        if uid in old_by_uid:
            if old_by_uid[uid] != ref:
                changed.append((old_by_uid[uid], ref))
            seen.add(uid)
        else:
            added.append(ref)
    removed = [ref for uid, ref in old_by_uid.items() if uid not in seen]
    return added, removed, changed


def deletion_starts_with_finalizer(old: dict | None, new_meta: dict, finalizer: str) -> bool:
    """upstream deletionStartsWithFinalizer: ``new`` is being deleted with ``finalizer`` and
    ``old`` (if any) was not (or lacked it)."""
    if not being_deleted(new_meta) or not has_finalizer(new_meta, finalizer):
        return False
    if old is None:
        return True
    old_meta = old.get("metadata") or {}
    return not being_deleted(old_meta) or not has_finalizer(old_meta, finalizer)


def partition_dependents(dependents: Iterable[Node], owner: ObjectReference) -> tuple[list[Node], list[Node]]:
    """upstream partitionDependents: dependents whose reference to ``owner.uid`` matches all of
    its coordinates, and those with a reference (or namespace) that does not. A dependent with
    two references to the uid may be in both."""
    owner_namespaced = bool(owner.namespace)
    matching, nonmatching = [], []
    for dep in dependents:
        found_match = found_mismatch = False
        if owner_namespaced and owner.namespace != dep.identity.namespace:
            found_mismatch = True
        else:
            for ref in dep.owners:
                if ref.get("uid") == owner.uid:
                    if matches_coordinates(ref, owner):
                        found_match = True
                    else:
                        found_mismatch = True
        if found_match:
            matching.append(dep)
        if found_mismatch:
            nonmatching.append(dep)
    return matching, nonmatching


def alternate_owner_identity(dependents: Iterable[Node], absent: ObjectReference) -> ObjectReference | None:
    """upstream getAlternateOwnerIdentity: another identity the dependents use for the uid of
    ``absent`` (verified absent): the first after it in reference order, else the first."""
    absent_cluster_scoped = not absent.namespace
    seen = {absent}
    first: ObjectReference | None = None
    first_following: ObjectReference | None = None
    for dep in dependents:
        for ref in dep.owners:
            if ref.get("uid") != absent.uid:
                continue
            if matches_coordinates(ref, absent) and (absent_cluster_scoped or absent.namespace == dep.identity.namespace):
                continue
            alt = ObjectReference.from_owner_reference(ref, dep.identity.namespace)
            if absent_cluster_scoped and alt.api_version == absent.api_version and alt.kind == absent.kind:
                alt = replace(alt, namespace="")  # that apiVersion/kind is known cluster-scoped
            if alt in seen:
                continue
            seen.add(alt)
            if first is None or alt < first:
                first = alt
            if absent < alt and (first_following is None or alt < first_following):
                first_following = alt
    return first_following if first_following is not None else first


class Graph:
    """uid -> Node, and the absent-owner cache it shares with the garbage collector."""

    def __init__(self, absent_cache_size: int = 500):
        self.nodes: dict[str, Node] = {}
        self.absent_owners = ReferenceCache(absent_cache_size)

    def get(self, uid: str) -> Node | None:
        return self.nodes.get(uid)

    def __len__(self) -> int:
        return len(self.nodes)

    # ---- processGraphChanges ------------------------------------------------------------------
    def process(self, event: GraphEvent) -> Effects:
        fx = Effects()
        meta = event.meta
        uid = meta.get("uid", "")
        existing = self.nodes.get(uid)
        if existing is not None and not event.virtual and existing.virtual:
            existing = self._observe(existing, event.identity(), fx)
        if event.type in (ADD, UPDATE):
            if existing is None:
                node = Node(event.identity(), meta.get("ownerReferences") or [],
                            being_deleted=being_deleted(meta),
                            deleting_dependents=being_deleted(meta) and has_finalizer(meta, FINALIZER_FOREGROUND))
                self.nodes[uid] = node
                self._add_dependent_to_owners(node, node.owners, fx)
                self._process_transitions(event.old, meta, node, fx)
                return fx
            if not event.virtual and (existing.identity.api_version, existing.identity.kind) != (event.api_version, event.kind):
                existing = self._replace_identity(existing, replace(existing.identity, api_version=event.api_version, kind=event.kind))
            new_owners = list(meta.get("ownerReferences") or [])
            added, removed, changed = references_diffs(existing.owners, new_owners)
            if added or removed or changed:
                self._add_unblocked_owners_to_delete_queue(removed, changed, fx)
                existing.owners = new_owners
                self._add_dependent_to_owners(existing, added, fx)
                self._remove_dependent_from_owners(existing, removed)
            if being_deleted(meta):
                existing.being_deleted = True
            self._process_transitions(event.old, meta, existing, fx)
            return fx
        if existing is None:
            return fx  # a delete of something never seen: nothing to do
        if self._virtual_delete_keeps_node(event, existing, fx):
            return fx
        self._remove_node(existing)
        if existing.dependents:
            self.absent_owners.add(event.identity())
        fx.attempt_to_delete.extend(existing.dependents)
        for ref in existing.owners:
            owner = self.nodes.get(ref.get("uid", ""))
            if owner is not None and owner.deleting_dependents:
                fx.attempt_to_delete.append(owner)  # this may have been its last dependent
        return fx

    def _observe(self, node: Node, observed: ObjectReference, fx: Effects) -> Node:
        """A virtual node's object is seen by an informer: it is real from now on. If the
        dependents guessed its coordinates wrong, those dependents are re-checked."""
        if observed != node.identity:
            _, suspicious = partition_dependents(node.dependents, observed)
            for dep in suspicious:
                if observed.namespace and dep.identity.namespace != observed.namespace:
                    fx.invalid_namespace_refs.append((dep, observed.uid))
                fx.attempt_to_delete.append(dep)
            node = node.clone()
            node.identity = observed
            self.nodes[observed.uid] = node
        node.virtual = False
        return node

    def _replace_identity(self, node: Node, identity: ObjectReference) -> Node:
        """The object is now seen as another apiVersion/kind: a new node in its owners' sets."""
        new = node.clone()
        new.identity = identity
        self.nodes[identity.uid] = new
        for ref in new.owners:
            owner = self.nodes.get(ref.get("uid", ""))
            if owner is not None and node in owner.dependents:
                owner.dependents.discard(node)
                owner.dependents.add(new)
        return new

    def _virtual_delete_keeps_node(self, event: GraphEvent, existing: Node, fx: Effects) -> bool:
        """A virtual delete event says one identity does not exist. Dependents that use other
        coordinates for the same uid keep the node (upstream's handling of owner references
        with a wrong kind, name or namespace); those that match are re-checked now."""
        if not event.virtual:
            return False
        deleted = event.identity()
        if existing.virtual:
            matching, nonmatching = partition_dependents(existing.dependents, deleted)
            if not nonmatching:
                return False
            if matching:
                self.absent_owners.add(deleted)
                fx.attempt_to_delete.extend(matching)
            if existing.identity == deleted:
                alternate = alternate_owner_identity(nonmatching, deleted)
                if alternate is not None:
                    replacement = existing.clone()
                    replacement.identity = alternate
                    self.nodes[alternate.uid] = replacement
                    fx.attempt_to_delete_rate_limited.append(replacement)
            return True
        if existing.identity != deleted:
            matching, _ = partition_dependents(existing.dependents, deleted)
            if matching:
                self.absent_owners.add(deleted)
                fx.attempt_to_delete.extend(matching)
            return True
        return False

    def _add_dependent_to_owners(self, node: Node, owners: list[dict], fx: Effects) -> None:
        """upstream addDependentToOwners: a virtual node for each unknown owner (queued for a
        live check); a dependent whose reference disagrees with a known owner's identity is
        queued for a check of its own."""
        suspicious = False
        for ref in owners:
            owner_uid = ref.get("uid", "")
            owner = self.nodes.get(owner_uid)
            if owner is None:
                owner = Node(ObjectReference.from_owner_reference(ref, node.identity.namespace), virtual=True)
                self.nodes[owner_uid] = owner
                owner.dependents.add(node)
                fx.attempt_to_delete.append(owner)
                continue
            owner.dependents.add(node)
            if suspicious:
                continue
            owner_namespaced = bool(owner.identity.namespace)
            if owner_namespaced and owner.identity.namespace != node.identity.namespace:
                if owner.observed:
                    fx.invalid_namespace_refs.append((node, owner_uid))
                suspicious = True
            elif not matches_coordinates(ref, owner.identity):
                suspicious = True
            elif not owner_namespaced and owner.identity.namespace != node.identity.namespace and owner.virtual:
                suspicious = True  # a virtual cluster-scoped owner: maybe a namespaced kind, misused
        if suspicious:
            fx.attempt_to_delete.append(node)

    def _remove_dependent_from_owners(self, node: Node, owners: list[dict]) -> None:
        for ref in owners:
            owner = self.nodes.get(ref.get("uid", ""))
            if owner is not None:
                owner.dependents.discard(node)

    def _remove_node(self, node: Node) -> None:
        self.nodes.pop(node.identity.uid, None)
        self._remove_dependent_from_owners(node, node.owners)

    def _add_unblocked_owners_to_delete_queue(self, removed: list[dict], changed: list[tuple[dict, dict]], fx: Effects) -> None:
        for ref in removed:
            if is_blocking(ref) and (owner := self.nodes.get(ref.get("uid", ""))) is not None:
                fx.attempt_to_delete.append(owner)
        for old_ref, new_ref in changed:
            if is_blocking(old_ref) and not is_blocking(new_ref) and (owner := self.nodes.get(new_ref.get("uid", ""))) is not None:
                fx.attempt_to_delete.append(owner)

    @staticmethod
    def _process_transitions(old: dict | None, meta: dict, node: Node, fx: Effects) -> None:
        if deletion_starts_with_finalizer(old, meta, FINALIZER_ORPHAN):
            fx.attempt_to_orphan.append(node)
            return
        if deletion_starts_with_finalizer(old, meta, FINALIZER_FOREGROUND):
            node.deleting_dependents = True  # a node added as virtual has it unset
            fx.attempt_to_delete.extend(node.dependents)
            fx.attempt_to_delete.append(node)
