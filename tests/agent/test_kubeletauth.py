"""How the agent decides who may call it, as kubelet decides: the request attributes, the
SubjectAccessReview it sends, its decision cache and the fallback when no review can be made."""

from __future__ import annotations

import pytest

from kubesvc.agent.kubeletauth import (AuthorizationFailed, NodeRequest, SubjectAccessReviewAuthorizer, authorization_error_text, fallback_allows,
                                       forbidden_text, node_request, review_body)
from kubesvc.serving.user import UserInfo
from kubesvc.client.rest import ApiError, ConnectionFailed
from kubesvc.util.clock import FakeClock


@pytest.mark.parametrize("method, path, verb, subresource", [
    ("GET", "/containerLogs/ns/pod/c", "get", "proxy"),
    ("GET", "/healthz", "get", "proxy"),
    ("POST", "/exec/ns/pod/c", "create", "proxy"),
    ("GET", "/stats/summary", "get", "stats"),
    ("GET", "/metrics", "get", "metrics"),
    ("GET", "/metrics/cadvisor", "get", "metrics"),
    ("GET", "/logs/syslog", "get", "log"),
    ("POST", "/checkpoint/ns/pod/c", "create", "checkpoint"),
    ("PUT", "/pods", "update", "proxy"),
    ("PATCH", "/pods", "patch", "proxy"),
    ("DELETE", "/pods", "delete", "proxy"),
    ("OPTIONS", "/pods", "", "proxy"),
    ("GET", "/statsx", "get", "proxy"),
], ids=["container-logs", "healthz", "exec", "stats", "metrics", "metrics-sub", "logs", "checkpoint", "put", "patch", "delete",
        "other-method", "prefix-is-a-path-segment"])
def test_request_attributes_are_kubelets(method, path, verb, subresource):
    assert node_request(method, path, "n1") == NodeRequest(verb, subresource, "n1")


def test_texts_are_kubelets():
    user = UserInfo("system:kube-proxy")
    request = NodeRequest("get", "proxy", "n1")
    assert forbidden_text(user, request) == "Forbidden (user=system:kube-proxy, verb=get, resource=nodes, subresource(s)=[proxy])\n"
    assert authorization_error_text(user, request) == "Authorization error (user=system:kube-proxy, verb=get, resource=nodes, subresource=proxy)"


def test_review_body_carries_the_whole_user():
    user = UserInfo("jane", uid="u1", groups=("g1", "system:authenticated"), extra={"k": ("v",)})
    assert review_body(user, NodeRequest("get", "proxy", "n1")) == {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "jane", "uid": "u1", "groups": ["g1", "system:authenticated"], "extra": {"k": ["v"]},
                 "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes", "subresource": "proxy", "name": "n1"}}}


@pytest.mark.parametrize("user, allowed", [
    (UserInfo("kube-apiserver-kubelet-client"), True),
    (UserInfo("system:admin", groups=("system:masters",)), True),
    (UserInfo("system:kube-proxy"), False),
    (UserInfo("system:node:n2", groups=("system:nodes",)), False),
], ids=["apiserver", "masters", "proxy", "other-node"])
def test_fallback_allows_only_the_apiserver_and_masters(user, allowed):
    assert fallback_allows(user) is allowed


class FakeAPI:
    """Answers SubjectAccessReviews from ``allowed`` users, or raises ``error``; counts calls."""

    def __init__(self, allowed=(), error: Exception | None = None):
        self.allowed, self.error, self.reviews = set(allowed), error, []

    async def create(self, path, body, params=None):
        self.reviews.append((path, body))
        if self.error is not None:
            raise self.error
        return {**body, "status": {"allowed": body["spec"]["user"] in self.allowed}}


REQUEST = NodeRequest("get", "proxy", "n1")


async def test_decisions_are_cached_five_minutes_if_allowed_thirty_seconds_if_denied():
    api, clock = FakeAPI(allowed={"a"}), FakeClock()
    authorizer = SubjectAccessReviewAuthorizer(api, clock=clock)
    assert await authorizer.allowed(UserInfo("a"), REQUEST) is True
    assert await authorizer.allowed(UserInfo("b"), REQUEST) is False
    assert api.reviews[0][0] == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    clock.advance(29)
    await authorizer.allowed(UserInfo("a"), REQUEST)
    await authorizer.allowed(UserInfo("b"), REQUEST)
    assert len(api.reviews) == 2
    clock.advance(2)  # the denial expired, the allowance not
    await authorizer.allowed(UserInfo("a"), REQUEST)
    await authorizer.allowed(UserInfo("b"), REQUEST)
    assert [body["spec"]["user"] for _, body in api.reviews] == ["a", "b", "b"]
    clock.advance(300)
    await authorizer.allowed(UserInfo("a"), REQUEST)
    assert [body["spec"]["user"] for _, body in api.reviews] == ["a", "b", "b", "a"]


@pytest.mark.parametrize("status", [403, 404], ids=["node-may-not-review", "no-review-api"])
async def test_no_review_possible_falls_back_to_the_apiserver_only(status):
    authorizer = SubjectAccessReviewAuthorizer(FakeAPI(error=ApiError(status, "x", "no")), clock=FakeClock())
    assert await authorizer.allowed(UserInfo("kube-apiserver-kubelet-client"), REQUEST) is True
    assert await authorizer.allowed(UserInfo("system:kube-proxy"), REQUEST) is False


@pytest.mark.parametrize("error", [ApiError(500, "InternalError", "boom"), ConnectionFailed("refused")], ids=["500", "unreachable"])
async def test_a_failed_review_is_an_authorization_error(error):
    authorizer = SubjectAccessReviewAuthorizer(FakeAPI(error=error), clock=FakeClock())
    with pytest.raises(AuthorizationFailed):
        await authorizer.allowed(UserInfo("kube-apiserver-kubelet-client"), REQUEST)
