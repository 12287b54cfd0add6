"""authentication.k8s.io/v1 ``TokenReview`` and ``SelfSubjectReview``: create-only questions
about identity, answered and never stored (pkg/registry/authentication/tokenreview/storage.go,
selfsubjectreview/rest.go; identity.md §7.2).

* **TokenReview** (``POST /apis/authentication.k8s.io/v1/tokenreviews``): the apiserver's own
  request authenticator run on a request carrying only ``Authorization: Bearer <spec.token>``,
  for ``spec.audiences`` (the API audiences when empty). The answer echoes the spec and fills
  ``status``: ``authenticated``, ``user`` (username, uid, groups, extra; ``{}`` when not
  authenticated), ``audiences`` and ``error`` (the authenticators' error text). An empty token
  is a 400 ``token is required for TokenReview in authentication``.
* **SelfSubjectReview** (``POST /apis/authentication.k8s.io/v1/selfsubjectreviews``, ``kubectl
  auth whoami``): ``metadata.creationTimestamp`` now and ``status.userInfo``, the caller as
  the server sees it after impersonation.
"""

from __future__ import annotations

from kubesvc.api import errors
from kubesvc.util.clock import Clock
from kubesvc.util.golang import rfc3339


class IdentityReviews:
    """The two handlers, over the apiserver's request authenticator (``authenticator.py``)."""

    def __init__(self, authenticator, clock: Clock):
        self.authenticator = authenticator
        self.clock = clock

    async def token_review(self, request, create) -> dict:
        return await self.review_token(create.body)

    async def review_token(self, body: dict) -> dict:
        spec = dict(body.get("spec") or {})
        token = spec.get("token") or ""
        if not token:
            raise errors.bad_request("token is required for TokenReview in authentication")
        response, error = await self.authenticator.review_token(token, tuple(spec.get("audiences") or ()))
        status: dict = {}
        if response is not None:
            status["authenticated"] = True
        status["user"] = response.user.to_api() if response is not None else {}
        if response is not None and response.audiences:
            status["audiences"] = list(response.audiences)
        if error:
            status["error"] = error
        return {"metadata": body.get("metadata") or {"creationTimestamp": None}, "spec": spec, "status": status}

    async def self_subject_review(self, request, create) -> dict:
        user = request["user"]
        return {"metadata": {"creationTimestamp": rfc3339(self.clock.now())}, "status": {"userInfo": user.to_api()}}
