"""Names of the per-Service-port objects in table ``kube-proxy`` (upstream
``pkg/proxy/nftables/proxier.go``, ``hashAndTruncate`` and friends), kept byte-identical so
``nft list table ip kube-proxy`` reads the same as upstream's.

A chain name is ``<prefix><HASH>-<namespace>/<service>/<protocol>/<portname>`` where ``HASH`` is
the first 8 characters of ``base32(sha256(base))``: the hash keeps names unique when a long name
is truncated to 240 characters and makes near-identical names easy to tell apart. Namespace,
Service and port names are ``[a-z0-9-]`` so they are safe in nft names as they are; the ``/``
separators (never in a fixed chain name) mark a chain as a service chain, which is how stale
ones are found. Per-endpoint names (affinity sets) add ``__<ip>/<port>`` with IPv6 colons turned
into dots.
"""

from __future__ import annotations

import hashlib

from kubesvc.proxy.types import ServicePortName

NAME_LENGTH_MAX = 256  # knftables.NameLengthMax
CHAIN_NAME_PREFIX_LENGTH_MAX = 16  # including the trailing hyphen
CHAIN_NAME_BASE_LENGTH_MAX = NAME_LENGTH_MAX - CHAIN_NAME_PREFIX_LENGTH_MAX  # 240

CLUSTER_POLICY_PREFIX = "service-"
LOCAL_POLICY_PREFIX = "local-"
EXTERNAL_PREFIX = "external-"
FIREWALL_PREFIX = "firewall-"
AFFINITY_PREFIX = "affinity-"


# base32 (RFC 4648 alphabet) of every 10-bit value: two characters each
_B32_PAIRS = [a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"]


def hash_and_truncate(name: str) -> str:
    # The first 8 base32 characters encode the digest's first 5 bytes, and only those:
    # computed from them directly (a full ``base64.b32encode`` of the digest, pure Python in
    # 3.11, was a third of rendering a Service at 10k Services).
    n = int.from_bytes(hashlib.sha256(name.encode()).digest()[:5], "big")
    name = _B32_PAIRS[n >> 30] + _B32_PAIRS[(n >> 20) & 1023] + _B32_PAIRS[(n >> 10) & 1023] + _B32_PAIRS[n & 1023] + "-" + name
    if len(name) > CHAIN_NAME_BASE_LENGTH_MAX:
        name = name[:CHAIN_NAME_BASE_LENGTH_MAX - 3] + "..."
    return name


def service_port_chain_name_base(spn: ServicePortName, protocol: str) -> str:
    """``ULMVA6XW-ns1/svc1/tcp/p80``; ``protocol`` is lower-case."""
    return hash_and_truncate(f"{spn.namespace}/{spn.name}/{protocol}/{spn.port}")


def endpoint_name_base(spn: ServicePortName, protocol: str, ip: str, port: int) -> str:
    """``5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80`` (upstream's endpoint chain base, which
    names the endpoint's affinity set)."""
    return hash_and_truncate(f"{spn.namespace}/{spn.name}/{protocol}/{spn.port}__{ip.replace(':', '.')}/{port}")


def is_service_chain_name(name: str) -> bool:
    return "/" in name


def is_affinity_set_name(name: str) -> bool:
    return name.startswith(AFFINITY_PREFIX)
