"""certificates.k8s.io/v1 CertificateSigningRequest: a request for an X.509 certificate, signed
by a named signer once someone (or a controller) approves it.

Its life, as upstream runs it (identity.md §4; k8s.io/api certificates/v1 types.go):

* A client ``POST``s a PEM ``CERTIFICATE REQUEST`` in ``spec.request`` with a ``signerName``
  (``kubernetes.io/kube-apiserver-client-kubelet`` for a node's client certificate), the
  ``usages`` it wants and, optionally, ``expirationSeconds`` (at least 600). The apiserver
  fills ``spec.username``/``uid``/``groups``/``extra`` from the authenticated requester;
  whatever the body says there is dropped, so an approver can trust them.
* Approval is a write of the ``approval`` subresource that adds an ``Approved`` (or
  ``Denied``) condition (``kubectl certificate approve|deny``); it also needs ``approve`` on
  the ``signers`` resource named after the signer.
* The signer writes the ``status`` subresource with ``status.certificate`` (a PEM chain);
  that needs ``sign`` on the signer. A signer that refuses adds a ``Failed`` condition.

The kind is cluster-scoped, short name ``csr``, with ``spec.signerName`` a selectable field.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BYTES, INT32, STRING, TIME, F, ListOf, MapOf, Obj

CERTIFICATES_GROUP = "certificates.k8s.io"

CSR_CONDITION = Obj(
    "io.k8s.api.certificates.v1.CertificateSigningRequestCondition",
    {
        "type": F(STRING, 'type of the condition. Known conditions are "Approved", "Denied", and "Failed".'),
        "status": F(STRING, 'status of the condition, one of True, False, Unknown. Approved, Denied, and Failed '
                            'conditions may not be "False" or "Unknown".'),
        "reason": F(STRING, "reason indicates a brief reason for the request state"),
        "message": F(STRING, "message contains a human readable message with details about the request state"),
        "lastUpdateTime": F(TIME, "lastUpdateTime is the time of the last update to this condition"),
        "lastTransitionTime": F(TIME, "lastTransitionTime is the time the condition last transitioned from one "
                                      "status to another. If unset, when a new condition type is added or an "
                                      "existing condition's status is changed, the server defaults this to the "
                                      "current time."),
    },
    description="CertificateSigningRequestCondition describes a condition of a CertificateSigningRequest object",
    required=("type", "status"),
)

CSR_SPEC = Obj(
    "io.k8s.api.certificates.v1.CertificateSigningRequestSpec",
    {
        "request": F(BYTES, 'request contains an x509 certificate signing request encoded in a "CERTIFICATE '
                            'REQUEST" PEM block. When serialized as JSON or YAML, the data is additionally '
                            "base64-encoded."),
        "signerName": F(STRING, "signerName indicates the requested signer, and is a qualified name.\n\nList/watch "
                                "requests for CertificateSigningRequests can filter on this field using a "
                                '"spec.signerName=NAME" fieldSelector.'),
        "expirationSeconds": F(INT32, "expirationSeconds is the requested duration of validity of the issued "
                                      "certificate. The certificate signer may issue a certificate with a "
                                      "different validity duration so a client must check the delta between the "
                                      "notBefore and and notAfter fields in the issued certificate to determine "
                                      "the actual duration.\n\nThe minimum valid value for expirationSeconds is "
                                      "600, i.e. 10 minutes."),
        "usages": F(ListOf(STRING), "usages specifies a set of key usages requested in the issued certificate."),
        "username": F(STRING, "username contains the name of the user that created the CertificateSigningRequest. "
                              "Populated by the API server on creation and immutable."),
        "uid": F(STRING, "uid contains the uid of the user that created the CertificateSigningRequest. Populated "
                         "by the API server on creation and immutable."),
        "groups": F(ListOf(STRING), "groups contains group membership of the user that created the "
                                    "CertificateSigningRequest. Populated by the API server on creation and "
                                    "immutable."),
        "extra": F(MapOf(ListOf(STRING)), "extra contains extra attributes of the user that created the "
                                          "CertificateSigningRequest. Populated by the API server on creation and "
                                          "immutable."),
    },
    description="CertificateSigningRequestSpec contains the certificate request.",
    required=("request", "signerName"),
)

CSR_STATUS = Obj(
    "io.k8s.api.certificates.v1.CertificateSigningRequestStatus",
    {
        "conditions": F(ListOf(CSR_CONDITION, "map", ("type",)),
                        'conditions applied to the request. Known conditions are "Approved", "Denied", and '
                        '"Failed".'),
        "certificate": F(BYTES, "certificate is populated with an issued certificate by the signer after an "
                                "Approved condition is present. This field is set via the /status subresource. "
                                "Once populated, this field is immutable."),
    },
    description="CertificateSigningRequestStatus contains conditions used to indicate approved/denied/failed "
                "status of the request, and the issued certificate.",
)

CERTIFICATE_SIGNING_REQUEST = kind_schema(
    "io.k8s.api.certificates.v1.CertificateSigningRequest", (CERTIFICATES_GROUP, "v1", "CertificateSigningRequest"),
    "CertificateSigningRequest objects provide a mechanism to obtain x509 certificates by submitting a "
    "certificate signing request, and having it asynchronously approved and issued.",
    {"spec": F(CSR_SPEC, "spec contains the certificate request, and is immutable after creation. Only the "
                         "request, signerName, expirationSeconds, and usages fields can be set on creation. "
                         "Other fields are derived by Kubernetes and cannot be modified by users."),
     "status": F(CSR_STATUS, "status contains information about whether the request is approved or denied, and "
                             "the certificate issued by the signer, or the failure condition indicating signer "
                             "failure.")},
    required=("spec",),
)

CSR_INFO = register(KindInfo(
    CERTIFICATES_GROUP, "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest",
    namespaced=False, schema=CERTIFICATE_SIGNING_REQUEST, short_names=("csr",), subresources=("approval", "status"),
    field_labels={"spec.signerName": ("spec", "signerName")},
))
