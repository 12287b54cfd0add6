"""Authentication as a user observes it, against a real apiserver: no bearer token but those
the flags configure (an older version's admin token deleted), a static token file user,
ServiceAccount tokens from ``kubectl create token`` used by the official Python client, the
ways such a token stops working (expired, wrong audience, ServiceAccount or bound Pod deleted),
bootstrap tokens, ``kubectl auth whoami``, impersonation with ``--as``, anonymous requests,
TokenReview, and the OIDC discovery documents verifying a token's signature."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesvc.apiserver.auth import jwt
from kubesvc.apiserver.auth.serviceaccount import TokenGenerator, bound_claims
from tests.support.apiserver import running_apiserver

ISSUER = "https://kubernetes.default.svc.cluster.local"
ALICE_TOKEN = "alice-" + uuid.uuid4().hex
BOOTSTRAP_ID, BOOTSTRAP_SECRET = "abc123", "0123456789abcdef"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("authn")
    token_file = data_dir / "tokens.csv"
    token_file.write_text(f'{ALICE_TOKEN},alice,alice-uid,"devs,qa"\n')
    with running_apiserver(data_dir, f"--token-auth-file={token_file}", "--enable-bootstrap-token-auth=true") as running:
        yield running


def api(server, token: str | None = None) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server.url
    configuration.ssl_ca_cert = str(server.ca_file)
    if token is not None:
        configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def admin_api(server) -> client.ApiClient:
    """The official client on the admin kubeconfig (its client certificate)."""
    return config.new_client_from_config(config_file=str(server.kubeconfig))


def whoami(server, token: str) -> dict:
    review = client.AuthenticationV1Api(api(server, token)).create_self_subject_review(client.V1SelfSubjectReview())
    info = review.status.user_info
    return {"username": info.username, "uid": info.uid, "groups": info.groups, "extra": info.extra}


def status_of(server, token: str | None, path: str = "/apis/authentication.k8s.io/v1") -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.get(server.url + path, headers=headers, verify=str(server.ca_file), timeout=10).status_code


def wait_for_status(server, token: str, code: int, timeout: float = 20) -> int:
    """The token cache keeps successes 10 s (as upstream): a revoked token may work that long."""
    deadline = time.monotonic() + timeout
    while True:
        got = status_of(server, token, "/apis/authentication.k8s.io/v1")
        if got == code or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@pytest.fixture
def ns(server):
    name = f"authn-{uuid.uuid4().hex[:6]}"
    server.kubectl("create", "namespace", name)
    return name


def service_account(server, ns: str, name: str = "builder") -> None:
    server.kubectl("-n", ns, "create", "serviceaccount", name)


def create_token(server, ns: str, *args: str, name: str = "builder") -> str:
    return server.kubectl("-n", ns, "create", "token", name, *args).stdout.strip()


def test_static_token_file_user(server):
    assert whoami(server, ALICE_TOKEN) == {"username": "alice", "uid": "alice-uid", "groups": ["devs", "qa", "system:authenticated"], "extra": None}


def test_unknown_token_is_401_never_anonymous(server):
    response = requests.get(server.url + "/version", headers={"Authorization": "Bearer nope"}, verify=str(server.ca_file), timeout=10)
    assert response.status_code == 401
    assert response.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized",
                               "reason": "Unauthorized", "code": 401}


def test_without_flags_the_only_bearer_tokens_are_service_account_tokens(tmp_path):
    """As kube-apiserver and k3s, the server makes no bearer token of its own: the admin is the
    kubeconfig's certificate, ServiceAccount tokens work, bootstrap tokens only with their flag,
    anything else is 401. An older version's ``<data-dir>/token`` (a system:masters token then)
    is deleted at start, and the token it held is refused."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    retired = "retired-admin-" + uuid.uuid4().hex
    (data_dir / "token").write_text(retired + "\n")
    (data_dir / "token").chmod(0o600)
    with running_apiserver(data_dir) as bare:
        assert not (data_dir / "token").exists()
        assert status_of(bare, retired, "/api/v1/namespaces") == 401
        assert bare.session().get(bare.url + "/api/v1/namespaces", timeout=10).status_code == 200  # the admin certificate
        assert status_of(bare, None, "/version") == 200  # anonymous
        bare.kubectl("create", "serviceaccount", "robot")
        robot = bare.kubectl("create", "token", "robot").stdout.strip()
        assert whoami(bare, robot)["username"] == "system:serviceaccount:default:robot"
        create_bootstrap_token_secret(bare)
        assert status_of(bare, f"{BOOTSTRAP_ID}.{BOOTSTRAP_SECRET}") == 401  # no --enable-bootstrap-token-auth
    assert f"removed {data_dir / 'token'}: the built-in admin token is gone" in (data_dir / "apiserver.log").read_text()
    assert not (data_dir / "token").exists()


