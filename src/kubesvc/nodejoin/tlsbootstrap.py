"""The node's client certificate: the kubelet's TLS bootstrap and certificate rotation
(``pkg/kubelet/certificate/bootstrap``; client-go ``util/certificate`` manager; identity.md §4).

* **Bootstrap**: with the bootstrap token as its credential (``system:bootstrap:<id>``), the
  node POSTs its CertificateSigningRequest (``csr.node_csr_object``) and waits for the
  controller-manager's csrapproving and csrsigning: a certificate in ``status.certificate``.
  ``Denied`` or ``Failed`` end the wait with the condition's message. A request of the same
  name already there (a retried join with the same key) is reused.
* **Files** under the join's data dir, each 0600 in 0700 directories: ``pki/ca.crt`` (the
  discovered cluster CA), ``pki/kubelet-client.key`` and ``pki/kubelet-client.crt``, and
  ``kubeconfig`` naming them (user ``system:node:<name>``). A new pair replaces the old one
  file by file with a rename, key first.
* **Rotation** (``nextRotationDeadline``): at NotBefore + 70-90 % of the certificate's
  lifetime (uniform jitter: ``Jitter(total, 0.2) - 0.3·total``) the node asks again with its
  current certificate; the request's requester is then ``system:node:<name>``, which the
  approver's selfnodeclient rule approves.
* **kube-proxy's certificate** (``system:kube-proxy``, k3s's ``client-kube-proxy.crt``): once the
  node holds its own, it asks as the node for a ``kubernetes.io/kube-apiserver-client``
  certificate (``csr.kube_proxy_csr_object``, which csrapproving's nodekubeproxyclient rule
  approves), kept as ``pki/kube-proxy-client.{key,crt}`` with ``kube-proxy.kubeconfig`` and
  rotated the same way, always asked for with the node's credential. One ``ClientIdentity``
  describes each of the two: the same functions get, write, check and rotate both.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from cryptography import x509

from kubesvc.client.kubeconfig import ClientConfig
from kubesvc.client.rest import ApiError, ClientError, RestClient, is_already_exists, is_not_found
from kubesvc.cluster.join import JoinFailed
from kubesvc.nodejoin.csr import (KUBE_PROXY_USER, NODE_USER_PREFIX, key_pem, kube_proxy_csr_object, new_key, node_csr_object,
                                  serving_csr_object)
from kubesvc.serving import pki

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NODE_BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
ROTATION_FRACTION, ROTATION_JITTER = 0.7, 0.2


@dataclass(frozen=True)
class Paths:
    data_dir: Path

    @property
    def ca(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def key(self) -> Path:
        return self.data_dir / "pki" / "kubelet-client.key"

    @property
    def cert(self) -> Path:
        return self.data_dir / "pki" / "kubelet-client.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def serving_key(self) -> Path:
        return self.data_dir / "pki" / "kubelet-server.key"

    @property
    def serving_cert(self) -> Path:
        return self.data_dir / "pki" / "kubelet-server.crt"

    @property
    def proxy_key(self) -> Path:
        return self.data_dir / "pki" / "kube-proxy-client.key"

    @property
    def proxy_cert(self) -> Path:
        return self.data_dir / "pki" / "kube-proxy-client.crt"

    @property
    def proxy_kubeconfig(self) -> Path:
        return self.data_dir / "kube-proxy.kubeconfig"

    def all(self) -> list[Path]:
        return [self.ca, self.key, self.cert, self.kubeconfig]


@dataclass(frozen=True)
class ClientIdentity:
    """One client certificate the join keeps: whose it is (the certificate's CN, the
    kubeconfig's user), its three files, and the CertificateSigningRequest asking for it."""
    user: str
    key: Path
    cert: Path
    kubeconfig: Path
    request: Callable  # (private key) -> the CertificateSigningRequest object

    def files(self) -> list[Path]:
        return [self.key, self.cert, self.kubeconfig]


def node_identity(paths: Paths, node_name: str) -> ClientIdentity:
    return ClientIdentity(NODE_USER_PREFIX + node_name, paths.key, paths.cert, paths.kubeconfig, lambda key: node_csr_object(key, node_name))


def kube_proxy_identity(paths: Paths) -> ClientIdentity:
    return ClientIdentity(KUBE_PROXY_USER, paths.proxy_key, paths.proxy_cert, paths.proxy_kubeconfig, kube_proxy_csr_object)


def next_rotation_deadline(not_before: datetime, not_after: datetime, rand: float) -> datetime:
    """client-go's ``nextRotationDeadline``: 70 % of the lifetime plus up to 20 % more
    (``rand`` in [0, 1))."""
    total = (not_after - not_before).total_seconds()
    return not_before + timedelta(seconds=total * (ROTATION_FRACTION + ROTATION_JITTER * rand))


def certificate_at(path: Path) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None


def current_certificate(paths: Paths) -> x509.Certificate | None:
    """The node's own client certificate."""
    return certificate_at(paths.cert)


def identity_usable(paths: Paths, identity: ClientIdentity, now: datetime) -> bool:
    """The data dir holds ``identity``'s unexpired credential (a restarted join asks for nothing)."""
    cert = certificate_at(identity.cert)
    if cert is None or not (identity.key.exists() and identity.kubeconfig.exists() and paths.ca.exists()):
        return False
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)]
    return names == [identity.user] and cert.not_valid_after_utc > now and key_matches(cert, identity.key)


