"""What the certificate controllers ask of a CertificateSigningRequest (upstream
``pkg/apis/certificates/helpers.go`` and ``pkg/controller/certificates/certificate_controller_utils.go``).

All pure: the parsed request, its state (approved, denied, failed, issued) and whether it has
the shape of a kubelet client certificate request (``ValidateKubeletClientCSR``):
``O=[system:nodes]`` exactly, no DNS/email/IP/URI SANs, ``CN=system:node:*``, usages exactly
{digital signature, key encipherment, client auth} or {digital signature, client auth}.
"""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import NameOID

from kubesvc.api.validation_certificates import decode_bytes, parse_csr
from kubesvc.client.rest import Resource

CSRS = Resource("certificates.k8s.io", "v1", "certificatesigningrequests", False, "CertificateSigningRequest")
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
KUBE_APISERVER_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"

_KUBELET_CLIENT_USAGES = frozenset({"digital signature", "key encipherment", "client auth"})
_KUBELET_CLIENT_USAGES_NO_RSA = frozenset({"digital signature", "client auth"})


def parsed_request(csr: dict) -> x509.CertificateSigningRequest:
    """ValueError when ``spec.request`` is not a CSR (upstream ``ParseCSR``)."""
    return parse_csr(decode_bytes((csr.get("spec") or {}).get("request")))


def conditions(csr: dict) -> list[dict]:
    items = (csr.get("status") or {}).get("conditions")
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def has_true_condition(csr: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions(csr))


def is_approved(csr: dict) -> bool:
    """``IsCertificateRequestApproved``: Approved and not Denied."""
    types = {c.get("type") for c in conditions(csr)}
    return "Approved" in types and "Denied" not in types


def is_decided(csr: dict) -> bool:
    types = {c.get("type") for c in conditions(csr)}
    return "Approved" in types or "Denied" in types


def certificate(csr: dict) -> bytes:
    return decode_bytes((csr.get("status") or {}).get("certificate"))


def subject_values(name: x509.Name, oid) -> list[str]:
    return [str(a.value) for a in name.get_attributes_for_oid(oid)]


def common_name(request: x509.CertificateSigningRequest) -> str:
    values = subject_values(request.subject, NameOID.COMMON_NAME)
    return values[0] if values else ""


def _sans(request: x509.CertificateSigningRequest) -> x509.SubjectAlternativeName | None:
    try:
        return request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def kubelet_client_problem(request: x509.CertificateSigningRequest, usages: list) -> str:
    """``ValidateKubeletClientCSR``: "" when the request has the shape, else upstream's error."""
    if subject_values(request.subject, NameOID.ORGANIZATION_NAME) != ["system:nodes"]:
        return "subject organization is not system:nodes"
    sans = _sans(request)
    if sans is not None:
        for kind, text in ((x509.DNSName, "DNS"), (x509.RFC822Name, "Email"), (x509.IPAddress, "IP"),
                           (x509.UniformResourceIdentifier, "URI")):
            if sans.get_values_for_type(kind):
                return f"{text} subjectAltNames are not allowed"
    if not common_name(request).startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    wanted = frozenset(str(u) for u in usages)
    if wanted not in (_KUBELET_CLIENT_USAGES, _KUBELET_CLIENT_USAGES_NO_RSA):
        return f"usages did not match [{' '.join(sorted(_KUBELET_CLIENT_USAGES))}]"
    return ""


_KUBELET_SERVING_USAGES = frozenset({"digital signature", "key encipherment", "server auth"})
_KUBELET_SERVING_USAGES_NO_RSA = frozenset({"digital signature", "server auth"})


def kubelet_serving_problem(request: x509.CertificateSigningRequest, usages: list) -> str:
    """``ValidateKubeletServingCSR``: "" when the request is a kubelet serving certificate's."""
    if subject_values(request.subject, NameOID.ORGANIZATION_NAME) != ["system:nodes"]:
        return "subject organization is not system:nodes"
    sans = _sans(request)
    dns = sans.get_values_for_type(x509.DNSName) if sans is not None else []
    ips = sans.get_values_for_type(x509.IPAddress) if sans is not None else []
    if not dns and not ips:
        return "DNS or IP subjectAltName is required"
    if sans is not None and sans.get_values_for_type(x509.RFC822Name):
        return "Email subjectAltNames are not allowed"
    if sans is not None and sans.get_values_for_type(x509.UniformResourceIdentifier):
        return "URI subjectAltNames are not allowed"
    if frozenset(str(u) for u in usages) not in (_KUBELET_SERVING_USAGES, _KUBELET_SERVING_USAGES_NO_RSA):
        return f"usages did not match [{' '.join(sorted(_KUBELET_SERVING_USAGES))}]"
    if not common_name(request).startswith("system:node:"):
        return "subject common name does not begin with system:node:"
    return ""


KUBE_PROXY_USER = "system:kube-proxy"
_KUBE_PROXY_CLIENT_USAGES = frozenset({"digital signature", "key encipherment", "client auth"})


def kube_proxy_client_problem(request: x509.CertificateSigningRequest, usages: list) -> str:
    """"" when the request asks for kube-proxy's client certificate exactly as ``kubesvc join``
    does (our rule; upstream has no such recognizer): ``CN=system:kube-proxy``, no organization
    (so no group), no SANs, usages exactly {digital signature, key encipherment, client auth}."""
    if common_name(request) != KUBE_PROXY_USER or len(subject_values(request.subject, NameOID.COMMON_NAME)) != 1:
        return f"subject common name is not {KUBE_PROXY_USER}"
    if subject_values(request.subject, NameOID.ORGANIZATION_NAME):
        return "subject organizations are not allowed"
    if len(list(request.subject)) != 1:
        return f"subject holds more than CN={KUBE_PROXY_USER}"
    if _sans(request) is not None:
        return "subjectAltNames are not allowed"
    if frozenset(str(u) for u in usages) != _KUBE_PROXY_CLIENT_USAGES or len(usages) != len(_KUBE_PROXY_CLIENT_USAGES):
        return f"usages did not match [{' '.join(sorted(_KUBE_PROXY_CLIENT_USAGES))}]"
    return ""


def kube_apiserver_client_problem(request: x509.CertificateSigningRequest, usages: list) -> str:
    """``isKubeAPIServerClientCSR`` (signer.go): client-auth usages only, no server auth."""
    wanted = {str(u) for u in usages}
    if "client auth" not in wanted:
        return "usages did not match the kube-apiserver-client signer (client auth is required)"
    extra = wanted - {"digital signature", "key encipherment", "client auth"}
    if extra:
        return f"usages {sorted(extra)} are not allowed for the kube-apiserver-client signer"
    return ""
