"""``--max-requests-inflight`` and ``--max-mutating-requests-inflight``: how many requests the
apiserver serves at once, as kube-apiserver's max-in-flight filter does.

Upstream: ``k8s.io/apiserver/pkg/server/filters/maxinflight.go`` (``WithMaxInFlightLimit``, the
filter kube-apiserver runs when API Priority and Fairness is off), defaults in
``pkg/server/config.go``: 400 and 200.

* Two buckets: requests whose verb is ``get``, ``list`` or ``watch`` count against
  ``--max-requests-inflight``, every other verb (create, update, patch, delete, …) against
  ``--max-mutating-requests-inflight``. Non-resource requests (``/healthz``, discovery) are
  ``get``s. 0 turns a bucket's limit off.
* Long-running requests are not counted (upstream ``BasicLongRunningRequestCheck`` as
  kube-apiserver builds it): the verbs ``watch`` and ``proxy`` and the subresources ``attach``,
  ``exec``, ``proxy``, ``log`` and ``portforward``. A watch held open for an hour takes no slot.
* A request that finds its bucket full is refused at once (no queue) with 429 and
  ``Retry-After: 1``, upstream's words ``Too many requests, please try again later.``, unless its
  user is in ``system:masters`` ("so powerful that they should always get an answer"). Upstream
  writes the words as plain text; here they are a ``Status`` (reason ``TooManyRequests``,
  ``retryAfterSeconds`` 1), as every kubesvc error is, which client-go and the Python client
  read the same way (client-go retries a 429 after its Retry-After).

Upstream runs the filter after authentication and impersonation, before authorization. Here it
runs first and looks at the user only when it is about to refuse (authenticating then is the
rare path's cost, never the common one's); a slot is held until the handler has returned its
response.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.auth.attributes import RequestInfo, request_info
from kubesvc.apiserver.auth.impersonation import impersonate
from kubesvc.serving.user import SYSTEM_PRIVILEGED_GROUP
from kubesvc.apiserver.handlers import json_response
from kubesvc.apiserver import appkeys

DEFAULT_MAX_REQUESTS_INFLIGHT = 400
DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT = 200
NON_MUTATING_VERBS = frozenset({"get", "list", "watch"})
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
RETRY_AFTER_SECONDS = 1
TOO_MANY_REQUESTS = "Too many requests, please try again later."


def is_long_running(info: RequestInfo) -> bool:
    """Upstream's ``BasicLongRunningRequestCheck(watch, proxy; attach, exec, proxy, log, portforward)``."""
    if info.verb in LONG_RUNNING_VERBS:
        return True
    return info.is_resource_request and info.subresource in LONG_RUNNING_SUBRESOURCES


def is_mutating(info: RequestInfo) -> bool:
    return info.verb not in NON_MUTATING_VERBS


def too_many_requests() -> StatusError:
    return StatusError(429, "TooManyRequests", TOO_MANY_REQUESTS, {"retryAfterSeconds": RETRY_AFTER_SECONDS})


@dataclass
class InFlight:
    """The two buckets: limits (0: none) and the requests in flight now."""

    max_requests: int = DEFAULT_MAX_REQUESTS_INFLIGHT
    max_mutating: int = DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT
    read_only: int = 0
    mutating: int = 0

    def try_acquire(self, mutating: bool) -> bool:
        """Take a slot in the request's bucket; False when it is full."""
        if mutating:
            if self.max_mutating and self.mutating >= self.max_mutating:
                return False
            self.mutating += 1
        else:
            if self.max_requests and self.read_only >= self.max_requests:
                return False
            self.read_only += 1
        return True

    def release(self, mutating: bool) -> None:
        if mutating:
            self.mutating -= 1
        else:
            self.read_only -= 1


async def _privileged(request: web.Request) -> bool:
    """Is the request's user (as authenticated and impersonated) in ``system:masters``? Any
    credential problem is not: the 429 stands."""
    app = request.app
    try:
        user = await app[appkeys.AUTHENTICATOR].authenticate(request)
        user = impersonate(request.headers, request.path, user, app[appkeys.AUTHORIZER])
    except StatusError:
        return False
    return SYSTEM_PRIVILEGED_GROUP in user.groups


@web.middleware
async def in_flight_middleware(request: web.Request, handler) -> web.StreamResponse:
    """The max-in-flight filter; ``app[appkeys.IN_FLIGHT]`` holds the buckets (absent: no limits)."""
    buckets: InFlight | None = request.app.get(appkeys.IN_FLIGHT)
    if buckets is None or not (buckets.max_requests or buckets.max_mutating):
        return await handler(request)
    info = request["request_info"] = request_info(request.method, request.path, request.query)  # authorization reuses it
    if is_long_running(info):
        return await handler(request)
    mutating = is_mutating(info)
    if not buckets.try_acquire(mutating):
        if await _privileged(request):
            return await handler(request)
        refusal = too_many_requests()
        return json_response(refusal.status(), 429, {"Retry-After": str(RETRY_AFTER_SECONDS)})
    try:
        return await handler(request)
    finally:
        buckets.release(mutating)