def _unsigned_jwt(header: bytes, payload: bytes) -> str:
    return f"{jwt.b64url_encode(header)}.{jwt.b64url_encode(payload)}.AA"


HOSTILE_TOKENS = {
    "issuer-list": _unsigned_jwt(b'{"alg":"RS256"}', b'{"iss":[]}'),
    "issuer-object": _unsigned_jwt(b'{"alg":"RS256"}', b'{"iss":{}}'),
    "payload-nested-too-deep": _unsigned_jwt(b'{"alg":"RS256"}', b"[" * 100_000 + b"]" * 100_000),
    "header-nested-too-deep": _unsigned_jwt(b"[" * 100_000 + b"]" * 100_000, f'{{"iss":"{ISSUER}"}}'.encode()),
}


@pytest.mark.parametrize("token", HOSTILE_TOKENS.values(), ids=HOSTILE_TOKENS.keys())
def test_malformed_jwts_are_401_and_unauthenticated_reviews_never_500(server, token):
    if len(token) < 8000:  # what fits in one header line
        assert status_of(server, token, "/version") == 401
    authn = client.AuthenticationV1Api(admin_api(server))
    review = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert (review.status.authenticated, review.status.error) == (None, "invalid bearer token")


@pytest.mark.parametrize("header", [b"Bearer \xff\xfe", "Bearer caf\u00e9".encode("latin-1")], ids=["not-utf-8", "latin-1"])
def test_a_bearer_token_that_is_not_utf_8_is_401(server, header):
    response = requests.get(server.url + "/version", headers={"Authorization": header}, verify=str(server.ca_file), timeout=10)
    assert response.status_code == 401


def test_anonymous_reads_version_but_not_namespaces(server):
    assert status_of(server, None, "/version") == 200
    response = requests.get(server.url + "/api/v1/namespaces", verify=str(server.ca_file), timeout=10)
    assert response.status_code == 403
    assert response.json()["message"] == 'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope'


