"""Impersonation (auth/impersonation.py): the items headers ask for, the checks, and the
resulting groups (upstream's impersonation_test.go cases)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.auth.authorizer import Decision, Verdict
from kubesvc.apiserver.auth.impersonation import impersonate
from kubesvc.serving.user import UserInfo


class Allow:
    """Allows what ``allowed`` lists as (resource, subresource, name) for the requestor."""

    def __init__(self, *allowed):
        self.allowed = set(allowed)
        self.asked = []

    def authorize(self, attrs):
        info = attrs.info
        self.asked.append((attrs.verb, info.api_group, info.resource, info.subresource, info.namespace, info.name))
        key = (info.resource, info.subresource, info.name)
        if key in self.allowed or (info.resource, "*") in self.allowed:
            return Verdict(Decision.ALLOW)
        return Verdict(Decision.NO_OPINION)


DEV = UserInfo("dev", groups=("devs", "system:authenticated"))


def headers(*pairs) -> CIMultiDict:
    return CIMultiDict(pairs)


@pytest.mark.parametrize("sent,allowed,user", [
    (headers(), (), DEV),
    (headers(("Impersonate-User", "tester")), (("users", "*"),), UserInfo("tester", groups=("system:authenticated",))),
    (headers(("Impersonate-User", "system:serviceaccount:foo:default")), (("serviceaccounts", "*"),),
     UserInfo("system:serviceaccount:foo:default", groups=("system:serviceaccounts", "system:serviceaccounts:foo", "system:authenticated"))),
    (headers(("Impersonate-User", "system:serviceaccount:foo:default"), ("Impersonate-Group", "g")), (("serviceaccounts", "*"), ("groups", "*")),
     UserInfo("system:serviceaccount:foo:default", groups=("g", "system:authenticated"))),
    (headers(("Impersonate-User", "system:admin"), ("Impersonate-Group", "some-group"), ("Impersonate-Group", "system:authenticated")),
     (("users", "*"), ("groups", "*")), UserInfo("system:admin", groups=("some-group", "system:authenticated"))),
    (headers(("Impersonate-User", "unknown"), ("Impersonate-Group", "system:unauthenticated")), (("users", "*"), ("groups", "*")),
     UserInfo("unknown", groups=("system:unauthenticated",))),
    (headers(("Impersonate-User", "system:anonymous")), (("users", "*"),), UserInfo("system:anonymous", groups=("system:unauthenticated",))),
    (headers(("Impersonate-User", "tester"), ("Impersonate-Uid", "some-uid"), ("Impersonate-Extra-Scopes", "scope-a"),
             ("Impersonate-Extra-scopes", "scope-b")), (("users", "*"), ("uids", "*"), ("userextras", "*")),
     UserInfo("tester", "some-uid", ("system:authenticated",), {"scopes": ("scope-a", "scope-b")})),
    (headers(("Impersonate-User", "tester"), ("Impersonate-Extra-Example.com%2fescaped%e1%9b%84scopes", "a")), (("users", "*"), ("userextras", "*")),
     UserInfo("tester", groups=("system:authenticated",), extra={"example.com/escapedᛄscopes": ("a",)})),
    (headers(("Impersonate-User", "tester"), ("Impersonate-Extra-almost%zzpercent", "a")), (("users", "*"), ("userextras", "*")),
     UserInfo("tester", groups=("system:authenticated",), extra={"almost%zzpercent": ("a",)})),
], ids=["none", "user", "service-account", "service-account-with-groups", "groups-keep-authenticated-once", "unauthenticated-group",
        "anonymous", "uid-and-extras", "escaped-extra-key", "malformed-escape-kept"])
def test_impersonated_user(sent, allowed, user):
    assert impersonate(sent, "/api/v1/pods", DEV, Allow(*allowed)) == user


def test_each_item_is_checked_with_the_impersonate_verb():
    authorizer = Allow(("serviceaccounts", "*"), ("groups", "*"), ("userextras", "*"), ("uids", "*"))
    impersonate(headers(("Impersonate-User", "system:serviceaccount:ns:sa"), ("Impersonate-Group", "g"),
                        ("Impersonate-Extra-Scopes", "v"), ("Impersonate-Uid", "u")), "/api", DEV, authorizer)
    assert authorizer.asked == [
        ("impersonate", "", "serviceaccounts", "", "ns", "sa"),
        ("impersonate", "", "groups", "", "", "g"),
        ("impersonate", "authentication.k8s.io", "userextras", "scopes", "", "v"),
        ("impersonate", "authentication.k8s.io", "uids", "", "", "u"),
    ]


@pytest.mark.parametrize("sent,allowed,message", [
    (headers(("Impersonate-User", "jane")), (),
     'users "jane" is forbidden: User "dev" cannot impersonate resource "users" in API group "" at the cluster scope'),
    (headers(("Impersonate-User", "system:serviceaccount:ns:sa")), (),
     'serviceaccounts "sa" is forbidden: User "dev" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns"'),
    (headers(("Impersonate-User", "jane"), ("Impersonate-Group", "system:masters")), (("users", "*"),),
     'groups "system:masters" is forbidden: User "dev" cannot impersonate resource "groups" in API group "" at the cluster scope'),
    (headers(("Impersonate-User", "jane"), ("Impersonate-Extra-Scopes", "a")), (("users", "*"),),
     'userextras.authentication.k8s.io "a" is forbidden: User "dev" cannot impersonate resource "userextras/scopes" '
     'in API group "authentication.k8s.io" at the cluster scope'),
], ids=["user", "service-account", "group", "extra"])
def test_refusals_are_403(sent, allowed, message):
    with pytest.raises(StatusError) as info:
        impersonate(sent, "/api", DEV, Allow(*allowed))
    assert (info.value.code, info.value.message) == (403, message)


@pytest.mark.parametrize("sent,message", [
    (headers(("Impersonate-Group", "some-group")), "requested [{Group  some-group    }] without impersonating a user"),
    (headers(("Impersonate-Uid", "u")), "requested [{UID  u  authentication.k8s.io/v1  }] without impersonating a user"),
    (headers(("Impersonate-Extra-Scopes", "a")), "requested [{UserExtra  a  authentication.k8s.io/v1  scopes}] without impersonating a user"),
], ids=["group", "uid", "extra"])
def test_items_without_a_user_are_400(sent, message):
    with pytest.raises(StatusError) as info:
        impersonate(sent, "/api", DEV, Allow())
    assert (info.value.code, info.value.message) == (400, message)
