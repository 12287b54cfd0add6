"""``csrcleaner``: kube-controller-manager's CSR garbage collection
(pkg/controller/certificates/cleaner/cleaner.go).

Every hour (``POLLING_INTERVAL``) every CertificateSigningRequest is listed and deleted when:

* its issued certificate has expired (any certificate in ``status.certificate`` past NotAfter);
* it is pending (no conditions) and older than 24 hours;
* it was approved, denied or failed more than an hour ago (the condition's
  ``lastUpdateTime``), or it was issued and approved more than an hour ago.

A decided request is kept an hour so its requester can read the result; the node that asked
has its certificate by then.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from cryptography import x509

from kubesvc.client.informer import Informer
from kubesvc.client.rest import ClientError, RestClient, is_not_found
from kubesvc.controllers.certificates.csr import CSRS, certificate, conditions
from kubesvc.util import golang
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.certificates.cleaner")

POLLING_INTERVAL = 3600.0
APPROVED_EXPIRATION = timedelta(hours=1)
DENIED_EXPIRATION = timedelta(hours=1)
PENDING_EXPIRATION = timedelta(hours=24)


def _time(value) -> datetime | None:
    try:
        return golang.parse_rfc3339(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _older_than(value, age: timedelta, now: datetime) -> bool:
    moment = _time(value)
    return moment is not None and now - moment > age


def _issued_expired(csr: dict, now: datetime) -> bool:
    pem = certificate(csr)
    if not pem:
        return False
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return False
    return any(now > cert.not_valid_after_utc for cert in certs)


def should_delete(csr: dict, now: datetime) -> str:
    """Why ``csr`` goes now ("" to keep it): upstream's ``handle`` criteria."""
    if _issued_expired(csr, now):
        return "its certificate has expired"
    conds = conditions(csr)
    if not conds and _older_than((csr.get("metadata") or {}).get("creationTimestamp"), PENDING_EXPIRATION, now):
        return "it has been pending for more than 24h"
    for cond in conds:
        ctype = cond.get("type")
        if ctype == "Approved" and _older_than(cond.get("lastUpdateTime"), APPROVED_EXPIRATION, now):
            return "it was approved more than 1h ago" + (" and issued" if certificate(csr) else "")
        if ctype in ("Denied", "Failed") and _older_than(cond.get("lastUpdateTime"), DENIED_EXPIRATION, now):
            return f"it was {ctype.lower()} more than 1h ago"
    return ""


class CSRCleanerController:
    def __init__(self, client: RestClient, csrs: Informer, *, clock: Clock | None = None, interval: float = POLLING_INTERVAL):
        self.client = client
        self.csrs = csrs
        self.clock = clock or RealClock()
        self.interval = interval

    async def run(self) -> None:
        await self.csrs.wait_for_sync()
        while True:
            await self.clean()
            await asyncio.sleep(self.interval)

    async def clean(self) -> list[str]:
        removed = []
        now = self.clock.now()
        for csr in self.csrs.indexer.list():
            why = should_delete(csr, now)
            if not why:
                continue
            name = csr["metadata"]["name"]
            try:
                await self.client.resource(CSRS).delete(name)
                removed.append(name)
                log.info("deleted certificatesigningrequest %s: %s", name, why)
            except ClientError as exc:
                if not is_not_found(exc):
                    log.warning("could not delete certificatesigningrequest %s: %s", name, exc)
        return removed
