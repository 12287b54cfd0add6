"""A backend on the fake iptables kernel set up like upstream's ``NewFakeProxier``; the Services
and endpoints it syncs are built with tests/support/builders.py."""

from __future__ import annotations

from kubesvc.kernel.fake.iptables import TEST_NODE_NAME, FakeIptablesAsync
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.iptables.proxier import IptablesBackend
from kubesvc.proxy.proxier import Proxier
from kubesvc.proxy.iptables.rules import Features
from kubesvc.proxy.localdetector import LocalDetector
from kubesvc.proxy.metrics import ProxyMetrics
from kubesvc.proxy.types import IPV4
from tests.support.builders import POD_CIDR

# upstream NewFakeProxier: HasRandomFully false, both nfacct counters available
UPSTREAM_FAKE_FEATURES = Features(random_fully=False, nfacct_ct_state_invalid=True, nfacct_localhost_nodeports=True)


def fake_backend(family: int = IPV4, *, features: Features = UPSTREAM_FAKE_FEATURES, detector: bool = True,
                 metrics: ProxyMetrics | None = None, **options) -> tuple[Proxier, FakeIptablesAsync]:
    """upstream ``NewFakeProxier``: node ``test-node``, pod CIDR local detector, localhost
    NodePorts on, masquerade bit 14; the iptables mode inside the shared proxier (``run_sync``
    takes requests directly; ``.mode`` is the ``IptablesBackend``)."""
    ipt = FakeIptablesAsync(family)
    detect = LocalDetector(cidr=POD_CIDR[family], family=family) if detector else LocalDetector(family=family)
    opts = ProxyOptions(family=family, node_name=TEST_NODE_NAME, local_detector=detect, **options)
    mode = IptablesBackend(opts, ipt=ipt, features=features)
    return Proxier(mode, opts, metrics if metrics is not None else ProxyMetrics()), ipt
