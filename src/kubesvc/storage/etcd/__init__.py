"""The etcd v3 storage backend: ``--storage-backend etcd3`` (kube-apiserver's flags).

* backend.py: the Backend protocol as etcd Txns and Ranges (store.go's shapes);
* watch.py: one etcd watch stream per storage watch (watcher.go);
* compactor.py: the compare-and-swap on ``compact_rev_key`` every ``--etcd-compaction-interval``
  (compact.go);
* keys.py: ``--etcd-prefix``; client.py: the gRPC channel, TLS, timeouts; errors.py: etcd's
  answers as storage errors; wire.py: the writes' ``TxnRequest`` as protobuf bytes.
"""

from kubesvc.storage.base import StorageError
from kubesvc.storage.etcd.backend import EtcdBackend
from kubesvc.storage.etcd.client import EtcdConfig
from kubesvc.storage.etcd.errors import Unavailable

__all__ = ["EtcdBackend", "EtcdConfig", "EtcdUnreachable", "Unavailable", "open_etcd"]


class EtcdUnreachable(ValueError):
    """etcd did not answer when the apiserver started; ``str()`` is the one line to print."""


async def open_etcd(config: EtcdConfig) -> EtcdBackend:
    """An etcd backend that has answered one quorum read (and learned the compact revision)."""
    try:
        backend = EtcdBackend(config)
    except (ValueError, OSError) as error:  # a malformed --etcd-servers, an unreadable TLS file
        raise EtcdUnreachable(f"cannot use etcd at {config.endpoints}: {error}") from None
    try:
        return await backend.open()
    except StorageError as error:
        await backend.close()
        detail = str(error).removeprefix(f"etcd ({config.endpoints}): ")
        raise EtcdUnreachable(f"cannot reach etcd at {config.endpoints}: {detail} "
                              "(check --etcd-servers, --etcd-cafile, --etcd-certfile, --etcd-keyfile)") from None
