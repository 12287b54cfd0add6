"""certificates.k8s.io/v1 CertificateSigningRequests on a real apiserver, driven by the real
kubectl: ``kubectl get csr`` columns, ``kubectl certificate approve|deny``, the requester
recorded by the server, upstream's validation, and the approval/signing/subject admission
checks with identities from the cluster CA."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from kubesvc.nodejoin.csr import new_key, node_csr_object, request_pem
from kubesvc.serving import pki

KUBELET_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"


def user_kubeconfig(server, name: str, *groups: str):
    label = name.replace(":", "-")
    pair = server.ca.client(f"test-user-{label}", pki.Identity(name, tuple(groups)))
    return pki.write_kubeconfig(server.data_dir / "users" / f"{label}.kubeconfig", server.url, server.ca, name, pair)


def csr(name: str, *, signer: str = KUBELET_SIGNER, cn: str = "system:node:n1", orgs=("system:nodes",), **spec) -> dict:
    obj = node_csr_object(new_key(), "n1")
    obj["metadata"]["name"] = name
    obj["spec"]["request"] = base64.b64encode(request_pem(new_key(), cn, tuple(orgs))).decode()
    obj["spec"]["signerName"] = signer
    obj["spec"].update(spec)
    return obj


def unique() -> str:
    return f"csr-{uuid.uuid4().hex[:8]}"


def get(apiserver, name: str) -> dict:
    return json.loads(apiserver.kubectl("get", "csr", name, "-o", "json").stdout)


def test_get_csr_shows_upstreams_columns_and_the_requester(apiserver):
    name = unique()
    body = csr(name, expirationSeconds=3600, username="someone-else", groups=["system:masters"])
    apiserver.kubectl("create", "-f", "-", input=json.dumps(body))
    lines = apiserver.kubectl("get", "csr", name).stdout.splitlines()
    assert lines[0].split() == ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"]
    assert lines[1].split()[0] == name and lines[1].split()[2:] == [KUBELET_SIGNER, "system:admin", "60m", "Pending"]
    spec = get(apiserver, name)["spec"]
    assert spec["username"] == "system:admin"  # the server's word, not the body's
    assert spec["groups"] == ["system:masters", "system:authenticated"]


def test_kubectl_certificate_approve_and_deny(apiserver):
    approved, denied = unique(), unique()
    for name in (approved, denied):
        apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name)))
    assert apiserver.kubectl("certificate", "approve", approved).stdout.strip() == f"certificatesigningrequest.certificates.k8s.io/{approved} approved"
    apiserver.kubectl("certificate", "deny", denied)
    condition = get(apiserver, approved)["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Approved", "True", "KubectlApprove")
    assert condition["lastUpdateTime"] and condition["lastTransitionTime"]
    assert get(apiserver, denied)["status"]["conditions"][0]["type"] == "Denied"
    rows = {line.split()[0]: line.split()[-1] for line in apiserver.kubectl("get", "csr").stdout.splitlines()[1:]}
    assert (rows[approved], rows[denied]) == ("Approved", "Denied")
    again = apiserver.kubectl("certificate", "deny", approved, check=False)
    assert again.returncode != 0 and "already Approved" in again.stderr


def test_a_main_resource_update_changes_neither_spec_nor_status(apiserver):
    name = unique()
    apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name)))
    apiserver.kubectl("label", "csr", name, "a=b")
    patch = json.dumps({"spec": {"usages": ["server auth"]}, "status": {"conditions": [{"type": "Approved", "status": "True"}]}})
    apiserver.kubectl("patch", "csr", name, "--type=merge", "-p", patch)
    obj = get(apiserver, name)
    assert obj["spec"]["usages"] == ["digital signature", "client auth"] and not obj["status"].get("conditions")
    assert obj["metadata"]["labels"] == {"a": "b"}


@pytest.mark.parametrize("spec, message", [
    ({"request": base64.b64encode(b"hello").decode()}, "spec.request: Invalid value"),
    ({"usages": []}, "spec.usages: Required value"),
    ({"usages": ["client auth", "bogus"]}, 'spec.usages[1]: Unsupported value: "bogus"'),
    ({"usages": ["client auth", "client auth"]}, 'spec.usages[1]: Duplicate value: "client auth"'),
    ({"signerName": "example/x"}, "should be a domain with at least two segments separated by dots"),
    ({"signerName": "kubernetes.io/legacy-unknown"}, "the legacy signerName is not allowed via this API version"),
    ({"signerName": "nodomain"}, "must be a fully qualified domain and path of the form 'example.com/signer-name'"),
    ({"expirationSeconds": 599}, "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)"),
], ids=["not-a-csr", "no-usages", "unknown-usage", "duplicate-usage", "one-label-domain", "legacy-signer", "no-path", "short-duration"])
def test_invalid_requests_are_refused_with_upstreams_words(apiserver, spec, message):
    name = unique()
    body = csr(name)
    body["spec"].update(spec)
    result = apiserver.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0 and f'The CertificateSigningRequest "{name}" is invalid' in result.stderr
    assert message in result.stderr


def test_approving_needs_approve_on_the_signer(apiserver):
    """update on certificatesigningrequests/approval alone is not enough (CertificateApproval)."""
    name = unique()
    apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name)))
    user = f"approver-{uuid.uuid4().hex[:6]}"
    role = json.dumps({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": user},
                       "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list"]},
                                 {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]}]})
    apiserver.kubectl("apply", "-f", "-", input=role)
    apiserver.kubectl("create", "clusterrolebinding", user, f"--clusterrole={user}", f"--user={user}")
    kubeconfig = user_kubeconfig(apiserver, user)
    refused = apiserver.kubectl("certificate", "approve", name, kubeconfig=kubeconfig, check=False)
    assert refused.returncode != 0
    assert f'"{name}" is forbidden: user not permitted to approve requests with signerName "{KUBELET_SIGNER}"' in refused.stderr
    # the upstream approver role for that signer grants it
    apiserver.kubectl("create", "clusterrolebinding", f"{user}-signer",
                      "--clusterrole=system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", f"--user={user}")
    apiserver.kubectl("certificate", "approve", name, kubeconfig=kubeconfig)
    assert get(apiserver, name)["status"]["conditions"][0]["type"] == "Approved"


def test_issuing_needs_sign_on_the_signer_and_approval_conditions_stay(apiserver):
    name = unique()
    apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name)))
    apiserver.kubectl("certificate", "approve", name)
    cert = base64.b64encode(apiserver.ca.pem).decode()
    obj = get(apiserver, name)
    obj["status"]["certificate"] = cert
    obj["status"]["conditions"] = []  # a status write cannot drop the approval: it stays
    user = f"nosign-{uuid.uuid4().hex[:6]}"
    apiserver.kubectl("create", "clusterrole", user, "--verb=update", "--resource=certificatesigningrequests.certificates.k8s.io/status")
    apiserver.kubectl("create", "clusterrolebinding", user, f"--clusterrole={user}", f"--user={user}")
    kubeconfig = user_kubeconfig(apiserver, user)
    refused = apiserver.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj), kubeconfig=kubeconfig, check=False)
    assert f'user not permitted to sign requests with signerName "{KUBELET_SIGNER}"' in refused.stderr
    apiserver.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj))
    issued = get(apiserver, name)
    assert issued["status"]["certificate"] == cert and issued["status"]["conditions"][0]["type"] == "Approved"
    assert apiserver.kubectl("get", "csr", name, "--no-headers").stdout.split()[-1] == "Approved,Issued"
    obj = get(apiserver, name)
    obj["status"]["certificate"] = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").decode()
    changed = apiserver.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj), check=False)
    assert "updates may not modify existing certificate content" in changed.stderr


def test_system_masters_through_the_kube_apiserver_client_signer_is_refused(apiserver):
    name = unique()
    body = csr(name, signer="kubernetes.io/kube-apiserver-client", cn="root", orgs=("system:masters",))
    result = apiserver.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode != 0
    assert "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed" in result.stderr


def test_field_selector_on_signer_name(apiserver):
    name = unique()
    apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name, signer="example.com/mine")))
    names = apiserver.kubectl("get", "csr", "--field-selector=spec.signerName=example.com/mine", "-o", "name").stdout.split()
    assert f"certificatesigningrequest.certificates.k8s.io/{name}" in names
    assert all("/csr-" in n for n in names)
    other = apiserver.kubectl("get", "csr", f"--field-selector=spec.signerName={KUBELET_SIGNER}", "-o", "name").stdout.split()
    assert f"certificatesigningrequest.certificates.k8s.io/{name}" not in other


@pytest.mark.parametrize("sub, status, code", [
    ("approval", {"conditions": [{"type": "Approved", "status": "False"}]}, 422),
    ("approval", {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}, 422),
    ("approval", {"conditions": ["x"]}, 400),
    ("status", "zzz", 400),
    ("status", {"certificate": "AAAA"}, 422),
], ids=["approved-false", "approved-and-denied", "condition-not-an-object", "status-not-an-object", "certificate-not-pem"])
def test_bad_subresource_writes_are_4xx(apiserver, sub, status, code):
    name = unique()
    apiserver.kubectl("create", "-f", "-", input=json.dumps(csr(name)))
    body = dict(get(apiserver, name), status=status)
    response = apiserver.session().put(f"{apiserver.url}/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/{sub}", json=body)
    assert response.status_code == code, response.text
    assert not (get(apiserver, name).get("status") or {}).get("conditions")
