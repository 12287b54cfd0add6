"""The IPVS VM's tests (collected only where KUBESVC_IPVS_TESTS=1: tests/kernel/conftest.py).
Everything here runs under software emulation, where each Python start costs seconds of CPU:

- the Pods' servers are threads of the test process (tests/kernel/vm/pods.py);
- the apiserver and the EndpointSlice controller run on the host, natively, in the run's own
  namespace at the other end of the VM's only link (tests/support/ipvs_vm.py): a relay on this
  machine's loopback at the apiserver's port forwards to it, so the harness, its kubeconfigs and
  the nodes' relays (which connect to 127.0.0.1) work as with a local apiserver. Without that
  (a developer's kernel with IPVS running tests/kernel/vm directly) they start here.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.kernel.vm.pods import pods_as_threads
from tests.support import ipvs_vm
from tests.support.apiserver import running_kernel_control_plane
from tests.support.netns import Relay


@pytest.fixture(scope="session", autouse=True)
def _pods_as_threads():
    with pods_as_threads():
        yield


class _ThisNamespace:
    """What Relay needs of a namespace, for the one this process runs in (the guest's own)."""

    name = "guest"

    @staticmethod
    def socket() -> socket.socket:
        return socket.socket()


@pytest.fixture(scope="session")
def kernel_control_plane(tmp_path_factory):
    described = os.environ.get(ipvs_vm.APISERVER_ENV)
    if not described:
        with running_kernel_control_plane(tmp_path_factory.mktemp("kernel-control-plane")) as server:
            yield server
        return
    server = ipvs_vm.guest_apiserver(Path(described))
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    relay = Relay(_ThisNamespace(), port, target=(ipvs_vm.HOST_IP, port))
    try:
        yield server
    finally:
        relay.close()