def test_service_account_token_from_kubectl_used_by_the_python_client(server, ns):
    service_account(server, ns)
    token = create_token(server, ns)
    me = whoami(server, token)
    sa_uid = json.loads(server.kubectl("-n", ns, "get", "sa", "builder", "-o", "json").stdout)["metadata"]["uid"]
    assert (me["username"], me["uid"]) == (f"system:serviceaccount:{ns}:builder", sa_uid)
    assert me["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
    assert list(me["extra"]) == ["authentication.kubernetes.io/credential-id"] and me["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(api(server, token)).list_namespaced_secret(ns)
    assert denied.value.status == 403


def test_token_claims_and_lifetime(server, ns):
    service_account(server, ns)
    before = int(time.time())
    token = create_token(server, ns, "--duration=15m", "--audience=vault", "--audience=" + ISSUER)
    claims = jwt.parse(token).claims()
    assert claims["iss"] == ISSUER and claims["aud"] == ["vault", ISSUER] and claims["sub"] == f"system:serviceaccount:{ns}:builder"
    assert before <= claims["iat"] == claims["nbf"] and claims["exp"] - claims["iat"] == 900
    assert claims["kubernetes.io"]["namespace"] == ns and claims["kubernetes.io"]["serviceaccount"]["name"] == "builder"


@pytest.mark.parametrize("args,message", [
    (("--duration=5m",), "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"),
    (("--bound-object-kind=Pod", "--bound-object-name=ghost"), 'pods "ghost" not found'),
], ids=["too-short", "bound-pod-missing"])
def test_token_request_errors(server, ns, args, message):
    service_account(server, ns)
    result = server.kubectl("-n", ns, "create", "token", "builder", *args, check=False)
    assert result.returncode != 0 and message in result.stderr


def test_token_for_a_missing_service_account_is_404(server, ns):
    result = server.kubectl("-n", ns, "create", "token", "nobody", check=False)
    assert 'serviceaccounts "nobody" not found' in result.stderr


def test_wrong_audience_is_401(server, ns):
    service_account(server, ns)
    assert status_of(server, create_token(server, ns, "--audience=vault")) == 401


def _signing_key(server) -> rsa.RSAPrivateKey:
    return jwt.private_key_from_file(server.data_dir / "pki" / "sa.key")


def test_expired_token_is_401(server, ns):
    service_account(server, ns)
    sa = json.loads(server.kubectl("-n", ns, "get", "sa", "builder", "-o", "json").stdout)
    issued = datetime.now(timezone.utc) - timedelta(hours=2)
    expired = TokenGenerator(ISSUER, _signing_key(server)).generate(bound_claims(sa, [ISSUER], 3600, issued))
    fresh = TokenGenerator(ISSUER, _signing_key(server)).generate(bound_claims(sa, [ISSUER], 3600, datetime.now(timezone.utc)))
    assert (status_of(server, expired), status_of(server, fresh)) == (401, 200)


def test_forged_signature_is_401(server, ns):
    service_account(server, ns)
    header, payload, _ = create_token(server, ns).split(".")
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signature = other.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    assert status_of(server, f"{header}.{payload}.{jwt.b64url_encode(signature)}") == 401


def test_deleted_service_account_token_is_401(server, ns):
    service_account(server, ns)
    token = create_token(server, ns)
    assert status_of(server, token, "/apis/authentication.k8s.io/v1") == 200
    server.kubectl("-n", ns, "delete", "serviceaccount", "builder")
    assert wait_for_status(server, token, 401) == 401
    service_account(server, ns)  # a new ServiceAccount of the same name has another uid
    time.sleep(1)
    assert status_of(server, token, "/apis/authentication.k8s.io/v1") == 401


def test_pod_bound_token_dies_with_its_pod(server, ns):
    service_account(server, ns)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
           "spec": {"serviceAccountName": "builder", "containers": [{"name": "c", "image": "x"}]}}
    server.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(pod))
    token = create_token(server, ns, "--bound-object-kind=Pod", "--bound-object-name=web")
    me = whoami(server, token)
    pod_uid = json.loads(server.kubectl("-n", ns, "get", "pod", "web", "-o", "json").stdout)["metadata"]["uid"]
    assert me["extra"]["authentication.kubernetes.io/pod-name"] == ["web"]
    assert me["extra"]["authentication.kubernetes.io/pod-uid"] == [pod_uid]
    service_account(server, ns, "runner")
    other = {**pod, "metadata": {"name": "other"}, "spec": {**pod["spec"], "serviceAccountName": "runner"}}
    server.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(other))
    wrong = server.kubectl("-n", ns, "create", "token", "builder", "--bound-object-kind=Pod", "--bound-object-name=other", check=False)
    assert 'cannot bind token for serviceaccount "builder" to pod running with different serviceaccount name.' in wrong.stderr
    server.kubectl("-n", ns, "delete", "pod", "web", "--grace-period=0", "--force", "--wait=false")
    assert wait_for_status(server, token, 401, timeout=90) == 401


