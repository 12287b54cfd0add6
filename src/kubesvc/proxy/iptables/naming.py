"""iptables chain names for Service ports and endpoints (upstream ``portProtoHash`` and
``servicePortEndpointChainName`` in ``pkg/proxy/iptables/proxier.go``).

An iptables chain name may be at most 28 characters, and users grep for these names, so they
are kept byte-for-byte: the first 16 characters of the RFC 4648 base32 encoding of
``sha256(ServicePortName.String() + lower(protocol))``, behind one of four prefixes:

* ``KUBE-SVC-`` dispatch to the endpoints a ``Cluster`` traffic policy may use;
* ``KUBE-SVL-`` dispatch to this node's endpoints (a ``Local`` policy);
* ``KUBE-EXT-`` the entry for NodePort / externalIP / LoadBalancer traffic;
* ``KUBE-FW-``  the ``loadBalancerSourceRanges`` filter in front of ``KUBE-EXT-``;

and, per endpoint, ``KUBE-SEP-`` + the same hash over ``String() + lower(protocol) + "ip:port"``.
``ns1/svc1:p80`` over TCP is ``KUBE-SVC-XPGD46QRK7WJZT7O``; its endpoint ``10.180.0.1:80`` is
``KUBE-SEP-SXIVWICOYRO3J4NJ``.

Hashing is the one costly step in building rules for ten thousand Services, so every name is
cached (bounded, so churn cannot grow the caches without limit).
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from typing import NamedTuple

from kubesvc.proxy.types import ServicePortName

SVC_PREFIX = "KUBE-SVC-"
SVL_PREFIX = "KUBE-SVL-"
EXT_PREFIX = "KUBE-EXT-"
FW_PREFIX = "KUBE-FW-"
SEP_PREFIX = "KUBE-SEP-"
SERVICE_CHAIN_PREFIXES = (SVC_PREFIX, SVL_PREFIX, SEP_PREFIX, FW_PREFIX, EXT_PREFIX)

_CACHE_SIZE = 1 << 18


def hash16(text: str) -> str:
    """``base32.StdEncoding.EncodeToString(sha256(text))[:16]``."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest())[:16].decode()


class ServiceChains(NamedTuple):
    """The four per-Service-port chain names; they share one hash."""

    svc: str
    svl: str
    ext: str
    fw: str


@lru_cache(maxsize=_CACHE_SIZE)
def service_chains(name: ServicePortName) -> ServiceChains:
    suffix = hash16(str(name) + name.protocol.lower())
    return ServiceChains(SVC_PREFIX + suffix, SVL_PREFIX + suffix, EXT_PREFIX + suffix, FW_PREFIX + suffix)


def service_chain(name: ServicePortName) -> str:
    return service_chains(name).svc


@lru_cache(maxsize=_CACHE_SIZE)
def endpoint_chain(name: ServicePortName, endpoint: str) -> str:
    """``KUBE-SEP-`` chain of one endpoint (``"ip:port"`` or ``"[ip6]:port"``)."""
    return SEP_PREFIX + hash16(str(name) + name.protocol.lower() + endpoint)


def is_service_chain_name(chain: str) -> bool:
    """A per-Service or per-endpoint chain (found stale by ``iptables-save`` → delete it)."""
    return chain.startswith(SERVICE_CHAIN_PREFIXES)
