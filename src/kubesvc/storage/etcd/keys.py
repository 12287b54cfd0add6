"""Where kubesvc's keys live in etcd: ``--etcd-prefix`` (default ``/registry``), as kube-apiserver.

The registry forms upstream's keys with the default prefix already
(``/registry/services/specs/<ns>/<name>``, ``/registry/ipaddresses/<ip>``; api/scheme.py).
kube-apiserver joins ``--etcd-prefix`` in front of the resource prefix
(``etcd3.New``: ``path.Join("/", prefix)``), so with ``--etcd-prefix /other`` a Service is
``/other/services/specs/<ns>/<name>``. :class:`KeySpace` does exactly that swap of the leading
``/registry`` and back, and nothing else: with the default prefix it is the identity.

A prefix (for list, count and watch) becomes etcd's ``[key, range_end)``, ``range_end`` being the
prefix with its last byte incremented (clientv3's ``GetPrefixRangeEnd``). The empty prefix,
which the watch cache uses for "everything", is the range of ``<--etcd-prefix>/``: every key
kubesvc writes is in it, the compactor's ``compact_rev_key`` too (compactor.py says why), and
nothing of another ``--etcd-prefix`` sharing the etcd (``/registry2/...``).
"""

from __future__ import annotations

from dataclasses import dataclass

REGISTRY = "/registry"


def bytes_prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for every key starting with ``prefix``: trailing 0xff bytes dropped, the
    last byte incremented; ``b"\\0"`` (all keys) when nothing is left."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"
    return stripped[:-1] + bytes([stripped[-1] + 1])


@dataclass(frozen=True)
class KeySpace:
    prefix: str = REGISTRY  # --etcd-prefix, normalised as path.Join("/", prefix)

    @classmethod
    def of(cls, etcd_prefix: str) -> "KeySpace":
        parts = [part for part in etcd_prefix.split("/") if part]
        return cls("/" + "/".join(parts))

    def key(self, key: str) -> bytes:
        if not key.startswith(REGISTRY):
            raise ValueError(f"storage key {key!r} is outside {REGISTRY}")
        return (self.prefix + key[len(REGISTRY):]).encode()

    def range(self, prefix: str, start_key: str = "") -> tuple[bytes, bytes]:
        """``[start, end)`` of the keys starting with ``prefix`` and >= ``start_key``."""
        if REGISTRY.startswith(prefix):  # "", "/", "/reg": everything kubesvc stores, under "<prefix>/"
            prefix = REGISTRY + "/"  # (not "/registry2/...", another --etcd-prefix on the same etcd)
        begin = self.key(prefix)
        end = bytes_prefix_end(begin)
        if start_key.startswith(REGISTRY):
            begin = max(begin, self.key(start_key))
        elif start_key > REGISTRY:  # above every key kubesvc stores
            begin = end
        return begin, end

    def name(self, etcd_key: bytes) -> str:
        return REGISTRY + etcd_key.decode()[len(self.prefix):]
