"""Secrets, ConfigMaps, ServiceAccounts, the RBAC kinds and the create-only review kinds, as a
user sees them: the real kubectl (which sends protobuf for ``kubectl create ...``, ``auth
can-i``, ``auth whoami`` and ``create token``) and the official Python client."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import threading
import uuid

import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kubesvc.apiserver.handlers import CreateRequest
from kubesvc.apiserver.server import APIServer, ServerConfig
from kubesvc.apiserver import appkeys


def api_client(server) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(server.kubeconfig))


@pytest.fixture
def ns(apiserver):
    name = f"id-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name


def lines(result: subprocess.CompletedProcess) -> list[list[str]]:
    return [line.split() for line in result.stdout.strip().splitlines()]


# ---- kubectl create / get / describe / delete ----------------------------------------------------


def test_kubectl_create_get_describe_delete_secrets_configmaps_serviceaccounts(apiserver, ns):
    k = apiserver.kubectl
    assert k("-n", ns, "create", "secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=pass=s3cr3t").stdout == "secret/creds created\n"
    k("-n", ns, "create", "secret", "docker-registry", "pull", "--docker-server=r.example", "--docker-username=u", "--docker-password=p")
    k("-n", ns, "create", "configmap", "settings", "--from-literal=mode=fast")
    k("-n", ns, "create", "serviceaccount", "robot")
    table = lines(k("-n", ns, "get", "secrets"))
    assert table[0] == ["NAME", "TYPE", "DATA", "AGE"]
    assert [row[:3] for row in table[1:]] == [["creds", "Opaque", "2"], ["pull", "kubernetes.io/dockerconfigjson", "1"]]
    assert [row[:2] for row in lines(k("-n", ns, "get", "cm"))] == [["NAME", "DATA"], ["settings", "1"]]
    assert [row[:2] for row in lines(k("-n", ns, "get", "sa"))] == [["NAME", "SECRETS"], ["robot", "0"]]
    stored = json.loads(k("-n", ns, "get", "secret", "creds", "-o", "json").stdout)
    assert {key: base64.b64decode(value).decode() for key, value in stored["data"].items()} == {"user": "admin", "pass": "s3cr3t"}
    described = k("-n", ns, "describe", "secret", "creds").stdout
    assert "Type:  Opaque" in described and "pass:  6 bytes" in described and "s3cr3t" not in described
    assert "mode" in k("-n", ns, "describe", "configmap", "settings").stdout
    assert "Name:                robot" in k("-n", ns, "describe", "sa", "robot").stdout
    assert [row[0] for row in lines(k("-n", ns, "get", "secrets", "--field-selector", "type=Opaque"))[1:]] == ["creds"]
    k("-n", ns, "delete", "secret", "creds", "pull")
    k("-n", ns, "delete", "configmap", "settings")
    k("-n", ns, "delete", "sa", "robot")
    assert "No resources found" in k("-n", ns, "get", "secrets,cm,sa").stderr


def test_kubectl_create_get_describe_delete_rbac(apiserver, ns):
    k = apiserver.kubectl
    k("-n", ns, "create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods")
    k("create", "clusterrole", f"{ns}-health", "--verb=get", "--non-resource-url=/healthz")
    k("-n", ns, "create", "rolebinding", "readers", "--role=pod-reader", "--user=jane", "--group=devs", f"--serviceaccount={ns}:robot")
    k("create", "clusterrolebinding", f"{ns}-health", f"--clusterrole={ns}-health", "--group=system:authenticated")
    assert lines(k("-n", ns, "get", "roles"))[0] == ["NAME", "CREATED", "AT"]
    header, row = lines(k("-n", ns, "get", "rolebinding", "readers", "-o", "wide"))
    assert header == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert row[:2] + row[3:] == ["readers", "Role/pod-reader", "jane", "devs", f"{ns}/robot"]
    assert lines(k("get", "clusterrolebinding", f"{ns}-health"))[1][:2] == [f"{ns}-health", f"ClusterRole/{ns}-health"]
    binding = json.loads(k("-n", ns, "get", "rolebinding", "readers", "-o", "json").stdout)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"}
    assert binding["subjects"][0] == {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"}
    assert binding["subjects"][2] == {"kind": "ServiceAccount", "name": "robot", "namespace": ns}
    role = k("-n", ns, "describe", "role", "pod-reader").stdout
    assert "pods       []                 []              [get list watch]" in role
    assert "/healthz" in k("describe", "clusterrole", f"{ns}-health").stdout
    subjects = k("-n", ns, "describe", "rolebinding", "readers").stdout
    assert "Kind:  Role" in subjects and "ServiceAccount  robot" in subjects
    k("-n", ns, "delete", "rolebinding", "readers")
    k("-n", ns, "delete", "role", "pod-reader")
    k("delete", "clusterrolebinding,clusterrole", f"{ns}-health")
    assert k("get", "clusterrole", f"{ns}-health", check=False).stderr.startswith("Error from server (NotFound)")


# ---- upstream's validation messages ---------------------------------------------------------------


def create(apiserver, manifest: dict, ns: str) -> subprocess.CompletedProcess:
    return apiserver.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(manifest), check=False)


@pytest.mark.parametrize("manifest, message", [
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "x"}},
                 'The Secret "t" is invalid: data[tls.key]: Required value', id="tls-needs-key"),
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sat"}, "type": "kubernetes.io/service-account-token"},
                 'The Secret "sat" is invalid: metadata.annotations[kubernetes.io/service-account.name]: Required value', id="sa-token-needs-name"),
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dj"}, "type": "kubernetes.io/dockerconfigjson",
                  "stringData": {".dockerconfigjson": "[]"}},
                 'The Secret "dj" is invalid: data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": '
                 "json: cannot unmarshal array into Go value of type map[string]interface {}", id="dockerconfigjson-not-an-object"),
    pytest.param({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b64"}, "data": {"k": "a$b="}},
                 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 1', id="bad-base64"),
    pytest.param({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a b": "x"}},
                 """The ConfigMap "c" is invalid: data[a b]: Invalid value: "a b": a valid config key must consist of alphanumeric characters""",
                 id="configmap-key"),
    pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"},
                  "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]},
                 'The Role "r" is invalid: rules[0].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs',
                 id="role-non-resource-url"),
    pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]},
                 "rules[0].apiGroups: Required value: resource rules must supply at least one api group", id="rule-needs-api-groups"),
    pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
                  "roleRef": {"kind": "Pod", "name": "x"}, "subjects": [{"kind": "Robot", "name": "r"}]},
                 'roleRef.kind: Unsupported value: "Pod": supported values: "Role", "ClusterRole"', id="binding-role-kind"),
    pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "b"},
                  "roleRef": {"kind": "Role", "name": "x"}, "subjects": [{"kind": "Robot", "name": "r"}]},
                 'subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"', id="subject-kind"),
])
def test_bad_objects_get_upstreams_messages(apiserver, ns, manifest, message):
    result = create(apiserver, manifest, ns)
    assert result.returncode == 1
    assert message in result.stderr


def test_cluster_role_binding_service_account_needs_a_namespace(apiserver):
    result = create(apiserver, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "no-ns"},
                                "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "ServiceAccount", "name": "robot"}]}, "default")
    assert 'The ClusterRoleBinding "no-ns" is invalid: subjects[0].namespace: Required value' in result.stderr


def test_role_ref_cannot_change(apiserver, ns):
    apiserver.kubectl("-n", ns, "create", "rolebinding", "b", "--clusterrole=view", "--user=jane")
    result = apiserver.kubectl("-n", ns, "patch", "rolebinding", "b", "--type=merge", "-p", '{"roleRef":{"name":"edit"}}', check=False)
    assert result.stderr.strip() == (
        'The RoleBinding "b" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", '
        'Kind:"ClusterRole", Name:"edit"}: cannot change roleRef')
    apiserver.kubectl("-n", ns, "patch", "rolebinding", "b", "--type=merge", "-p", '{"subjects":[{"kind":"Group","name":"devs"}]}')


def test_secret_string_data_is_merged_and_never_stored(apiserver, ns):
    core = client.CoreV1Api(api_client(apiserver))
    created = core.create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="s"), data={"keep": base64.b64encode(b"1").decode(), "over": base64.b64encode(b"old").decode()},
        string_data={"over": "new", "added": "yes"}))
    assert created.type == "Opaque" and created.string_data is None
    assert {k: base64.b64decode(v) for k, v in created.data.items()} == {"keep": b"1", "over": b"new", "added": b"yes"}
    patched = core.patch_namespaced_secret("s", ns, {"stringData": {"keep": "2"}})
    assert base64.b64decode(patched.data["keep"]) == b"2" and patched.string_data is None
    raw = apiserver.kubectl("-n", ns, "get", "secret", "s", "-o", "json").stdout
    assert "stringData" not in raw


def test_immutable_data_and_type(apiserver, ns):
    k = apiserver.kubectl
    create(apiserver, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}, ns)
    changed = k("-n", ns, "patch", "configmap", "frozen", "-p", '{"data":{"a":"2"}}', check=False)
    assert 'The ConfigMap "frozen" is invalid: data: Forbidden: field is immutable when `immutable` is set' in changed.stderr
    thawed = k("-n", ns, "patch", "configmap", "frozen", "-p", '{"immutable":false}', check=False)
    assert "immutable: Forbidden: field is immutable when `immutable` is set" in thawed.stderr
    k("-n", ns, "label", "configmap", "frozen", "metadata=ok")  # metadata may still change
    k("-n", ns, "create", "secret", "generic", "typed", "--from-literal=a=b")
    retyped = k("-n", ns, "patch", "secret", "typed", "-p", '{"type":"kubernetes.io/basic-auth"}', check=False)
    assert 'type: Invalid value: "kubernetes.io/basic-auth": field is immutable' in retyped.stderr


def test_data_over_one_mebibyte_is_refused(apiserver, ns):
    core = client.CoreV1Api(api_client(apiserver))
    big = base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="big"), data={"blob": big}))
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == 'Secret "big" is invalid: data: Too long: may not be more than 1048576 bytes'
    core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="fits"), data={"blob": base64.b64encode(b"x" * 1024 * 1024).decode()}))


def test_python_client_rbac_crud_and_watch(apiserver, ns):
    rbac = client.RbacAuthorizationV1Api(api_client(apiserver))
    events = watch.Watch().stream(rbac.list_namespaced_role, ns, timeout_seconds=5)
    rbac.create_namespaced_role(ns, client.V1Role(metadata=client.V1ObjectMeta(name="r"), rules=[
        client.V1PolicyRule(verbs=["get"], api_groups=[""], resources=["configmaps"], resource_names=["settings"])]))
    first = next(events)
    assert (first["type"], first["object"].metadata.name, first["object"].rules[0].resource_names) == ("ADDED", "r", ["settings"])
    binding = rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="b"), role_ref=client.V1RoleRef(api_group="", kind="Role", name="r"),
        subjects=[client.RbacV1Subject(kind="Group", name="devs")]))
    assert binding.role_ref.api_group == "rbac.authorization.k8s.io" and binding.subjects[0].api_group == "rbac.authorization.k8s.io"
    aggregated = rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name=f"{ns}-agg"), aggregation_rule=client.V1AggregationRule(
        cluster_role_selectors=[client.V1LabelSelector(match_labels={"rbac.example/aggregate-to": ns})])))
    assert aggregated.aggregation_rule.cluster_role_selectors[0].match_labels == {"rbac.example/aggregate-to": ns}
    rbac.delete_namespaced_role("r", ns)
    assert [e["type"] for e in events][-1:] == ["DELETED"]
    rbac.delete_cluster_role(f"{ns}-agg")


# ---- create-only kinds -------------------------------------------------------------------------


def test_create_only_kinds_are_discovered_with_create_only(apiserver):
    resources = {r["name"]: r for r in json.loads(apiserver.kubectl("get", "--raw", "/apis/authorization.k8s.io/v1").stdout)["resources"]}
    assert resources["selfsubjectaccessreviews"] == {"name": "selfsubjectaccessreviews", "singularName": "selfsubjectaccessreview",
                                                     "namespaced": False, "kind": "SelfSubjectAccessReview", "verbs": ["create"]}
    assert resources["localsubjectaccessreviews"]["namespaced"] is True
    core = {r["name"]: r for r in json.loads(apiserver.kubectl("get", "--raw", "/api/v1").stdout)["resources"]}
    assert core["serviceaccounts/token"] == {"name": "serviceaccounts/token", "singularName": "", "namespaced": True,
                                             "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}
    wide = lines(apiserver.kubectl("api-resources", "--api-group=authentication.k8s.io", "-o", "wide"))
    assert [(row[0], row[-1]) for row in wide[1:]] == [("selfsubjectreviews", "create"), ("tokenreviews", "create")]


def test_create_only_kinds_have_no_get_list_watch_or_items(apiserver):
    listed = apiserver.kubectl("get", "selfsubjectaccessreviews", check=False)
    assert listed.stderr.startswith("Error from server (MethodNotAllowed): the server does not allow this method on the requested resource")
    item = apiserver.kubectl("get", "--raw", "/apis/authentication.k8s.io/v1/tokenreviews/x", check=False)
    assert "NotFound" in item.stderr
    explained = apiserver.kubectl("explain", "selfsubjectaccessreview.spec.resourceAttributes.verb").stdout
    assert "FIELD: verb <string>" in explained


# An apiserver in this process, so tests can register create handlers the way helpers do.

class InProcessServer:
    def __init__(self, data_dir):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = APIServer(ServerConfig(data_dir=data_dir, secure_port=0))
        self.run(self.server.start())
        self.handlers: dict = self.server.runner.app[appkeys.CREATE_HANDLERS]
        self.cache_dir = data_dir / "kubectl-cache"

    def run(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(["kubectl", f"--kubeconfig={self.server.kubeconfig}", f"--cache-dir={self.cache_dir}", *args],
                                input=input, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def stop(self):
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    server = InProcessServer(tmp_path_factory.mktemp("routed"))
    yield server
    server.stop()


@pytest.fixture
def handled(in_process):
    """Tiny test handlers, replacing whatever is registered for the duration of a test."""
    seen: list[CreateRequest] = []

    async def access_review(request, review: CreateRequest) -> dict:
        seen.append(review)
        attributes = review.body["spec"].get("resourceAttributes") or {}
        allowed = attributes.get("verb") == "get"
        return {"metadata": {}, "spec": review.body["spec"], "status": {"allowed": allowed, "reason": "" if allowed else "test says no"}}

    async def rules_review(request, review: CreateRequest) -> dict:
        seen.append(review)
        return {"metadata": {}, "spec": {}, "status": {"incomplete": False, "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
                                                      "resourceRules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]}}

    async def whoami(request, review: CreateRequest) -> dict:
        seen.append(review)
        return {"metadata": {}, "status": {"userInfo": {"username": "test-user", "groups": ["a", "b"], "extra": {"scope": ["x"]}}}}

    async def token(request, review: CreateRequest) -> dict:
        seen.append(review)
        return {"metadata": {"name": review.name, "namespace": review.namespace}, "spec": review.body["spec"],
                "status": {"token": f"token-for-{review.namespace}-{review.name}", "expirationTimestamp": "2030-01-01T00:00:00Z"}}

    routes = {("authorization.k8s.io", "selfsubjectaccessreviews"): access_review,
              ("authorization.k8s.io", "localsubjectaccessreviews"): access_review,
              ("authorization.k8s.io", "selfsubjectrulesreviews"): rules_review,
              ("authentication.k8s.io", "selfsubjectreviews"): whoami,
              ("", "serviceaccounts/token"): token}
    saved = dict(in_process.handlers)
    in_process.handlers.update(routes)
    yield seen
    in_process.handlers.clear()
    in_process.handlers.update(saved)


def test_kubectl_auth_can_i_reaches_the_registered_handler(in_process, handled):
    assert in_process.kubectl("auth", "can-i", "get", "pods", "-n", "team").stdout == "yes\n"
    refused = in_process.kubectl("auth", "can-i", "delete", "services.discovery.k8s.io", check=False)
    assert (refused.returncode, refused.stdout) == (1, "no - test says no\n")
    asked = handled[0].body
    assert (asked["apiVersion"], asked["kind"]) == ("authorization.k8s.io/v1", "SelfSubjectAccessReview")
    assert asked["spec"]["resourceAttributes"] == {"namespace": "team", "verb": "get", "resource": "pods"}


def test_kubectl_auth_can_i_list_and_whoami(in_process, handled):
    listed = lines(in_process.kubectl("auth", "can-i", "--list", "-n", "team"))
    assert listed[0] == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["pods", "[]", "[]", "[list]"] in listed and ["[/healthz]", "[]", "[get]"] in listed
    assert handled[0].body["spec"] == {"namespace": "team"}
    whoami = lines(in_process.kubectl("auth", "whoami"))
    assert whoami == [["ATTRIBUTE", "VALUE"], ["Username", "test-user"], ["Groups", "[a", "b]"], ["Extra:", "scope", "[x]"]]


def test_kubectl_create_token_reaches_the_service_account_token_handler(in_process, handled):
    in_process.kubectl("create", "serviceaccount", "robot")
    assert in_process.kubectl("create", "token", "robot", "--audience=api", "--duration=10m").stdout == "token-for-default-robot"
    request = handled[0]
    assert (request.info.kind, request.namespace, request.name) == ("TokenRequest", "default", "robot")
    assert request.body["spec"] == {"audiences": ["api"], "expirationSeconds": 600}


def test_python_client_posts_json_and_gets_201(in_process, handled):
    api = client.AuthorizationV1Api(config.new_client_from_config(config_file=str(in_process.server.kubeconfig)))
    review = api.create_namespaced_local_subject_access_review("team", client.V1LocalSubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user="jane", resource_attributes=client.V1ResourceAttributes(namespace="team", verb="get", resource="pods"))))
    assert review.status.allowed is True and review.kind == "LocalSubjectAccessReview"
    assert handled[0].namespace == "team" and handled[0].body["spec"]["user"] == "jane"
    with pytest.raises(ApiException) as mismatch:
        api.create_namespaced_local_subject_access_review("team", client.V1LocalSubjectAccessReview(
            metadata=client.V1ObjectMeta(namespace="other"), spec=client.V1SubjectAccessReviewSpec(user="jane")))
    assert mismatch.value.status == 400
    assert json.loads(mismatch.value.body)["message"] == "the namespace of the provided object does not match the namespace sent on the request"


def test_bodies_are_decoded_strictly_before_the_handler(in_process, handled):
    body = json.dumps({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {"verb": 7}}})
    # kubectl create -f would first look for a PATCH operation of the kind in /openapi/v3, find
    # none (there is none upstream either) and fall back to /openapi/v2, which is not served:
    # --raw posts the body as it is
    result = in_process.kubectl("create", "--raw", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "-f", "-",
                                input=body, check=False)
    assert ('SelfSubjectAccessReview in version "v1" cannot be handled as a SelfSubjectAccessReview: json: cannot unmarshal number '
            "into Go struct field ResourceAttributes.spec.resourceAttributes.verb of type string") in result.stderr
    assert handled == []


def test_unregistered_create_only_kinds_are_404(in_process, handled):
    in_process.handlers.pop(("authentication.k8s.io", "selfsubjectreviews"))
    in_process.handlers.pop(("authentication.k8s.io", "tokenreviews"), None)
    whoami = in_process.kubectl("auth", "whoami", check=False)
    assert whoami.stderr.startswith("error: the selfsubjectreviews API is not enabled in the cluster")
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "x"}}
    created = in_process.kubectl("create", "--raw", "/apis/authentication.k8s.io/v1/tokenreviews", "-f", "-",
                                 input=json.dumps(review), check=False)
    assert "Error from server (NotFound)" in created.stderr
    assert handled == []
