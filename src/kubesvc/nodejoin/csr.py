"""The node's certificate request, as the kubelet's TLS bootstrap builds it
(``pkg/kubelet/certificate/bootstrap/bootstrap.go``, identity.md §4.2).

* key: ECDSA P-256 (the kubelet's default), so the usages are ``digital signature`` and
  ``client auth`` (``key encipherment`` only for RSA keys);
* subject ``O=system:nodes, CN=system:node:<nodeName>``, no SANs;
* signer ``kubernetes.io/kube-apiserver-client-kubelet``;
* name ``node-csr-<digest>``: SHA-512/256 over the base64url (unpadded) public key, CN, every O
  and every usage, each followed by ``|`` (``digestedName``), so one key and subject always
  ask under one name and a retried bootstrap finds its earlier request.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
CLIENT_USAGES = ("digital signature", "client auth")


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def request_pem(key, common_name: str, organizations: tuple[str, ...] = (NODES_GROUP,)) -> bytes:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes)).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM)


def digested_name(public_key, common_name: str, organizations: tuple[str, ...], usages: tuple[str, ...], prefix: str = "node-csr-") -> str:
    """Upstream ``digestedName``."""
    def encode(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    digest = hashlib.new("sha512_256")
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    for part in (der, common_name.encode(), *(o.encode() for o in organizations), *(u.encode() for u in usages)):
        digest.update(encode(part))
        digest.update(b"|")
    return prefix + encode(digest.digest()).decode()


KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
SERVING_USAGES = ("digital signature", "server auth")


def serving_csr_object(key, node_name: str, node_ips: list[str], hostnames: list[str]) -> dict:
    """The kubelet's serving certificate request (``serverTLSBootstrap``, identity.md §4.3): the
    node's subject, its names and addresses as SANs, signer ``kubernetes.io/kubelet-serving``.
    No controller approves it (upstream's kube-controller-manager never does): an administrator
    does, with ``kubectl certificate approve``; csrsigning then signs it."""
    import ipaddress

    common_name = NODE_USER_PREFIX + node_name
    sans = [x509.DNSName(h) for h in dict.fromkeys(hostnames)] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in node_ips]
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    request = (x509.CertificateSigningRequestBuilder().subject_name(subject)
               .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(key, hashes.SHA256()))
    pem = request.public_bytes(serialization.Encoding.PEM)
    return {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},  # the kubelet's serving requests: csr-<random>
        "spec": {"request": base64.b64encode(pem).decode(), "signerName": KUBELET_SERVING_SIGNER, "usages": list(SERVING_USAGES)},
    }


KUBE_APISERVER_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
KUBE_PROXY_USER = "system:kube-proxy"
KUBE_PROXY_USAGES = ("digital signature", "key encipherment", "client auth")


def kube_proxy_csr_object(key, expiration_seconds: int | None = None) -> dict:
    """The request a joined node POSTs, as itself, for kube-proxy's client certificate (k3s's
    agents get a ``system:kube-proxy`` one from the supervisor): ``CN=system:kube-proxy`` and no
    organization, signer ``kubernetes.io/kube-apiserver-client``, the usages kubeadm gives client
    certificates; the shape csrapproving's nodekubeproxyclient recognizer approves. Named like
    the node's own request (``kube-proxy-csr-<digest>``), so a retry finds it."""
    spec: dict = {"request": base64.b64encode(request_pem(key, KUBE_PROXY_USER, ())).decode(),
                  "signerName": KUBE_APISERVER_CLIENT_SIGNER, "usages": list(KUBE_PROXY_USAGES)}
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": digested_name(key.public_key(), KUBE_PROXY_USER, (), KUBE_PROXY_USAGES, "kube-proxy-csr-")},
            "spec": spec}


def node_csr_object(key, node_name: str, expiration_seconds: int | None = None) -> dict:
    """The CertificateSigningRequest a node POSTs for its client certificate."""
    common_name = NODE_USER_PREFIX + node_name
    spec: dict = {
        "request": base64.b64encode(request_pem(key, common_name)).decode(),
        "signerName": KUBELET_CLIENT_SIGNER,
        "usages": list(CLIENT_USAGES),
    }
    if expiration_seconds is not None:
        spec["expirationSeconds"] = expiration_seconds
    return {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": digested_name(key.public_key(), common_name, (NODES_GROUP,), CLIENT_USAGES)},
        "spec": spec,
    }