def key_matches(cert: x509.Certificate, key_path: Path) -> bool:
    """The private key at ``key_path`` is the certificate's: the key and the certificate are
    replaced one after the other, and a join stopped between the two renames must ask again,
    not start every component with a pair that fails TLS until the certificate expires."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from kubesvc.serving.dynamiccert import pair_matches

    try:
        key_pem = key_path.read_bytes()
    except OSError:
        return False
    return pair_matches(cert.public_bytes(Encoding.PEM), key_pem)


def usable(paths: Paths, node_name: str, now: datetime) -> bool:
    """The data dir holds this node's unexpired credential (a restarted join needs no token)."""
    return identity_usable(paths, node_identity(paths, node_name), now)


def write_identity(paths: Paths, identity: ClientIdentity, server: str, ca_pem: bytes, key_pem_bytes: bytes, cert_pem: bytes) -> list[Path]:
    """Write the CA, ``identity``'s key and certificate and its kubeconfig; the files that did
    not exist before."""
    made = [p for p in [paths.ca, *identity.files()] if not p.exists()]
    pki.private_dir(paths.data_dir)
    pki.private_dir(identity.key.parent)
    pki.write_private(paths.ca, ca_pem)
    pki.write_private(identity.key, key_pem_bytes)
    pki.write_private(identity.cert, cert_pem)
    document = pki.kubeconfig_document(server, ca_pem, identity.user, pki.KeyPair(identity.cert, identity.key))
    pki.write_private(identity.kubeconfig, yaml.safe_dump(document, sort_keys=False).encode())
    return made


def write_credentials(paths: Paths, server: str, ca_pem: bytes, key_pem_bytes: bytes, cert_pem: bytes, node_name: str) -> list[Path]:
    """Write the node's four files; the ones that did not exist before."""
    return write_identity(paths, node_identity(paths, node_name), server, ca_pem, key_pem_bytes, cert_pem)


def bootstrap_client(server: str, ca_pem: bytes, token: str) -> RestClient:
    return RestClient(ClientConfig(server=server, token=token, ca_pem=ca_pem), user_agent="kubesvc-join", field_manager="kubesvc-join")


