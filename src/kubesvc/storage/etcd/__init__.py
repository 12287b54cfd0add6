"""The etcd v3 storage backend: ``--storage-backend etcd3`` (kube-apiserver's flags).

* backend.py: the Backend protocol as etcd Txns and Ranges (store.go's shapes);
* watch.py: one etcd watch stream per storage watch (watcher.go);
* compactor.py: the compare-and-swap on ``compact_rev_key`` every ``--etcd-compaction-interval``
  (compact.go);
* keys.py: ``--etcd-prefix``; client.py: the gRPC channel, TLS, timeouts; errors.py: etcd's
  answers as storage errors.
"""

from kubesvc.storage.etcd.backend import EtcdBackend
from kubesvc.storage.etcd.client import EtcdConfig
from kubesvc.storage.etcd.errors import Unavailable

__all__ = ["EtcdBackend", "EtcdConfig", "Unavailable"]
