"""The cluster's certificates: one CA, and every certificate it issues, all made here.

**One CA.** ``<data-dir>/pki/ca.crt`` signs the apiserver's and the agents' serving
certificates and every client certificate; it is ``--client-ca-file`` and
``--kubelet-certificate-authority`` by default. This is kubeadm's layout (one ``ca.crt`` for
both directions; identity.md §5.1). k3s keeps a client CA and a server CA apart, which lets
an operator rotate one without the other; here the certificates' extended key usages keep
the two roles apart instead: client certificates carry ``clientAuth`` only and serving
certificates ``serverAuth`` only, and OpenSSL (like Go) refuses a certificate presented for
the other purpose, so a leaked client key can never pose as the apiserver or a node. One CA
also means one trust anchor to hand out (kubeconfigs, ``kube-root-ca.crt``).

**Identities** (identity.md §6.3, k3s's ``genClientCerts``; subject CN = user, O = groups):

* ``system:admin`` in ``system:masters``: the admin kubeconfig (k3s's name);
* ``system:kube-controller-manager``: the controller-manager (shared informers, leader election,
  and the TokenRequests that make each controller its ServiceAccount: no certificate for those);
* ``system:kube-scheduler``: the scheduler (pod-scheduler);
* ``system:kube-proxy``: every node's proxy;
* ``system:node:<name>`` in ``system:nodes``: that node's agent (Node authorizer);
* ``kube-apiserver-kubelet-client``: the apiserver calling agents (kubeadm's name; allowed on
  agents by ``system:kubelet-api-admin``).

**Serving certificates.** The apiserver's (``pki/apiserver.crt``) covers every name a client
may dial: ``kubernetes``, ``kubernetes.default``, ``kubernetes.default.svc``,
``kubernetes.default.svc.<cluster domain>``, ``localhost``, ``127.0.0.1``, the first IP of
the Service range (``10.96.0.1`` for ``10.96.0.0/12``: the ``default/kubernetes`` ClusterIP
Pods use) and the advertise address (upstream's ``MaybeDefaultWithSelfSignedCerts`` plus
kubeadm's ``apiserver`` certificate). An agent's (kubelet's ``kubelet-serving``) has CN
``system:node:<name>``, O ``system:nodes`` and SANs the node's name and IPs.

**Files and renewal.** Keys and certificates are 0600 files in 0700 directories, written
atomically. A certificate is issued again at start when it is missing, not signed by the
current CA, says something else than it should (subject, SANs, usage), or has less than
``RENEW_BEFORE`` (90 days, k3s's ``CertificateRenewDays``) left of its year. Kubeconfigs
embed their certificates (kubeadm's style), so each is one self-contained 0600 file.

**No built-in bearer token.** Neither kube-apiserver nor k3s makes a token of its own: a
static bearer token exists only when the operator writes a ``--token-auth-file``. The admin
is the ``system:admin`` certificate above. Older kubesvc versions wrote a ``system:masters``
token to ``<data-dir>/token``; it is deleted at start (:func:`remove_retired_admin_token`).
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import ssl
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesvc.serving.x509 import certificate_subject
from kubesvc.serving.user import KUBE_CONTROLLER_MANAGER, KUBE_PROXY, KUBE_SCHEDULER, NODE_USER_PREFIX, NODES_GROUP, SYSTEM_PRIVILEGED_GROUP

log = logging.getLogger("kubesvc.serving.pki")

CA_VALIDITY = timedelta(days=3650)
LEAF_VALIDITY = timedelta(days=365)
RENEW_BEFORE = timedelta(days=90)
BACKDATE = timedelta(hours=1)  # tolerate clocks a little behind ours
CA_COMMON_NAME = "kubesvc-ca"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client"
ADMIN_USER = "system:admin"


@dataclass(frozen=True)
class Identity:
    """Who a client certificate says its holder is: CN the user, O its groups."""

    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity(ADMIN_USER, (SYSTEM_PRIVILEGED_GROUP,))
CONTROLLER_MANAGER = Identity(KUBE_CONTROLLER_MANAGER)
SCHEDULER = Identity(KUBE_SCHEDULER)
PROXY = Identity(KUBE_PROXY)
KUBELET_CLIENT = Identity(APISERVER_KUBELET_CLIENT)


def node_identity(node_name: str) -> Identity:
    return Identity(f"{NODE_USER_PREFIX}{node_name}", (NODES_GROUP,))


@dataclass(frozen=True)
class CertSpec:
    """What a leaf certificate must say; comparing a certificate with it decides renewal."""

    common_name: str
    organizations: tuple[str, ...] = ()
    server: bool = False  # serverAuth (a serving certificate) rather than clientAuth
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()

    @classmethod
    def client(cls, identity: Identity) -> "CertSpec":
        return cls(identity.user, identity.groups)

    def subject(self) -> x509.Name:
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in self.organizations]
        # X.520 caps a CN at 64 characters; Go's x509 (and OpenSSL's parser) do not, and a
        # node's user, system:node:<a name of up to 253 characters>, can be longer: the cap is
        # not enforced here either
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, self.common_name, _validate=False))
        return x509.Name(attributes)

    def sans(self) -> list[x509.GeneralName]:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in self.dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in self.ip_addresses]
        return names

    def usage(self) -> x509.ExtendedKeyUsage:
        return x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if self.server else ExtendedKeyUsageOID.CLIENT_AUTH])


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


# ---- decisions ---------------------------------------------------------------------------------


def first_service_ip(service_cidr: str) -> str:
    """The first usable IP of the Service range: the ``default/kubernetes`` ClusterIP
    (upstream ``ServiceIPRange``: ``GetIndexedIP(range, 1)``)."""
    return str(ipaddress.ip_network(service_cidr.strip(), strict=False).network_address + 1)


def unspecified(address: str | None) -> bool:
    return not address or ipaddress.ip_address(address).is_unspecified


def advertise_address(advertise: str | None, bind_address: str, host_address: str | None = None) -> str | None:
    """``--advertise-address``, else the bind address when it is one, else ``host_address``
    (upstream picks the address of the default route's interface)."""
    if advertise and not unspecified(advertise):
        return str(ipaddress.ip_address(advertise))
    if not unspecified(bind_address):
        return str(ipaddress.ip_address(bind_address))
    return host_address


def apiserver_serving_spec(service_cidrs: Iterable[str], advertise: str | None, bind_address: str = "",
                           cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> CertSpec:
    """The apiserver's serving certificate (see the module docstring). Only the primary
    Service range contributes its first IP, as upstream."""
    ips = ["127.0.0.1"]
    primary = next((c for c in service_cidrs if c.strip()), None)
    if primary:
        ips.append(first_service_ip(primary))
    for address in (advertise, bind_address):
        if address and not unspecified(address):
            ips.append(str(ipaddress.ip_address(address)))
    dns = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", f"kubernetes.default.svc.{cluster_domain}", "localhost")
    return CertSpec("kube-apiserver", server=True, dns_names=dns, ip_addresses=tuple(dict.fromkeys(ips)))


def node_serving_spec(node_name: str, node_ips: Iterable[str], hostnames: Iterable[str] = ()) -> CertSpec:
    """An agent's serving certificate (kubelet's ``kubernetes.io/kubelet-serving`` shape)."""
    identity = node_identity(node_name)
    dns = tuple(dict.fromkeys([node_name, *hostnames]))
    ips = tuple(dict.fromkeys(str(ipaddress.ip_address(ip)) for ip in node_ips))
    return CertSpec(identity.user, identity.groups, server=True, dns_names=dns, ip_addresses=ips)


def _sans_of(cert: x509.Certificate) -> set:
    try:
        return set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        return set()


def _usage_of(cert: x509.Certificate) -> set:
    try:
        return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return set()


def reissue_reason(cert: x509.Certificate, ca: x509.Certificate, spec: CertSpec, now: datetime) -> str | None:
    """Why ``cert`` must be issued again (None: it is good as it is)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the cluster CA"
    if certificate_subject(cert) != spec.subject():
        return f"subject {certificate_subject(cert).rfc4514_string()} is not {spec.subject().rfc4514_string()}"
    if _sans_of(cert) != set(spec.sans()):
        return "its subject alternative names changed"
    if _usage_of(cert) != set(spec.usage()):
        return "its key usage changed"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"it expires {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


# ---- making certificates ------------------------------------------------------------------------


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def new_ca(now: datetime, common_name: str = CA_COMMON_NAME) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, spec: CertSpec,
          now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A new key and a certificate for it saying what ``spec`` says, signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(spec.subject())
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + LEAF_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(spec.usage(), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()), critical=False)
    )
    if spec.sans():
        builder = builder.add_extension(x509.SubjectAlternativeName(spec.sans()), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


# ---- files ---------------------------------------------------------------------------------------


def private_dir(path: Path) -> Path:
    """``path`` as a 0700 directory (made with its parents when missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``data``."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


class ClusterCA:
    """The CA in a ``pki`` directory and the certificates it keeps there (``<name>.crt`` and
    ``<name>.key``). Loading it creates the CA once; :meth:`ensure` (re)issues a leaf when
    :func:`reissue_reason` says so."""

    def __init__(self, directory: Path, now: datetime | None = None):
        self.directory = private_dir(Path(directory))
        self._now = now
        self.cert_path, self.key_path = self.directory / "ca.crt", self.directory / "ca.key"
        if not (self.cert_path.exists() and self.key_path.exists()):
            cert, key = new_ca(self.now())
            write_private(self.key_path, _key_pem(key))
            write_private(self.cert_path, _cert_pem(cert))
        for path in (self.cert_path, self.key_path):
            os.chmod(path, 0o600)
        self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)

    def now(self) -> datetime:
        return self._now or datetime.now(timezone.utc)

    @property
    def pem(self) -> bytes:
        return self.cert_path.read_bytes()

    def ensure(self, name: str, spec: CertSpec) -> KeyPair:
        """``<name>.crt``/``<name>.key`` saying ``spec``, issued now unless the ones there do."""
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        if self._current(pair, spec):
            return pair
        cert, key = issue(self.cert, self.key, spec, self.now())
        write_private(pair.key, _key_pem(key))
        write_private(pair.cert, _cert_pem(cert))
        return pair

    def _current(self, pair: KeyPair, spec: CertSpec) -> bool:
        try:
            cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
            key = serialization.load_pem_private_key(pair.key.read_bytes(), None)
        except (OSError, ValueError, TypeError):
            return False
        if key.public_key().public_numbers() != cert.public_key().public_numbers():
            return False
        for path in (pair.cert, pair.key):
            os.chmod(path, 0o600)
        return reissue_reason(cert, self.cert, spec, self.now()) is None

    def client(self, name: str, identity: Identity) -> KeyPair:
        return self.ensure(name, CertSpec.client(identity))

    def node_client(self, node_name: str) -> KeyPair:
        return self.client(f"node-{node_name}", node_identity(node_name))

    def node_serving(self, node_name: str, node_ips: Iterable[str], hostnames: Iterable[str] = ()) -> KeyPair:
        return self.ensure(f"node-{node_name}-serving", node_serving_spec(node_name, node_ips, hostnames))


# ---- kubeconfigs --------------------------------------------------------------------------------


def kubeconfig_document(server: str, ca_pem: bytes, user: str, client: KeyPair) -> dict:
    """A kubeconfig with one cluster, one user (its embedded client certificate) and one
    current context."""
    credentials = {"client-certificate-data": base64.b64encode(client.cert.read_bytes()).decode(),
                   "client-key-data": base64.b64encode(client.key.read_bytes()).decode()}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesvc", "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "kubesvc", "context": {"cluster": "kubesvc", "user": user, "namespace": "default"}}],
        "current-context": "kubesvc",
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, ca: ClusterCA, user: str, client: KeyPair) -> Path:
    """A 0600 kubeconfig at ``path`` for the holder of ``client``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, yaml.safe_dump(kubeconfig_document(server, ca.pem, user, client), sort_keys=False).encode())
    return path


# ---- the apiserver's data directory -------------------------------------------------------------

PKI_DIR = "pki"
CREDENTIALS_DIR = "cred"  # k3s's server/cred: each component's kubeconfig
# component -> (its certificate's name in pki/, its identity)
COMPONENTS = {"controller-manager": ("kube-controller-manager", CONTROLLER_MANAGER), "scheduler": ("kube-scheduler", SCHEDULER),
              "proxy": ("kube-proxy", PROXY)}


@dataclass(frozen=True)
class Credentials:
    """What the apiserver serves and calls with, all under ``<data-dir>``."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin: KeyPair
    kubelet_client: KeyPair


