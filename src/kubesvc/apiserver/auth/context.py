"""Who is asking, for code below the handlers (upstream ``genericapirequest.UserFrom(ctx)``
and ``RequestInfoFrom(ctx)``): the request filter records the authenticated user and the
request's attributes here, and registry strategies that decide by the requester (RBAC
escalation prevention, NodeRestriction) read them back.

aiohttp serves each request in its own task context, so the value is the current request's.
Code running outside any request (bootstrap, the apiserver's own loops) sees None: it is
the apiserver itself, as upstream's loopback client in ``system:masters``.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from kubesvc.apiserver.auth.attributes import RequestInfo
from kubesvc.serving.user import UserInfo


@dataclass(frozen=True)
class RequestContext:
    user: UserInfo
    info: RequestInfo


_CURRENT: ContextVar[RequestContext | None] = ContextVar("kubesvc_request_context", default=None)


def set_current(user: UserInfo, info: RequestInfo) -> None:
    _CURRENT.set(RequestContext(user, info))


def current() -> RequestContext | None:
    return _CURRENT.get()
