"""``/ui/`` on a real apiserver: behind the API's authentication (no credential: a 401 Status,
or the sign-in page with that 401 for a browser), the page's paths allowed to any authenticated
user by the bootstrap RBAC policy, and the map's data read with the user's own permissions (a
user who may not list Pods gets the API's 403, not the data)."""

from __future__ import annotations

import re
import uuid

import pytest

from kubesvc.client.rest import PODS, SERVICES, Resource
from tests.support.cluster import api_client, temporary_namespace

SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", True)


def test_no_credential_is_a_401_status(apiserver):
    anonymous = apiserver.session(admin=False)
    for path in ("/ui", "/ui/", "/ui/api/map", "/ui/api/explain?namespace=default&name=kubernetes", "/ui/nothing"):
        response = anonymous.get(apiserver.url + path, headers={"Accept": "application/json"})
        assert response.status_code == 401, path
        assert response.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


def test_a_browser_without_credential_gets_the_sign_in_page_with_the_401(apiserver):
    response = apiserver.session(admin=False).get(apiserver.url + "/ui/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert response.status_code == 401
    assert response.headers["Content-Type"].startswith("text/html")
    assert 'id="login-form"' in response.text and "sessionStorage" in response.text
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'sha256-" in policy and "connect-src 'self'" in policy and "'unsafe-inline'" not in policy
    assert response.headers["Cache-Control"] == "no-store"


def test_a_bad_token_is_a_401(apiserver):
    response = apiserver.session(admin=False).get(apiserver.url + "/ui/api/map", headers={"Authorization": "Bearer not-a-token"})
    assert response.status_code == 401 and response.json()["reason"] == "Unauthorized"


def test_the_admin_certificate_opens_the_page(apiserver):
    response = apiserver.session().get(apiserver.url + "/ui/")
    assert response.status_code == 200
    assert "<svg" in response.text and "<script>" in response.text
    # everything the page needs is in it: no script, style or font from anywhere else
    outside = {u for u in re.findall(r"https?://[^\s\"')]+", response.text) if u != "http://www.w3.org/2000/svg"}
    assert outside == set() and "<script src" not in response.text and "<link" not in response.text


def ready_pod(name: str, namespace: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "ui-node"}}


async def test_the_map_and_the_explanation_as_the_admin(apiserver):
    async with api_client(apiserver) as client, temporary_namespace(client, "ui") as ns:
        await client.resource(SERVICES).create({"metadata": {"name": "web"}, "spec": {
            "selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}, ns)
        pod = await client.resource(PODS).create(ready_pod("web-1", ns, {"app": "web"}), ns)
        pod["status"] = {"phase": "Running", "podIP": "10.244.9.2", "podIPs": [{"ip": "10.244.9.2"}],
                         "conditions": [{"type": "Ready", "status": "False"}]}
        await client.resource(PODS).update_status(pod, ns)
        await client.resource(SLICES).create({
            "metadata": {"name": "web-x", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
            "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.9.2"], "conditions": {"ready": False, "serving": False, "terminating": False},
                           "nodeName": "ui-node", "targetRef": {"kind": "Pod", "namespace": ns, "name": "web-1"}}]}, ns)
        session = apiserver.session()
        body = session.get(apiserver.url + "/ui/api/map").json()
        boxes = {b["id"]: b for b in body["boxes"]}
        assert boxes[f"service/{ns}/web"]["state"] == "not-ready"
        assert boxes[f"endpoint/{ns}/web-x/0"]["state"] == "not-ready"
        assert boxes[f"pod/{ns}/web-1"]["state"] == "not-ready"
        assert {"from": f"endpoint/{ns}/web-x/0", "to": f"pod/{ns}/web-1"} in body["edges"]
        assert {"from": f"pod/{ns}/web-1", "to": "node/ui-node"} in body["edges"]

        explained = session.get(apiserver.url + "/ui/api/explain", params={"namespace": ns, "name": "web"}).json()
        assert explained["findings"][0] == {"cause": "pod-not-ready", "severity": "error", "message": "Pod web-1 is not Ready (phase Running)",
                                            "fix": "kubectl describe pod web-1"}
        assert explained["lines"][0] == "ERROR   Pod web-1 is not Ready (phase Running). Fix: kubectl describe pod web-1"

        missing = session.get(apiserver.url + "/ui/api/explain", params={"namespace": ns, "name": "nope"})
        assert (missing.status_code, missing.json()["message"]) == (404, f'services "nope" not found in namespace {ns}')
        assert session.get(apiserver.url + "/ui/api/explain").status_code == 400


async def test_a_user_without_rbac_sees_the_page_but_not_the_data(apiserver):
    name = f"ui-viewer-{uuid.uuid4().hex[:6]}"
    apiserver.kubectl("create", "serviceaccount", name, "-n", "default")
    try:
        token = apiserver.kubectl("create", "token", name, "-n", "default").stdout.strip()
        session = apiserver.session(admin=False)
        session.headers["Authorization"] = f"Bearer {token}"
        assert session.get(apiserver.url + "/ui/").status_code == 200  # kubesvc:service-map: /ui, /ui/* for system:authenticated
        refused = session.get(apiserver.url + "/ui/api/map")
        assert refused.status_code == 403
        assert refused.json()["message"] == (f'services is forbidden: User "system:serviceaccount:default:{name}" cannot list resource '
                                             '"services" in API group "" at the cluster scope')
        explained = session.get(apiserver.url + "/ui/api/explain", params={"namespace": "default", "name": "kubernetes"})
        assert explained.status_code == 403
        assert 'cannot get resource "services" in API group "" in the namespace "default"' in explained.json()["message"]
    finally:
        apiserver.kubectl("delete", "serviceaccount", name, "-n", "default", check=False)