def _condition(csr: dict, ctype: str) -> dict | None:
    for cond in (csr.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return None


async def request_certificate(client: RestClient, node_name: str, *, timeout: float, server: str, token_id: str = "",
                              expiration_seconds: int | None = None, serving_for: tuple[list[str], list[str]] | None = None,
                              interval: float = 0.5, on_created=None, identity: ClientIdentity | None = None) -> tuple[bytes, bytes]:
    """(key PEM, certificate PEM) for ``system:node:<node_name>`` through a CSR: its client
    certificate, or with ``serving_for`` (IPs, hostnames) its serving certificate, or with
    ``identity`` that identity's (``identity.request``). JoinFailed with one line for a refused
    token, a denied or failed request, or no answer in time."""
    key = new_key()
    if identity is not None:
        obj = identity.request(key)
    else:
        obj = serving_csr_object(key, node_name, *serving_for) if serving_for else node_csr_object(key, node_name, expiration_seconds)
    name = obj["metadata"].get("name", "")
    try:
        try:
            created = await client.create(CSR_PATH, obj)
            name = created["metadata"]["name"]
            if on_created is not None:
                on_created(name)
        except ApiError as err:
            if not is_already_exists(err):
                raise
    except ApiError as err:
        if err.status == 401:
            raise JoinFailed(f"{server} refused token {token_id} (expired or deleted): create one there with kubesvc token create") from None
        if err.status == 403:
            raise JoinFailed(f"token {token_id} may not request node certificates (its groups lack {NODE_BOOTSTRAP_GROUP}): "
                             "create one with kubesvc token create") from None
        raise JoinFailed(f"{server} refused the certificate signing request: {err}") from None
    except ClientError as err:
        raise JoinFailed(f"cannot reach {server}: {err}") from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = False
    while True:
        try:
            csr = await client.get(f"{CSR_PATH}/{name}")
            seen = True
        except ClientError as err:
            if seen and is_not_found(err):  # an administrator (or csrcleaner) deleted it: nothing to wait for
                raise JoinFailed(f"certificate signing request {name} was deleted") from None
            if loop.time() > deadline:
                raise JoinFailed(f"cannot read certificate signing request {name}: {err}") from None
            csr = {}
        for ctype in ("Denied", "Failed"):
            cond = _condition(csr, ctype)
            if cond is not None:
                raise JoinFailed(f"certificate signing request {name} was {ctype.lower()}: {cond.get('message') or cond.get('reason') or ''}")
        certificate = (csr.get("status") or {}).get("certificate")
        if certificate:
            return key_pem(key), base64.b64decode(certificate)
        if loop.time() > deadline:
            raise JoinFailed(f"certificate signing request {name} was not signed within {timeout:g}s: approve it with "
                             f"kubectl certificate approve {name} (a controller-manager with csrapproving and csrsigning does)")
        await asyncio.sleep(interval)


def retry_delays(rand=random.random) -> Iterator[float]:
    """Seconds between a certificate manager's failed requests (a refused or unreachable
    server, a denied, failed or deleted CSR), as client-go's ``certificate_manager.go``:
    ``ExponentialBackoff{Duration: 2s, Factor: 2, Jitter: 0.1, Steps: 5}`` (five attempts, so
    waits of 2, 4, 8 and 16 s, each up to 10 % longer), then ``PollInfinite(32s)``."""
    delay = 2.0
    for _ in range(4):
        yield delay * (1 + 0.1 * rand())
        delay *= 2
    while True:
        yield 32.0


async def rotate_forever(paths: Paths, server: str, node_name: str, on_rotated, *, timeout: float = 300.0,
                         rand=random.random, now=None, identity: ClientIdentity | None = None) -> None:
    """Renew the node's client certificate (or ``identity``'s) at each rotation deadline;
    ``on_rotated()`` (a coroutine function) after the new files are in place (``rotate_once``). A failed renewal
    is retried after ``retry_delays``. The request is always sent with the node's own credential (the
    one kube-proxy's certificate may not ask for certificates)."""
    from datetime import timezone

    identity = identity or node_identity(paths, node_name)
    now = now or (lambda: datetime.now(timezone.utc))
    while True:
        cert = certificate_at(identity.cert)
        if cert is None:
            return
        if cert.not_valid_after_utc <= now():
            # an expired certificate cannot ask for its successor (the apiserver answers 401);
            # the kubelet falls back to its bootstrap credential, which a join no longer holds
            import logging

            logging.getLogger("kubesvc.nodejoin").error(
                "the %s client certificate expired at %s; rotation cannot renew it: join again with a token "
                "(kubesvc token create on a server, then kubesvc join --token ...)", identity.user, cert.not_valid_after_utc.isoformat())
            return
        deadline = next_rotation_deadline(cert.not_valid_before_utc, cert.not_valid_after_utc, rand())
        await asyncio.sleep(max(0.0, (deadline - now()).total_seconds()))
        delays = retry_delays(rand)
        while True:
            try:
                await rotate_once(paths, server, node_name, identity, timeout=timeout)
            except (JoinFailed, ClientError, OSError) as err:
                import logging

                delay = next(delays)
                logging.getLogger("kubesvc.nodejoin").warning("certificate rotation failed, retrying in %.0fs: %s", delay, err)
                await asyncio.sleep(delay)
                continue
            await on_rotated()
            break


async def rotate_once(paths: Paths, server: str, node_name: str, identity: ClientIdentity, *, timeout: float = 300.0) -> None:
    """One renewal of ``identity``'s certificate, asked for with the node's credential: its key,
    certificate and kubeconfig replaced by the new ones (which the running components take in
    place). JoinFailed, ClientError or OSError when it could not be done."""
    from kubesvc.client.kubeconfig import load_kubeconfig

    async with RestClient(load_kubeconfig(paths.kubeconfig), user_agent="kubesvc-join") as client:
        key, new_cert = await request_certificate(client, node_name, timeout=timeout, server=server, identity=identity)
    write_identity(paths, identity, server, paths.ca.read_bytes(), key, new_cert)


def serving_usable(paths: Paths, node_ips: list[str], now: datetime) -> bool:
    """The data dir holds an unexpired serving certificate naming every node IP."""
    import ipaddress

    try:
        cert = x509.load_pem_x509_certificate(paths.serving_cert.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    named = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return paths.serving_key.exists() and cert.not_valid_after_utc > now and {str(ipaddress.ip_address(i)) for i in node_ips} <= named


def remove(paths: list[Path]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