def cluster_ca(data_dir: Path) -> ClusterCA:
    return ClusterCA(Path(data_dir) / PKI_DIR)


def ensure_credentials(data_dir: Path, bind_address: str, *, advertise: str | None = None,
                       service_cidrs: Iterable[str] = ("10.96.0.0/12",), cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> Credentials:
    """The CA, the apiserver's serving and kubelet-client certificates and the admin client
    certificate, made or renewed as needed; an older version's admin token removed."""
    remove_retired_admin_token(data_dir)
    ca = cluster_ca(data_dir)
    serving = ca.ensure("apiserver", apiserver_serving_spec(list(service_cidrs), advertise, bind_address, cluster_domain))
    return Credentials(ca.cert_path, serving.cert, serving.key,
                       admin=ca.client("admin", ADMIN), kubelet_client=ca.client("apiserver-kubelet-client", KUBELET_CLIENT))


RETIRED_ADMIN_TOKEN = "token"  # <data-dir>/token: older versions' system:masters bearer token


def remove_retired_admin_token(data_dir: Path) -> bool:
    """Delete ``<data-dir>/token`` if an older version left one; True when it did. Nothing
    accepts it any more, and a superuser secret nobody needs should not stay on disk, nor be
    taken up again should an older kubesvc run on this data directory (it reuses the file)."""
    path = Path(data_dir) / RETIRED_ADMIN_TOKEN
    if not (path.is_file() or path.is_symlink()):
        return False
    path.unlink()
    log.warning("removed %s: the built-in admin token is gone (use the admin kubeconfig's client certificate, "
                "or --token-auth-file for bearer tokens)", path)
    return True


def kubeconfig_path(data_dir: Path, component: str) -> Path:
    """``<data-dir>/cred/<component>.kubeconfig`` (``node-<name>`` for a node's agent)."""
    return private_dir(Path(data_dir) / CREDENTIALS_DIR) / f"{component}.kubeconfig"


def write_component_kubeconfigs(data_dir: Path, server: str) -> dict[str, Path]:
    """The controller-manager's, scheduler's and proxy's kubeconfigs; component -> path."""
    ca = cluster_ca(data_dir)
    return {component: write_kubeconfig(kubeconfig_path(data_dir, component), server, ca, identity.user, ca.client(name, identity))
            for component, (name, identity) in COMPONENTS.items()}


def write_node_kubeconfig(data_dir: Path, server: str, node_name: str) -> Path:
    """The kubeconfig of node ``node_name``'s agent (``system:node:<name>`` in ``system:nodes``)."""
    ca = cluster_ca(data_dir)
    return write_kubeconfig(kubeconfig_path(data_dir, f"node-{node_name}"), server, ca, node_identity(node_name).user,
                            ca.node_client(node_name))


# ---- odds and ends --------------------------------------------------------------------------------


def self_signed(ca_name: str, spec: CertSpec, now: datetime) -> tuple[bytes, bytes]:
    """(certificate chain PEM, key PEM) of a leaf saying ``spec`` under a throw-away CA named
    ``ca_name`` (client-go's ``GenerateSelfSignedCertKey``, which kubelet and
    kube-controller-manager use without a configured certificate)."""
    ca, ca_key = new_ca(now, ca_name)
    cert, key = issue(ca, ca_key, spec, now)
    return _cert_pem(cert) + _cert_pem(ca), _key_pem(key)


def write_self_signed(cert_path: Path, key_path: Path, ca_name: str, spec: CertSpec, now: datetime) -> None:
    chain, key = self_signed(ca_name, spec, now)
    write_private(key_path, key)
    write_private(cert_path, chain)


def self_signed_current(cert_path: Path, key_path: Path, spec: CertSpec, now: datetime | None = None) -> bool:
    """A self-signed pair that still says ``spec`` and is not near its end (its own CA is
    not checked: nobody else trusts it anyway)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
    except (OSError, ValueError, TypeError):
        return False
    now = now or datetime.now(timezone.utc)
    return (key.public_key().public_numbers() == cert.public_key().public_numbers() and certificate_subject(cert) == spec.subject()
            and _sans_of(cert) == set(spec.sans()) and cert.not_valid_after_utc - now >= RENEW_BEFORE)


def ephemeral_serving_context(common_name: str, bind_address: str) -> ssl.SSLContext:
    """A TLS server context with a throw-away certificate, made in memory at start, as
    kube-controller-manager does for its secure port when no ``--cert-dir`` certificate is given."""
    now = datetime.now(timezone.utc)
    ips = ["127.0.0.1"] + ([bind_address] if not unspecified(bind_address) else [])
    spec = CertSpec(common_name, server=True, dns_names=("localhost",), ip_addresses=tuple(dict.fromkeys(ips)))
    return server_context(*self_signed(f"{common_name}-ca@{int(now.timestamp())}", spec, now))


def server_context(cert_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context presenting ``cert_pem`` (leaf first, then its chain)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_pair_into(context, cert_pem, key_pem)
    return context


def load_pair_into(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Make ``context`` present this pair from its next handshake on (``ssl`` loads a chain only
    from files: a private temporary directory holds them for the call, the key 0600)."""
    with tempfile.TemporaryDirectory(prefix="kubesvc-tls-") as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert_pem)
        write_private(key_path, key_pem)
        context.load_cert_chain(cert_path, key_path)
