"""The CertificateSigningRequest strategy and its three admission plugins (upstream
``pkg/registry/certificates/certificates/strategy.go`` and
``plugin/pkg/admission/certificates/{approval,signing,subjectrestriction}``).

Writes, by path:

* **create**: ``spec.username``/``uid``/``groups``/``extra`` are the requester's, whatever the
  body said (an approver trusts them); ``status`` starts empty: no pre-approved requests.
* **main resource update**: neither ``spec`` nor ``status`` changes (only metadata does).
* **``approval``**: only ``status.conditions`` changes; the requester needs ``approve`` on the
  ``signers`` resource named after the signer (or ``<domain>/*``):
  ``user not permitted to approve requests with signerName "<s>"``.
* **``status``**: ``spec`` and the Approved/Denied conditions are kept from the stored object;
  a write that changes ``status.certificate`` needs ``sign`` on the signer:
  ``user not permitted to sign requests with signerName "<s>"``.

Conditions written through ``approval`` or ``status`` get ``lastUpdateTime`` (and, for a new
type/status pair, ``lastTransitionTime``) set to now when the writer left them empty
(upstream ``populateConditionTimestamps``). ``CertificateSubjectRestriction`` refuses a
``kubernetes.io/kube-apiserver-client`` request whose subject is in ``system:masters``.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone

from kubesvc.api import errors
from kubesvc.api.errors import FieldError
from kubesvc.api.validation_certificates import (
    APPROVED,
    DENIED,
    decode_bytes,
    parse_csr,
    validate_csr,
    validate_csr_approval_update,
    validate_csr_status_update,
    validate_csr_update,
)
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.authorizer import Authorizer
from kubesvc.apiserver.auth.context import current
from kubesvc.apiserver.registry.strategy import Strategy
from kubesvc.apiserver.registry.txn import Txn
from kubesvc.serving.user import SYSTEM_PRIVILEGED_GROUP, UserInfo

CERTIFICATES_GROUP = "certificates.k8s.io"
KUBE_APISERVER_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"


def is_authorized_for_signer(authorizer: Authorizer, user: UserInfo, verb: str, signer: str) -> bool:
    """Upstream ``certificates.IsAuthorizedForSignerName``: ``verb`` on ``signers/<signer>``,
    else on ``signers/<domain>/*``."""
    def allowed(name: str) -> bool:
        info = RequestInfo(True, "", verb, CERTIFICATES_GROUP, "*", "", "signers", "", name)
        return authorizer.authorize(Attributes(user, info)).allowed

    return allowed(signer) or ("/" in signer and allowed(signer.split("/", 1)[0] + "/*"))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions(obj: dict) -> list:
    status = obj.get("status")
    items = status.get("conditions") if isinstance(status, dict) else None
    return items if isinstance(items, list) else []


def populate_condition_timestamps(new: dict, old: dict, now: str) -> None:
    for cond in _conditions(new):
        if not isinstance(cond, dict):
            continue
        if not cond.get("lastUpdateTime"):
            cond["lastUpdateTime"] = now
        if not cond.get("lastTransitionTime"):
            cond["lastTransitionTime"] = next(
                (o["lastTransitionTime"] for o in _conditions(old) if isinstance(o, dict) and o.get("lastTransitionTime")
                 and o.get("type") == cond.get("type") and o.get("status") == cond.get("status")), now)


def _set_conditions(obj: dict, conditions: list) -> None:
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)


class CSRStrategy(Strategy):
    def __init__(self, info, authorizer: Authorizer | None):
        super().__init__(info)
        self.authorizer = authorizer

    # ---- create ------------------------------------------------------------------------------
    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for key in ("username", "uid", "groups", "extra"):
                spec.pop(key, None)
            request = current()
            if request is not None:
                spec.update(request.user.to_api())  # username, uid, groups, extra: the names CSR spec uses too
        obj["status"] = {}

    def validate(self, obj: dict) -> list[FieldError]:
        return validate_csr(obj)

    # ---- updates -----------------------------------------------------------------------------
    def prepare_for_update(self, new: dict, old: dict) -> None:
        new["spec"] = copy.deepcopy(old.get("spec"))
        new["status"] = copy.deepcopy(old.get("status") or {})

    def prepare_for_subresource_update(self, subresource: str, new: dict, old: dict) -> None:
        if subresource == "approval":
            conditions = copy.deepcopy(_conditions(new))
            new["spec"] = copy.deepcopy(old.get("spec"))
            new["status"] = copy.deepcopy(old.get("status") or {})
            _set_conditions(new, conditions)
        else:
            self.prepare_for_update(new, old)
            return
        populate_condition_timestamps(new, old, _now())

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        super().prepare_for_status_update(new, old)
        new["spec"] = copy.deepcopy(old.get("spec"))
        # Approved/Denied change only through /approval: the stored ones stand
        kept = [c for c in _conditions(new) if not (isinstance(c, dict) and c.get("type") in (APPROVED, DENIED))]
        approval = [c for c in _conditions(old) if isinstance(c, dict) and c.get("type") in (APPROVED, DENIED)]
        _set_conditions(new, copy.deepcopy(approval) + kept)
        populate_condition_timestamps(new, old, _now())

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        return validate_csr_update(new, old)

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[FieldError]:
        if subresource == "approval":
            return validate_csr_approval_update(new, old)
        if subresource == "status":
            return validate_csr_status_update(new, old)
        return self.validate_update(new, old)

    # ---- admission ---------------------------------------------------------------------------
    def _forbidden(self, obj: dict, why: str) -> errors.StatusError:
        name = (obj.get("metadata") or {}).get("name") or ""
        return errors.forbidden(self.info.resource, name, self.info.group, why)

    def _signer(self, obj: dict) -> str:
        signer = (obj.get("spec") or {}).get("signerName")
        return signer if isinstance(signer, str) else ""

    async def begin_create(self, obj: dict, dry_run: bool) -> Txn:
        """CertificateSubjectRestriction."""
        if self._signer(obj) == KUBE_APISERVER_CLIENT_SIGNER:
            try:
                csr = parse_csr(decode_bytes((obj.get("spec") or {}).get("request")))
            except ValueError:
                return Txn()  # validation answers for a request that is no CSR
            from cryptography.x509.oid import NameOID

            orgs = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
            if SYSTEM_PRIVILEGED_GROUP in orgs:
                raise self._forbidden(obj, f"use of {KUBE_APISERVER_CLIENT_SIGNER} signer with {SYSTEM_PRIVILEGED_GROUP} group is not allowed")
        return Txn()

    async def begin_update(self, new: dict, old: dict, dry_run: bool, subresource: str) -> Txn:
        """CertificateApproval and CertificateSigning."""
        request = current()
        if request is None or self.authorizer is None:
            return Txn()  # the apiserver itself
        if subresource == "approval":
            signer = self._signer(new)
            if not is_authorized_for_signer(self.authorizer, request.user, "approve", signer):
                raise self._forbidden(new, f'user not permitted to approve requests with signerName "{signer}"')
        elif subresource == "status":
            if (new.get("status") or {}).get("certificate") != (old.get("status") or {}).get("certificate"):
                signer = self._signer(old)
                if not is_authorized_for_signer(self.authorizer, request.user, "sign", signer):
                    raise self._forbidden(new, f'user not permitted to sign requests with signerName "{signer}"')
        return Txn()
