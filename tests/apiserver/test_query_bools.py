"""Bool query parameters as kube-apiserver's parameter codec reads them
(``Convert_Slice_string_To_bool``): absent, ``0`` or ``false`` (any case) is false; anything
else, ``yes`` and the empty value included, is true. So ``?watch=yes`` watches (it listed)."""

from __future__ import annotations

import json
import urllib.request

import pytest


def get(apiserver, path: str) -> bytes:
    request = urllib.request.Request(apiserver.url + path)
    with urllib.request.urlopen(request, context=apiserver.tls_context(), timeout=30) as response:
        return response.read()


def is_watch(body: bytes) -> bool:
    first = json.loads(body.splitlines()[0])
    return "type" in first and "object" in first


@pytest.mark.parametrize(("value", "watches"), [
    ("true", True), ("1", True), ("yes", True), ("", True), ("TRUE", True),
    ("false", False), ("FaLsE", False), ("0", False),
], ids=lambda v: repr(v) if isinstance(v, str) else str(v))
def test_watch_parameter(apiserver, value, watches):
    body = get(apiserver, f"/api/v1/namespaces?watch={value}&timeoutSeconds=1")
    assert is_watch(body) is watches
    if not watches:
        assert json.loads(body)["kind"] == "NamespaceList"


def test_orphan_dependents_yes_is_true(apiserver):
    """DeleteOptions from the query come through the same codec: ``orphanDependents=yes`` is
    true (it was a 400)."""
    ns = "default"
    name = "query-bools-orphan"
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).encode()
    create = urllib.request.Request(apiserver.url + f"/api/v1/namespaces/{ns}/configmaps", data=body, method="POST",
                                    headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(create, context=apiserver.tls_context(), timeout=30) as response:
        assert response.status == 201
    delete = urllib.request.Request(apiserver.url + f"/api/v1/namespaces/{ns}/configmaps/{name}?orphanDependents=yes", method="DELETE")
    with urllib.request.urlopen(delete, context=apiserver.tls_context(), timeout=30) as response:
        assert response.status == 200


def test_authorization_sees_watch_yes_as_a_watch():
    """RequestInfo reads ``watch`` through the same codec: ``?watch=yes`` is authorized (and
    counted) as a watch, not a list."""
    from kubesvc.apiserver.auth.attributes import request_info

    def verb(query):
        return request_info("GET", "/api/v1/namespaces/default/pods", query).verb

    assert [verb({"watch": v}) for v in ("yes", "", "true", "1")] == ["watch"] * 4
    assert [verb({"watch": v}) for v in ("0", "false", "FALSE")] + [verb({})] == ["list"] * 4
