"""Trusting the server before anything is sent to it: kubeadm's bootstrap-token discovery
(``kubeadm join --discovery-token``), reusing ``cluster/join.py``'s cluster-info reading.

1. ``kube-public/cluster-info`` is read anonymously over TLS that cannot be verified yet. Its
   ``jws-kubeconfig-<token id>`` signature (HS256, keyed by the token's secret) over the
   published kubeconfig proves that kubeconfig, and the CA in it, belong to the cluster the
   token was made on: a wrong token, or a machine in the middle, has no matching signature.
2. With ``--discovery-token-ca-cert-hash sha256:<hex>`` (kubeadm's pin, the SHA-256 of the
   CA certificate's SubjectPublicKeyInfo) the CA must also be that one.
3. From then on every connection verifies the server against that CA (pinned).

A wrong token, a missing signature or a mismatched pin is one line (JoinFailed) and nothing
has been written or created anywhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kubesvc.cluster import join as cluster_join
from kubesvc.cluster.join import JoinFailed

__all__ = ["Discovered", "JoinFailed", "ca_cert_hash", "check_pins", "discover"]


@dataclass(frozen=True)
class Discovered:
    ca_pem: bytes
    token_id: str
    token: str


def ca_cert_hash(ca_pem: bytes) -> str:
    """kubeadm's ``pubkeypin.Hash``: ``sha256:`` and the hex SHA-256 of the SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(ca_pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def check_pins(ca_pem: bytes, pins: tuple[str, ...], server: str) -> None:
    for pin in pins:
        if not pin.startswith("sha256:") or len(pin) != 71:
            raise JoinFailed(f'invalid --discovery-token-ca-cert-hash "{pin}": expected "sha256:" and 64 hex digits')
    if pins and ca_cert_hash(ca_pem) not in {p.lower() for p in pins}:
        raise JoinFailed(f"the CA of {server} does not match --discovery-token-ca-cert-hash (it is {ca_cert_hash(ca_pem)}): "
                         "check the hash, or that the URL names your cluster")


async def discover(server: str, token: str, pins: tuple[str, ...] = (), timeout: float = 15.0) -> Discovered:
    import aiohttp

    from kubesvc.apiserver.auth.bootstrap import parse_token

    parsed = parse_token(token)
    if parsed is None:
        raise JoinFailed("--token must be a bootstrap token [a-z0-9]{6}.[a-z0-9]{16}: print one on a server with kubesvc token create")
    token_id, token_secret = parsed
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(server.rstrip("/") + cluster_join.CLUSTER_INFO_PATH, ssl=False) as response:  # the signature decides
                if response.status == 404:
                    raise JoinFailed(f"{server} publishes no kube-public/cluster-info: start that server with kubesvc up --cluster-init")
                if response.status != 200:
                    raise JoinFailed(f"{server} could not read kube-public/cluster-info ({response.status})")
                cluster_info = await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
        raise JoinFailed(f"cannot reach {server} ({err or type(err).__name__}): check the URL and that kubesvc up runs there") from None
    ca_pem, _ = cluster_join.trusted_ca(cluster_info, token_id, token_secret, server)
    check_pins(ca_pem, pins, server)
    return Discovered(ca_pem, token_id, token)
