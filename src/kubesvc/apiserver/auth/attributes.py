"""What a request asks for, as authorizers see it (k8s.io/apiserver pkg/endpoints/request
``RequestInfoFactory.NewRequestInfo`` and pkg/authorization/authorizer ``AttributesRecord``).

Resource requests are paths under ``/api/<version>`` (group "") or ``/apis/<group>/<version>``;
the verb comes from the method (POST create, GET/HEAD get, or list/watch on a collection, PUT
update, PATCH patch, DELETE delete or deletecollection on a collection); ``?watch=true|1`` and
the legacy ``/watch/`` prefix make it ``watch``. ``/namespaces/<ns>/status|finalize`` are
subresources of the namespace itself. A list or watch with ``fieldSelector=metadata.name=x``
names ``x``, so ``resourceNames`` rules can allow it. Everything else is a non-resource request
whose verb is the lower-cased method. identity.md §2.1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kubesvc.serving.user import UserInfo
from kubesvc.util import golang

_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


@dataclass(frozen=True)
class RequestInfo:
    is_resource_request: bool
    path: str
    verb: str
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    field_selector: str = ""
    label_selector: str = ""


@dataclass(frozen=True)
class Attributes:
    """One authorization question: may ``user`` do ``info``?"""

    user: UserInfo
    info: RequestInfo

    @property
    def verb(self) -> str:
        return self.info.verb


def _watch_requested(query: Mapping[str, str]) -> bool:
    """``watch`` as the ListOptions parameter codec reads it: ``yes`` and ``""`` are true too."""
    return golang.query_bool(query.get("watch"))


def _name_from_field_selector(selector: str) -> str:
    for term in selector.split(","):
        key, op, value = term.partition("=")
        if op and key.strip() == "metadata.name" and not value.startswith("="):
            return value.strip()
        if key.strip() == "metadata.name" and value.startswith("="):  # ==
            return value[1:].strip()
    return ""


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    method = method.upper()
    parts = [p for p in path.split("/") if p]
    non_resource = RequestInfo(False, path, method.lower())
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return non_resource
    verb = _METHOD_VERBS.get(method, method.lower())
    if rest and rest[0] in ("watch", "proxy"):
        verb, rest = rest[0], rest[1:]
    if not rest:
        return non_resource  # discovery: /api/v1, /apis/g/v
    namespace = ""
    if rest[0] == "namespaces":
        if len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
                rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if resource == "namespaces" and name:
        namespace = name  # a namespace is in its own namespace, as upstream records it
    field_selector = query.get("fieldSelector", "")
    label_selector = query.get("labelSelector", "")
    if not name and verb in ("get", "delete"):
        verb = {"get": "list", "delete": "deletecollection"}[verb]
    if verb in ("list", "get") and _watch_requested(query):
        verb = "watch"
    if verb in ("list", "watch") and not name:
        name = _name_from_field_selector(field_selector)
    return RequestInfo(True, path, verb, group, version, namespace, resource, subresource, name, field_selector, label_selector)
