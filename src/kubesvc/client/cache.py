"""The informer's local copy of the cluster: an indexed object store (client-go ``cache.Indexer``).

Objects are stored under their key, ``namespace/name`` (just ``name`` for cluster-scoped
kinds), exactly as client-go's ``MetaNamespaceKeyFunc`` spells it, so keys can travel through
a work queue and be looked up again later.

Besides the primary key, an ``Indexer`` keeps named *indexes*: an index function maps an
object to zero or more values, and ``by_index(name, value)`` returns every object filed under
that value. Controllers use them for the questions they ask on every sync, e.g. "all
EndpointSlices of Service ns/web" via the ``kubernetes.io/service-name`` label, or "all Pods in
namespace ns", without scanning the store.

There are no locks: every method runs to completion without awaiting, so under asyncio no
other task can observe a half-done change. Stored objects are shared with every reader;
treat them as read-only (copy before changing, as with client-go's cache).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

IndexFunc = Callable[[dict], Iterable[str]]

NAMESPACE_INDEX = "namespace"


def object_key(obj: dict) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else meta["name"]


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)``; the namespace is "" for cluster-scoped keys."""
    namespace, _, name = key.rpartition("/")
    return namespace, name


def index_by_namespace(obj: dict) -> list[str]:
    namespace = obj["metadata"].get("namespace")
    return [namespace] if namespace else []


def index_by_label(label: str) -> IndexFunc:
    """Index objects by one label's value, namespaced (``ns/value``) so equal values in
    different namespaces stay apart; e.g. ``index_by_label("kubernetes.io/service-name")``
    files an EndpointSlice under its Service's key."""

    def index(obj: dict) -> list[str]:
        meta = obj["metadata"]
        value = (meta.get("labels") or {}).get(label)
        if value is None:
            return []
        namespace = meta.get("namespace")
        return [f"{namespace}/{value}" if namespace else value]

    return index


class Indexer:
    """Objects by key, plus named secondary indexes kept in step on every change."""

    def __init__(self, indexers: dict[str, IndexFunc] | None = None):
        self._items: dict[str, dict] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self.add_indexers(indexers or {NAMESPACE_INDEX: index_by_namespace})

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add index functions; existing objects are indexed at once."""
        for name, func in indexers.items():
            if name in self._index_funcs:
                raise ValueError(f"indexer {name!r} already exists")
            self._index_funcs[name] = func
            self._indices[name] = {}
            for key, obj in self._items.items():
                self._file(name, key, func(obj))

    def upsert(self, obj: dict) -> dict | None:
        """Store ``obj`` under its key; return the object it replaced, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        for name, func in self._index_funcs.items():
            self._file(name, key, func(obj))
        return old

    def remove(self, key: str) -> dict | None:
        """Drop the object under ``key``; return it, or None if there was none."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def get_by_key(self, key: str) -> dict | None:
        return self._items.get(key)

    def get(self, name: str, namespace: str | None = None) -> dict | None:
        return self._items.get(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[dict]:
        return list(self._items.values())

    def keys(self) -> list[str]:
        return list(self._items)

    def by_index(self, index_name: str, value: str) -> list[dict]:
        return [self._items[key] for key in sorted(self.index_keys(index_name, value))]

    def index_keys(self, index_name: str, value: str) -> set[str]:
        """Keys filed under ``value`` in the named index."""
        if index_name not in self._indices:
            raise KeyError(f"index {index_name!r} does not exist")
        return set(self._indices[index_name].get(value, ()))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def _file(self, index_name: str, key: str, values: Iterable[str]) -> None:
        index = self._indices[index_name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: dict) -> None:
        for name, func in self._index_funcs.items():
            index = self._indices[name]
            for value in func(obj):
                bucket = index.get(value)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del index[value]
