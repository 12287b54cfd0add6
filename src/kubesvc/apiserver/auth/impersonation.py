"""Impersonation: acting as another user with ``Impersonate-*`` headers (k8s.io/apiserver
pkg/endpoints/filters/impersonation.go; identity.md §1.9). ``kubectl --as jane --as-group g``
sends them.

==============================  ==============================================================
``Impersonate-User``            the user; ``system:serviceaccount:<ns>:<name>`` is a ServiceAccount
``Impersonate-Group``           one group per header, repeatable
``Impersonate-Uid``             the uid
``Impersonate-Extra-<key>``     extra values, repeatable; ``<key>`` lower-cased, then %-unescaped
==============================  ==============================================================

Groups, extras or a uid without a user are refused (upstream answers 500 with the same text;
a client's mistake is a 400 here). Each requested item must be allowed the verb
``impersonate`` on:

=================  ======================  ======================  ===========  =========
item               API group               resource/subresource    namespace    name
=================  ======================  ======================  ===========  =========
ServiceAccount     ""                      serviceaccounts         its ns       its name
user               ""                      users                                the user
group              ""                      groups                               the group
extra              authentication.k8s.io   userextras/<key>                     the value
uid                authentication.k8s.io   uids                                 the uid
=================  ======================  ======================  ===========  =========

The first refusal is the standard 403 for that question, e.g. ``users "jane" is forbidden:
User "bob" cannot impersonate resource "users" in API group "" at the cluster scope``.

The impersonated user has exactly the requested uid and extras. Its groups are the requested
ones when any ``Impersonate-Group`` is sent, else a ServiceAccount's two groups (a plain user
none); then ``system:authenticated`` is appended for anyone but ``system:anonymous`` unless
``system:authenticated`` or ``system:unauthenticated`` is already there, and
``system:unauthenticated`` for ``system:anonymous`` unless present.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from kubesvc.api import errors
from kubesvc.apiserver.auth.attributes import Attributes, RequestInfo
from kubesvc.apiserver.auth.authorizer import forbidden
from kubesvc.serving.user import (ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo, service_account_groups,
                                         service_account_user, split_service_account)

USER_HEADER = "Impersonate-User"
GROUP_HEADER = "Impersonate-Group"
UID_HEADER = "Impersonate-Uid"
EXTRA_PREFIX = "Impersonate-Extra-"
AUTHENTICATION_GROUP = "authentication.k8s.io"


@dataclass(frozen=True)
class Impersonation:
    """One requested item (upstream builds a v1.ObjectReference per item)."""

    kind: str  # ServiceAccount, User, Group, UserExtra, UID
    name: str
    namespace: str = ""
    extra_key: str = ""  # UserExtra: the key (upstream keeps it in FieldPath)

    @property
    def api_version(self) -> str:
        return "authentication.k8s.io/v1" if self.kind in ("UserExtra", "UID") else ""

    def go_value(self) -> str:
        """Go's ``%v`` of the ObjectReference: ``{Kind Namespace Name UID APIVersion ResourceVersion FieldPath}``."""
        return "{" + " ".join((self.kind, self.namespace, self.name, "", self.api_version, "", self.extra_key)) + "}"

    def request_info(self, path: str) -> RequestInfo:
        resource, group, subresource = {
            "ServiceAccount": ("serviceaccounts", "", ""),
            "User": ("users", "", ""),
            "Group": ("groups", "", ""),
            "UserExtra": ("userextras", AUTHENTICATION_GROUP, self.extra_key),
            "UID": ("uids", AUTHENTICATION_GROUP, ""),
        }[self.kind]
        version = "v1" if group else ""
        return RequestInfo(True, path, "impersonate", group, version, self.namespace, resource, subresource, self.name)


def _unescape_extra_key(encoded: str) -> str:
    """Go's ``url.PathUnescape``, keeping the raw key when it is malformed."""
    try:
        return urllib.parse.unquote(encoded, errors="strict") if _well_formed_escapes(encoded) else encoded
    except UnicodeDecodeError:
        return encoded


def _well_formed_escapes(text: str) -> bool:
    i = 0
    while True:
        i = text.find("%", i)
        if i < 0:
            return True
        if len(text) < i + 3 or not all(c in "0123456789abcdefABCDEF" for c in text[i + 1:i + 3]):
            return False
        i += 3


def requested(headers: Mapping[str, str]) -> list[Impersonation]:
    """The items the headers ask for, in upstream's order; a 400 for groups, extras or a uid
    without a user."""
    items: list[Impersonation] = []
    getall = headers.getall if hasattr(headers, "getall") else (lambda name, default=(): [headers[name]] if name in headers else list(default))
    users = getall(USER_HEADER, [])
    user = users[0] if users else ""
    if user:
        split = split_service_account(user)
        items.append(Impersonation("ServiceAccount", split[1], split[0]) if split else Impersonation("User", user))
    groups = getall(GROUP_HEADER, [])
    items.extend(Impersonation("Group", group) for group in groups)
    extras = False
    for name, value in headers.items():
        if name.lower().startswith(EXTRA_PREFIX.lower()):
            extras = True
            items.append(Impersonation("UserExtra", value, extra_key=_unescape_extra_key(name[len(EXTRA_PREFIX):].lower())))
    uids = getall(UID_HEADER, [])
    uid = uids[0] if uids else ""
    if uid:
        items.append(Impersonation("UID", uid))
    if (groups or extras or uid) and not user:
        raise errors.bad_request(f"requested [{' '.join(item.go_value() for item in items)}] without impersonating a user")
    return items


def impersonated_user(items: list[Impersonation], groups_specified: bool) -> UserInfo:
    """The user the items describe (upstream's groups rules, see the module docstring)."""
    name, uid = "", ""
    groups: list[str] = []
    extra: dict[str, tuple[str, ...]] = {}
    for item in items:
        if item.kind == "ServiceAccount":
            name = service_account_user(item.namespace, item.name)
            if not groups_specified:
                groups = list(service_account_groups(item.namespace))
        elif item.kind == "User":
            name = item.name
        elif item.kind == "Group":
            groups.append(item.name)
        elif item.kind == "UserExtra":
            extra[item.extra_key] = (*extra.get(item.extra_key, ()), item.name)
        elif item.kind == "UID":
            uid = item.name
    if name != ANONYMOUS:
        if ALL_AUTHENTICATED not in groups and ALL_UNAUTHENTICATED not in groups:
            groups.append(ALL_AUTHENTICATED)
    elif ALL_UNAUTHENTICATED not in groups:
        groups.append(ALL_UNAUTHENTICATED)
    return UserInfo(name, uid, tuple(groups), extra)


def impersonate(headers: Mapping[str, str], path: str, requestor: UserInfo, authorizer) -> UserInfo:
    """The user the request acts as: ``requestor`` itself without ``Impersonate-*`` headers,
    else the impersonated user once every item is allowed (403 for the first that is not)."""
    items = requested(headers)
    if not items:
        return requestor
    for item in items:
        info = item.request_info(path)
        verdict = authorizer.authorize(Attributes(requestor, info))
        if not verdict.allowed:
            raise forbidden(requestor, info, verdict.reason)
    return impersonated_user(items, groups_specified=any(item.kind == "Group" for item in items))
