"""Validation of certificates.k8s.io/v1 CertificateSigningRequests, as upstream's
``pkg/apis/certificates/validation/validation.go`` (and ``ValidateSignerName`` from
``pkg/apis/core/validation``).

On create:

* any name is accepted (``ValidateCertificateRequestName`` returns nothing: "We don't care
  what you call your certificate requests"), the rest of ObjectMeta as usual;
* ``spec.request`` must be one PEM ``CERTIFICATE REQUEST`` whose signature verifies;
* ``spec.usages`` is required, every entry one of the known key usages, none twice;
* ``spec.signerName`` is required, ``<domain with a dot>/<path>``; ``kubernetes.io/legacy-unknown``
  is refused ("the legacy signerName is not allowed via this API version");
* ``spec.expirationSeconds``, when set, at least 600;
* ``status.conditions``: a type each, unique; ``Approved``/``Denied``/``Failed`` only ``True``;
  Approved and Denied mutually exclusive; ``status.certificate`` PEM ``CERTIFICATE`` blocks only.

On update the same, plus: Approved/Denied/Failed conditions may never be removed; only the
``approval`` subresource may add or change Approved/Denied; only ``status`` may set
``status.certificate``, and never change one already set. Compatibility allowances for data
an older server stored (duplicate condition types, unknown usages, ...) are kept where the old
object already has the problem, as upstream's ``getValidationOptions`` does.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kubesvc.api.errors import duplicate, forbidden_field, invalid_value, not_supported, required, too_long
from kubesvc.api.validation_meta import (
    Errs,
    index,
    is_dns1123_label,
    is_dns1123_subdomain,
    validate_object_meta,
    validate_object_meta_update,
)

LEGACY_UNKNOWN_SIGNER = "kubernetes.io/legacy-unknown"
APPROVED, DENIED, FAILED = "Approved", "Denied", "Failed"

KEY_USAGES = sorted([
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system",
    "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc",
])
_TRUE_ONLY_TYPES = (APPROVED, DENIED, FAILED)
_STATUS_VALUES = ["False", "True", "Unknown"]  # sets.List: sorted

_DNS1123_SUBDOMAIN_MAX, _DNS1123_LABEL_MAX = 253, 63


class RequestError(ValueError):
    """``spec.request`` is not a PEM CSR with a valid signature (the text is upstream's)."""


def decode_bytes(value: Any) -> bytes:
    """A ``[]byte`` field as JSON carries it: standard base64 (already raw bytes when built
    in process)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str) or not value:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b""


def parse_csr(pem_data: bytes) -> x509.CertificateSigningRequest:
    """Upstream ``certificates.ParseCSR``: the first PEM block must be a CERTIFICATE REQUEST."""
    marker = b"-----BEGIN CERTIFICATE REQUEST-----"
    start = pem_data.find(b"-----BEGIN ")
    if start < 0 or not pem_data[start:].startswith(marker):
        raise RequestError("PEM block type must be CERTIFICATE REQUEST")
    try:
        return x509.load_pem_x509_csr(pem_data[start:])
    except ValueError as err:
        raise RequestError(f"x509: malformed certificate request: {err}") from None


def _check_csr(pem_data: bytes) -> str:
    try:
        csr = parse_csr(pem_data)
    except RequestError as err:
        return str(err)
    if not csr.is_signature_valid:
        return "x509: ECDSA verification failure" if "EC" in type(csr.public_key()).__name__ else "crypto/rsa: verification error"
    return ""


def _check_certificate(pem_data: bytes) -> str:
    """Upstream ``validateCertificate``: empty, or only CERTIFICATE blocks without headers."""
    if not pem_data:
        return ""
    blocks = 0
    rest = pem_data
    while True:
        start = rest.find(b"-----BEGIN ")
        if start < 0:
            break
        head_end = rest.find(b"-----", start + 11)
        block_type = rest[start + 11:head_end].decode(errors="replace")
        end_marker = b"-----END " + block_type.encode() + b"-----"
        end = rest.find(end_marker, head_end)
        if head_end < 0 or end < 0:
            break
        if block_type != "CERTIFICATE":
            return f'only CERTIFICATE PEM blocks are allowed, found "{block_type}"'
        block = rest[start:end + len(end_marker)]
        lines = block.splitlines()
        if len(lines) > 1 and b":" in lines[1]:  # "Proc-Type: ..." style headers
            return "no PEM block headers are permitted"
        try:
            x509.load_pem_x509_certificate(block)
        except ValueError as err:
            return f"x509: {err}"
        blocks += 1
        rest = rest[end + len(end_marker):]
    if blocks == 0:
        return "must contain at least one CERTIFICATE PEM block"
    return ""


def validate_signer_name(path: str, signer: str) -> Errs:
    """Upstream ``ValidateSignerName``: ``<domain>/<path>``, the domain with at least one dot."""
    if not signer:
        return [required(path)]
    segments = signer.split("/")
    if len(segments) != 2:
        return [invalid_value(path, signer, "must be a fully qualified domain and path of the form 'example.com/signer-name'")]
    domain, rest = segments
    errs: Errs = []
    if len(domain) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(too_long(path, "", _DNS1123_SUBDOMAIN_MAX))
    labels = domain.split(".")
    for label in labels:
        problems = is_dns1123_label(label)
        if problems:
            errs += [invalid_value(path, domain, f'validating label "{label}": {p}') for p in problems]
            break
    if len(labels) < 2:
        errs.append(invalid_value(path, domain, "should be a domain with at least two segments separated by dots"))
    for label in rest.split("."):
        problems = is_dns1123_subdomain(label)
        if problems:
            errs += [invalid_value(path, rest, f'validating label "{label}": {p}') for p in problems]
            break
    max_length = _DNS1123_SUBDOMAIN_MAX + (_DNS1123_SUBDOMAIN_MAX + _DNS1123_LABEL_MAX + 1) + 1
    if len(signer) > max_length:
        errs.append(too_long(path, "", max_length))
    return errs


@dataclass
class _Options:
    """Upstream ``certificateValidationOptions``: what this write path may do, and what the
    stored object already got away with."""

    setting_approval: bool = False
    setting_certificate: bool = False
    both_approved_and_denied: bool = False
    legacy_signer: bool = False
    duplicate_condition_types: bool = False
    empty_condition_type: bool = False
    arbitrary_certificate: bool = False
    unknown_usages: bool = False
    duplicate_usages: bool = False


def _spec(obj: Any) -> dict:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


def _conditions(obj: Any) -> list[dict]:
    status = obj.get("status") if isinstance(obj, dict) else None
    items = (status or {}).get("conditions") if isinstance(status, dict) else None
    return [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []


def _certificate(obj: Any) -> bytes:
    status = obj.get("status") if isinstance(obj, dict) else None
    return decode_bytes((status or {}).get("certificate")) if isinstance(status, dict) else b""


def _usages(obj: Any) -> list:
    usages = _spec(obj).get("usages")
    return usages if isinstance(usages, list) else []


def _options(new: Any, old: Any) -> _Options:
    if old is None:
        return _Options()
    types = [c.get("type") for c in _conditions(old)]
    usages = _usages(old)
    return _Options(
        both_approved_and_denied=APPROVED in types and DENIED in types,
        legacy_signer=_spec(old).get("signerName") == LEGACY_UNKNOWN_SIGNER,
        duplicate_condition_types=len(types) != len(set(types)),
        empty_condition_type=any(not t for t in types),
        arbitrary_certificate=_certificate(new) == _certificate(old) or bool(_check_certificate(_certificate(old))),
        unknown_usages=any(u not in KEY_USAGES for u in usages),
        duplicate_usages=len(usages) != len(set(map(str, usages))),
    )


def _validate(obj: Any, opts: _Options) -> Errs:
    errs = validate_object_meta(obj, namespaced=False, name_fn=lambda name, prefix: [], core=False)
    spec = _spec(obj)
    request = decode_bytes(spec.get("request"))
    problem = _check_csr(request)
    if problem:
        errs.append(invalid_value("spec.request", spec.get("request") or "", problem))
    usages = _usages(obj)
    if not usages:
        errs.append(required("spec.usages"))
    if not opts.unknown_usages:
        errs += [not_supported(index("spec.usages", i), u, KEY_USAGES) for i, u in enumerate(usages) if u not in KEY_USAGES]
    if not opts.duplicate_usages:
        seen: set = set()
        for i, usage in enumerate(usages):
            if str(usage) in seen:
                errs.append(duplicate(index("spec.usages", i), usage))
            seen.add(str(usage))
    signer = spec.get("signerName") if isinstance(spec.get("signerName"), str) else ""
    if not opts.legacy_signer and signer == LEGACY_UNKNOWN_SIGNER:
        errs.append(invalid_value("spec.signerName", signer, "the legacy signerName is not allowed via this API version"))
    else:
        errs += validate_signer_name("spec.signerName", signer)
    seconds = spec.get("expirationSeconds")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds < 600:
        errs.append(invalid_value("spec.expirationSeconds", seconds, "may not specify a duration less than 600 seconds (10 minutes)"))
    errs += _validate_conditions(obj, opts)
    if not opts.arbitrary_certificate:
        problem = _check_certificate(_certificate(obj))
        if problem:
            errs.append(invalid_value("status.certificate", "<certificate data>", problem))
    return errs


def _validate_conditions(obj: Any, opts: _Options) -> Errs:
    errs: Errs = []
    seen: set = set()
    approved = denied = False
    for i, cond in enumerate(_conditions(obj)):
        path = index("status.conditions", i)
        ctype, status = cond.get("type") or "", cond.get("status") or ""
        if not opts.empty_condition_type and not ctype:
            errs.append(required(f"{path}.type"))
        allowed = ["True"] if ctype in _TRUE_ONLY_TYPES else _STATUS_VALUES
        if not status:
            errs.append(required(f"{path}.status"))
        elif status not in allowed:
            errs.append(not_supported(f"{path}.status", status, allowed))
        if not opts.both_approved_and_denied:
            if ctype == APPROVED:
                approved = True
                if denied:
                    errs.append(invalid_value(f"{path}.type", ctype, "Approved and Denied conditions are mutually exclusive"))
            elif ctype == DENIED:
                denied = True
                if approved:
                    errs.append(invalid_value(f"{path}.type", ctype, "Approved and Denied conditions are mutually exclusive"))
        if not opts.duplicate_condition_types:
            if ctype in seen:
                errs.append(duplicate(f"{path}.type", ctype))
            seen.add(ctype)
    return errs


def _find(obj: Any, ctype: str) -> list[dict]:
    return [c for c in _conditions(obj) if c.get("type") == ctype]


def _validate_update(new: Any, old: Any, opts: _Options) -> Errs:
    errs = _validate(new, opts)
    for ctype in (APPROVED, DENIED, FAILED):
        if len(_find(new, ctype)) < len(_find(old, ctype)):
            errs.append(forbidden_field("status.conditions", f'updates may not remove a condition of type "{ctype}"'))
    if not opts.setting_approval:
        for ctype in (APPROVED, DENIED):
            before, after = _find(old, ctype), _find(new, ctype)
            if len(after) > len(before):
                errs.append(forbidden_field("status.conditions", f'updates may not add a condition of type "{ctype}"'))
            elif len(after) == len(before) and after != before:
                errs.append(forbidden_field("status.conditions", f'updates may not modify a condition of type "{ctype}"'))
    if _certificate(new) != _certificate(old):
        if not opts.setting_certificate:
            errs.append(forbidden_field("status.certificate", "updates may not set certificate content"))
        elif _certificate(old):
            errs.append(forbidden_field("status.certificate", "updates may not modify existing certificate content"))
    return errs + validate_object_meta_update(new, old, core=False)


def validate_csr(obj: Any, namespaced: bool = False) -> Errs:
    """``ValidateCertificateSigningRequestCreate``."""
    return _validate(obj, _options(obj, None))


def validate_csr_update(new: Any, old: Any, namespaced: bool = False) -> Errs:
    """``ValidateCertificateSigningRequestUpdate`` (the main resource)."""
    return _validate_update(new, old, _options(new, old))


def validate_csr_status_update(new: Any, old: Any, namespaced: bool = False) -> Errs:
    """``ValidateCertificateSigningRequestStatusUpdate``: may set the certificate."""
    opts = _options(new, old)
    opts.setting_certificate = True
    return _validate_update(new, old, opts)


def validate_csr_approval_update(new: Any, old: Any, namespaced: bool = False) -> Errs:
    """``ValidateCertificateSigningRequestApprovalUpdate``: may add Approved/Denied."""
    opts = _options(new, old)
    opts.setting_approval = True
    return _validate_update(new, old, opts)