def create_bootstrap_token_secret(server) -> None:
    """The Secret of bootstrap token BOOTSTRAP_ID.BOOTSTRAP_SECRET, good for an hour."""
    expiration = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    server.kubectl("-n", "kube-system", "create", "secret", "generic", f"bootstrap-token-{BOOTSTRAP_ID}",
                   "--type=bootstrap.kubernetes.io/token", f"--from-literal=token-id={BOOTSTRAP_ID}",
                   f"--from-literal=token-secret={BOOTSTRAP_SECRET}", "--from-literal=usage-bootstrap-authentication=true",
                   "--from-literal=auth-extra-groups=system:bootstrappers:kubesvc:default-node-token", f"--from-literal=expiration={expiration}")


def test_bootstrap_token_user(server):
    create_bootstrap_token_secret(server)
    me = whoami(server, f"{BOOTSTRAP_ID}.{BOOTSTRAP_SECRET}")
    assert me == {"username": f"system:bootstrap:{BOOTSTRAP_ID}", "uid": None, "extra": None,
                  "groups": ["system:bootstrappers", "system:bootstrappers:kubesvc:default-node-token", "system:authenticated"]}
    assert status_of(server, f"{BOOTSTRAP_ID}.ffffffffffffffff") == 401


def test_kubectl_auth_whoami_table(server):
    out = server.kubectl("auth", "whoami").stdout.splitlines()
    assert out[0].split() == ["ATTRIBUTE", "VALUE"]
    assert out[1].split() == ["Username", "system:admin"]
    assert out[2].split() == ["Groups", "[system:masters", "system:authenticated]"]
    assert out[3].startswith("Extra: authentication.kubernetes.io/credential-id") and "[X509SHA256=" in out[3]


def test_kubectl_as_and_as_group(server):
    out = server.kubectl("auth", "whoami", "--as=jane", "--as-group=devs", "--as-group=ops").stdout.splitlines()
    assert [line.split(None, 1) for line in out] == [["ATTRIBUTE", "VALUE"], ["Username", "jane"], ["Groups", "[devs ops system:authenticated]"]]


def test_impersonation_needs_the_impersonate_verb(server):
    response = requests.get(server.url + "/api/v1/namespaces/default/services", verify=str(server.ca_file), timeout=10,
                            headers={"Authorization": f"Bearer {ALICE_TOKEN}", "Impersonate-User": "jane"})
    assert response.status_code == 403
    assert response.json()["message"] == 'users "jane" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope'
    group_only = requests.get(server.url + "/version", verify=str(server.ca_file), timeout=10,
                              headers={"Authorization": f"Bearer {ALICE_TOKEN}", "Impersonate-Group": "system:masters"})
    assert group_only.status_code == 400


def test_token_review(server, ns):
    service_account(server, ns)
    token = create_token(server, ns)
    authn = client.AuthenticationV1Api(admin_api(server))
    good = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert good.status.authenticated and good.status.user.username == f"system:serviceaccount:{ns}:builder"
    assert good.status.audiences == [ISSUER]
    bad = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=["vault"])))
    assert not bad.status.authenticated and bad.status.error == f'token audiences ["{ISSUER}"] is invalid for the target audiences ["vault"]'
    unknown = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token="nope")))
    assert (unknown.status.authenticated, unknown.status.error) == (None, "invalid bearer token")


