"""``csrsigning``: kube-controller-manager's signer for the Kubernetes signers, with the
cluster CA (pkg/controller/certificates/signer/signer.go, authority/authority.go;
identity.md §4.2).

* ``--cluster-signing-cert-file`` / ``--cluster-signing-key-file``: the CA (``kubesvc up``
  passes its cluster CA); ``--cluster-signing-duration`` (default 8760h): the longest
  lifetime issued.
* Handled: approved requests (Approved, not Denied) with no ``Failed`` condition and no
  certificate yet, for ``kubernetes.io/kube-apiserver-client-kubelet``,
  ``kubernetes.io/kube-apiserver-client`` and ``kubernetes.io/kubelet-serving`` (upstream's
  ``legacy-unknown`` cannot be asked for through v1).
* The request is checked again for its signer's shape; a mismatch is a ``Failed`` condition,
  reason ``SignerValidationFailure``, with the check's message, and no certificate.
* Lifetime (``duration``): ``spec.expirationSeconds`` when set and shorter than the signing
  duration, never under 10 minutes (twice the backdating); ``NotBefore`` is backdated 5
  minutes for clock skew; ``NotAfter`` never passes the CA's own.
* The certificate keeps the request's subject, public key and subject alternative names,
  gets the requested key usages and extended key usages, and is no CA.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from kubesvc.client.informer import Informer
from kubesvc.client.rest import RestClient
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.certificates.csr import (
    CSRS,
    KUBE_APISERVER_CLIENT_SIGNER,
    KUBELET_CLIENT_SIGNER,
    KUBELET_SERVING_SIGNER,
    certificate,
    has_true_condition,
    is_approved,
    kube_apiserver_client_problem,
    kubelet_client_problem,
    kubelet_serving_problem,
    parsed_request,
)
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.certificates.signer")

DEFAULT_SIGNING_DURATION = 8760 * 3600.0  # --cluster-signing-duration 8760h (365 days)
BACKDATE = timedelta(minutes=5)
MINIMUM_DURATION = 600.0  # 2 x the backdating: a shorter certificate could be born expired
# kubelet-serving requests are signed once someone approves them (the approver never does, as upstream)
SIGNERS = {KUBELET_CLIENT_SIGNER: kubelet_client_problem, KUBE_APISERVER_CLIENT_SIGNER: kube_apiserver_client_problem,
           KUBELET_SERVING_SIGNER: kubelet_serving_problem}

_KEY_USAGE_FLAGS = {
    "signing": "digital_signature", "digital signature": "digital_signature", "content commitment": "content_commitment",
    "key encipherment": "key_encipherment", "key agreement": "key_agreement", "data encipherment": "data_encipherment",
    "cert sign": "key_cert_sign", "crl sign": "crl_sign", "encipher only": "encipher_only", "decipher only": "decipher_only",
}
_EXTENDED_KEY_USAGES = {
    "any": ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE, "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH, "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION, "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "timestamping": ExtendedKeyUsageOID.TIME_STAMPING, "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
}


@dataclass(frozen=True)
class SigningCA:
    cert: x509.Certificate
    key: object

    @classmethod
    def load(cls, cert_file: str, key_file: str) -> "SigningCA":
        with open(cert_file, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        with open(key_file, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
        return cls(cert, key)


def certificate_duration(signing_duration: float, expiration_seconds) -> float:
    """Upstream ``signer.duration``."""
    if not isinstance(expiration_seconds, int) or isinstance(expiration_seconds, bool):
        return signing_duration
    return max(MINIMUM_DURATION, min(float(expiration_seconds), signing_duration))


def sign(ca: SigningCA, request: x509.CertificateSigningRequest, usages: list, duration: float, now: datetime) -> bytes:
    """The PEM certificate for ``request`` (upstream ``CertificateAuthority.Sign``)."""
    not_after = min(now + timedelta(seconds=duration), ca.cert.not_valid_after_utc)
    builder = (x509.CertificateBuilder().subject_name(request.subject).issuer_name(ca.cert.subject)
               .public_key(request.public_key()).serial_number(secrets.randbits(127) | 1)
               .not_valid_before(now - BACKDATE).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    flags = {name: False for name in set(_KEY_USAGE_FLAGS.values())}
    for usage in usages:
        if usage in _KEY_USAGE_FLAGS:
            flags[_KEY_USAGE_FLAGS[usage]] = True
    if any(flags.values()):
        builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
    extended = list(dict.fromkeys(_EXTENDED_KEY_USAGES[u] for u in usages if u in _EXTENDED_KEY_USAGES))
    if extended:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    try:
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        builder = builder.add_extension(sans, critical=False)
    except x509.ExtensionNotFound:
        pass
    builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.cert.public_key()), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM)


def wants_signing(csr: dict) -> bool:
    spec = csr.get("spec") or {}
    return (spec.get("signerName") in SIGNERS and is_approved(csr) and not has_true_condition(csr, "Failed")
            and not certificate(csr))


class CSRSigningController:
    def __init__(self, client: RestClient, csrs: Informer, ca: SigningCA, *, signing_duration: float = DEFAULT_SIGNING_DURATION,
                 clock: Clock | None = None, workers: int = 5):
        self.client = client
        self.csrs = csrs
        self.ca = ca
        self.signing_duration = signing_duration
        self.clock = clock or RealClock()
        self.workers = workers
        self.queue = WorkQueue(clock=self.clock)
        csrs.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), None)

    def _enqueue(self, csr: dict) -> None:
        if wants_signing(csr):
            self.queue.add(csr["metadata"]["name"])

    async def run(self) -> None:
        await self.csrs.wait_for_sync()
        await run_workers("csrsigning", self.queue, self.sync, self.workers)

    async def sync(self, name: str) -> None:
        import base64

        csr = self.csrs.indexer.get(name, None)
        if csr is None or not wants_signing(csr):
            return
        spec = csr.get("spec") or {}
        request = parsed_request(csr)  # validation let only parseable requests in: a failure is retried
        now = self.clock.now()
        status = dict(csr.get("status") or {})
        problem = SIGNERS[spec["signerName"]](request, spec.get("usages") or [])
        if problem:
            status["conditions"] = [*(status.get("conditions") or []),
                                    {"type": "Failed", "status": "True", "reason": "SignerValidationFailure", "message": problem,
                                     "lastUpdateTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")}]
            log.info("not signing %s: %s", name, problem)
        else:
            duration = certificate_duration(self.signing_duration, spec.get("expirationSeconds"))
            status["certificate"] = base64.b64encode(sign(self.ca, request, spec.get("usages") or [], duration, now)).decode()
            log.info("signed %s for %s", name, spec.get("username"))
        await self.client.resource(CSRS).update_status({**csr, "status": status})
