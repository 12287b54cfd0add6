"""``csrapproving``: kube-controller-manager's SubjectAccessReview approver
(pkg/controller/certificates/approver/sarapprove.go; identity.md §4.2).

A request not yet approved, denied or issued is tried against two recognizers, in order:

1. **selfnodeclient**: a kubelet client certificate request (signer
   ``kubernetes.io/kube-apiserver-client-kubelet``, the shape in ``csr.kubelet_client_problem``)
   whose requester (``spec.username``) is the certificate's CN: a node renewing its own;
2. **nodeclient**: any kubelet client certificate request (a bootstrap token asking for a
   node's first certificate).

For the first that matches, a SubjectAccessReview asks whether the requester (``spec.username``,
``uid``, ``groups``, ``extra``) may ``create`` ``certificatesigningrequests/<selfnodeclient|nodeclient>``
in ``certificates.k8s.io``, the virtual subresources upstream's bootstrap policy grants through
``system:certificates.k8s.io:certificatesigningrequests:[self]nodeclient``. Allowed: an
``Approved`` condition, reason ``AutoApproved``, written through the ``approval`` subresource.
Not allowed: the request stays pending for a person (``kubectl certificate approve``).

One recognizer of our own, tried for ``kubernetes.io/kube-apiserver-client`` requests:

3. **nodekubeproxyclient**: a node (requester ``system:node:<name>`` in group ``system:nodes``)
   asking for kube-proxy's client certificate in exactly the shape ``kubesvc join`` sends
   (``csr.kube_proxy_client_problem``: ``CN=system:kube-proxy`` alone, no organization, no SANs,
   usages digital signature, key encipherment, client auth). k3s's supervisor signs a
   ``system:kube-proxy`` certificate for any holder of the node token, without a CSR; here the
   node asks with its own credential and the SubjectAccessReview is on the virtual subresource
   ``certificatesigningrequests/nodekubeproxyclient``, which ``up --cluster-init`` grants to
   ``system:nodes`` (nodejoin/serverside.py). A joined node runs its proxy and its LB announcer
   with that certificate (the announcer's Leases are refused to a node's own identity by
   NodeRestriction).

Anything else is never auto-approved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kubesvc.client.informer import Informer
from kubesvc.client.rest import RestClient
from kubesvc.client.workqueue import WorkQueue
from kubesvc.controllers.certificates.csr import (
    CSRS,
    KUBE_APISERVER_CLIENT_SIGNER,
    KUBELET_CLIENT_SIGNER,
    certificate,
    common_name,
    is_decided,
    kube_proxy_client_problem,
    kubelet_client_problem,
    parsed_request,
)
from kubesvc.controllers.runtime import run_workers
from kubesvc.util.clock import Clock, RealClock

log = logging.getLogger("kubesvc.controllers.certificates.approver")

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Recognized:
    subresource: str  # the virtual subresource the requester must be allowed to create
    message: str


SELF_NODE_CLIENT = Recognized("selfnodeclient", "Auto approving self kubelet client certificate after SubjectAccessReview.")
NODE_CLIENT = Recognized("nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview.")
NODE_KUBE_PROXY_CLIENT = Recognized("nodekubeproxyclient", "Auto approving kube-proxy client certificate for a node after "
                                    "SubjectAccessReview: the node runs its proxy and LoadBalancer announcer as system:kube-proxy.")
NODE_USER_PREFIX, NODES_GROUP = "system:node:", "system:nodes"


def requested_by_a_node(csr: dict) -> bool:
    spec = csr.get("spec") or {}
    username = spec.get("username") or ""
    return username.startswith(NODE_USER_PREFIX) and len(username) > len(NODE_USER_PREFIX) and NODES_GROUP in (spec.get("groups") or [])


def recognize(csr: dict) -> list[Recognized]:
    """The recognizers that match ``csr``, in the order they are tried (none for a request
    already decided or issued, or one that does not parse)."""
    if certificate(csr) or is_decided(csr):
        return []
    try:
        request = parsed_request(csr)
    except ValueError:
        return []
    spec = csr.get("spec") or {}
    if spec.get("signerName") == KUBE_APISERVER_CLIENT_SIGNER:
        if requested_by_a_node(csr) and not kube_proxy_client_problem(request, spec.get("usages") or []):
            return [NODE_KUBE_PROXY_CLIENT]
        return []
    if spec.get("signerName") != KUBELET_CLIENT_SIGNER or kubelet_client_problem(request, spec.get("usages") or []):
        return []
    matched = [NODE_CLIENT]
    if spec.get("username") == common_name(request):
        matched.insert(0, SELF_NODE_CLIENT)
    return matched


def access_review(csr: dict, subresource: str) -> dict:
    spec = csr.get("spec") or {}
    review_spec: dict = {"user": spec.get("username") or "",
                         "resourceAttributes": {"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
                                                "subresource": subresource, "verb": "create", "version": "*"}}
    for key in ("uid", "groups", "extra"):
        if spec.get(key):
            review_spec[key] = spec[key]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": review_spec}


def approved(csr: dict, message: str) -> dict:
    status = dict(csr.get("status") or {})
    status["conditions"] = [*(status.get("conditions") or []),
                            {"type": "Approved", "status": "True", "reason": "AutoApproved", "message": message}]
    return {**csr, "status": status}


class CSRApprovingController:
    def __init__(self, client: RestClient, csrs: Informer, *, clock: Clock | None = None, workers: int = 5):
        self.client = client
        self.csrs = csrs
        self.workers = workers
        self.queue = WorkQueue(clock=clock or RealClock())
        csrs.add_event_handler(self._enqueue, lambda old, new: self._enqueue(new), None)

    def _enqueue(self, csr: dict) -> None:
        self.queue.add(csr["metadata"]["name"])

    async def run(self) -> None:
        await self.csrs.wait_for_sync()
        await run_workers("csrapproving", self.queue, self.sync, self.workers)

    async def sync(self, name: str) -> None:
        csr = self.csrs.indexer.get(name, None)
        if csr is None:
            return
        tried = []
        for recognized in recognize(csr):
            tried.append(recognized.subresource)
            review = await self.client.create(SUBJECT_ACCESS_REVIEWS, access_review(csr, recognized.subresource))
            if (review.get("status") or {}).get("allowed"):
                path = self.client.resource(CSRS)._object_path(name, None, "approval")
                await self.client.update(path, approved(csr, recognized.message))
                log.info("approved %s (%s)", name, recognized.subresource)
                return
        if tried:  # upstream's IgnorableError: left pending, not retried
            log.info("recognized csr %r as %s but subject access review was not approved", name, tried)