def test_oidc_discovery_documents_verify_a_token(server, ns):
    service_account(server, ns)
    token = create_token(server, ns)
    headers = {"Authorization": f"Bearer {token}"}  # system:service-account-issuer-discovery is bound to system:serviceaccounts
    discovery = requests.get(server.url + "/.well-known/openid-configuration", headers=headers, verify=str(server.ca_file), timeout=10)
    assert discovery.status_code == 200 and discovery.headers["Content-Type"] == "application/json"
    assert discovery.headers["Cache-Control"] == "public, max-age=3600"
    document = discovery.json()
    assert document == {"issuer": ISSUER, "jwks_uri": server.url + "/openid/v1/jwks", "response_types_supported": ["id_token"],
                        "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]}
    keys = requests.get(document["jwks_uri"], headers=headers, verify=str(server.ca_file), timeout=10)
    assert keys.headers["Content-Type"] == "application/jwk-set+json"
    header, payload, signature = token.split(".")
    kid = json.loads(base64.urlsafe_b64decode(header + "==="))["kid"]
    jwk = next(k for k in keys.json()["keys"] if k["kid"] == kid)
    number = lambda text: int.from_bytes(base64.urlsafe_b64decode(text + "==="), "big")  # noqa: E731
    public_key = rsa.RSAPublicNumbers(number(jwk["e"]), number(jwk["n"])).public_key()
    public_key.verify(base64.urlsafe_b64decode(signature + "==="), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    assert status_of(server, None, "/openid/v1/jwks") == 403


def test_signing_key_is_private(server):
    assert (server.data_dir / "pki" / "sa.key").stat().st_mode & 0o777 == 0o600


def test_bad_token_file_stops_the_server_with_one_line(tmp_path):
    bad = tmp_path / "tokens.csv"
    bad.write_text("only,two\n")
    result = subprocess.run(["python3", "-m", "kubesvc", "apiserver", f"--data-dir={tmp_path / 'data'}", "--secure-port=0",
                             f"--token-auth-file={bad}"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"token file '{bad}' must have at least 3 columns (token, user name, user uid), found 2" in result.stderr
    assert "Traceback" not in result.stderr


def request_token(server, ns: str, sa: str, spec: dict) -> requests.Response:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    return requests.post(f"{server.url}/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", json=body, verify=str(server.ca_file), timeout=10,
                         cert=server.admin_cert)


def test_projected_volume_tokens_are_extended(server, ns):
    service_account(server, ns)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
           "spec": {"serviceAccountName": "builder", "containers": [{"name": "c", "image": "x"}]}}
    server.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(pod))
    answer = request_token(server, ns, "builder", {"expirationSeconds": 3607, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web"}})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert (body["kind"], body["metadata"]["name"], body["metadata"]["namespace"]) == ("TokenRequest", "builder", ns)
    assert body["spec"]["audiences"] == [ISSUER] and body["spec"]["expirationSeconds"] == 3607
    claims = jwt.parse(body["status"]["token"]).claims()
    assert claims["exp"] - claims["iat"] == 365 * 24 * 3600 and claims["kubernetes.io"]["warnafter"] == claims["iat"] + 3607
    expires = datetime.strptime(body["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert abs(expires.timestamp() - (claims["iat"] + 3607)) <= 1


@pytest.mark.parametrize("ref,code,message", [
    ({"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, 400, "cannot bind token to object of type /v1, Kind=ConfigMap"),
    ({"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "not-its-uid"}, 409,
     'Operation cannot be fulfilled on Secret "s": the UID in the bound object reference (not-its-uid) does not match the UID in record. '
     "The object might have been deleted and then recreated"),
], ids=["unsupported-kind", "uid-mismatch"])
def test_bound_object_errors(server, ns, ref, code, message):
    service_account(server, ns)
    server.kubectl("-n", ns, "create", "secret", "generic", "s", "--from-literal=a=b")
    answer = request_token(server, ns, "builder", {"boundObjectRef": ref})
    assert (answer.status_code, answer.json()["message"]) == (code, message)


def test_max_token_expiration_shortens_with_a_warning(tmp_path):
    with running_apiserver(tmp_path / "data", "--service-account-max-token-expiration=1h") as capped:
        capped.kubectl("create", "serviceaccount", "builder")
        result = capped.kubectl("create", "token", "builder", "--duration=2h")
        claims = jwt.parse(result.stdout.strip()).claims()
        assert claims["exp"] - claims["iat"] == 3600
        assert "Warning: requested expiration of 7200 seconds shortened to 3600 seconds" in result.stderr
