"""How a second server machine gets what it needs from the first: ``kubesvc up --server
https://<first>:6443 --token <token>``.

A joining server must share the first one's certificate authorities and keys: the cluster CA
(it issues its apiserver's serving certificate and its components' client certificates), the
ServiceAccount signing key (a token one apiserver signed must verify on every other) and the
etcd CA (its member's peer and client certificates). k3s hands them over in its
``/v1-k3s/server-bootstrap`` bundle to whoever holds the server token; kubeadm in the
``kubeadm-certs`` Secret to whoever holds the ``--certificate-key``. kubesvc does it with the
apiserver it already has and kubeadm's bootstrap-token discovery:

1. **Trust the server** (kubeadm's token discovery, ``cluster-info``): the joiner reads the
   ConfigMap ``kube-public/cluster-info`` anonymously over TLS it cannot verify yet. It holds a
   kubeconfig with the server URL and the CA, and for each token with the ``signing`` usage a
   key ``jws-kubeconfig-<token id>``: a detached JWS (HS256, ``kid`` the token ID, key the
   token secret) over that kubeconfig. Only someone who knows the token's secret can make it,
   so a matching signature proves the CA came from the cluster the token belongs to (kubeadm's
   bootstrap signer controller signs; here ``kubesvc token create`` signs and ``delete``
   removes the signature). A missing or wrong signature: "wrong token", nothing written.
2. **Authenticate**: with that CA verified, the joiner presents the token as a bearer token
   (``system:bootstrap:<id>``) and reads the Secret ``kube-system/kubesvc-server-bootstrap``,
   which ``up --cluster-init`` writes: the CA files above. RBAC lets only the group
   ``system:bootstrappers:kubesvc:server`` read it (Role and RoleBinding
   ``kubesvc:server-bootstrap``), which ``kubesvc token create --control-plane`` puts its tokens
   in beside kubeadm's node group: a default (node) token cannot make a server (k3s separates
   server and agent tokens likewise). The Secret holds the CA keys in the clear, as
   every Secret is held in etcd: whoever can read kube-system Secrets owns the cluster anyway.
3. **Install**: the files are written 0600 under ``<data-dir>/pki`` unless the data
   directory already holds another CA (then: use a fresh ``--data-dir``). Then the member
   joins etcd through ``https://<server host>:2379`` (``etcd_process``).

Anonymous reads of ``cluster-info`` need the Role ``kubeadm:bootstrap-signer-clusterinfo``
bound to ``system:anonymous`` (kubeadm's names), also written by ``up --cluster-init``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from kubesvc.cluster import etcd_member as em
from kubesvc.cluster.tokens import SERVER_GROUP
from kubesvc.serving import pki

CLUSTER_INFO = "cluster-info"
CLUSTER_INFO_PATH = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
JWS_PREFIX = "jws-kubeconfig-"
BUNDLE = "kubesvc-server-bootstrap"
BUNDLE_PATH = f"/api/v1/namespaces/kube-system/secrets/{BUNDLE}"
CLUSTER_INFO_ROLE = "kubeadm:bootstrap-signer-clusterinfo"
BUNDLE_ROLE = "kubesvc:server-bootstrap"
# bundle key -> the file under <data-dir>
BUNDLE_FILES = {"ca.crt": "pki/ca.crt", "ca.key": "pki/ca.key", "sa.key": "pki/sa.key",
                "etcd-ca.crt": f"pki/{em.PKI_SUBDIR}/ca.crt", "etcd-ca.key": f"pki/{em.PKI_SUBDIR}/ca.key"}


class JoinFailed(Exception):
    """One line that says why this machine cannot join and what to do."""


# ---- cluster-info and its signatures (pure) -------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def cluster_info_kubeconfig(server: str, ca_pem: bytes) -> str:
    """The kubeconfig ``cluster-info`` publishes: the server and its CA, no user (kubeadm's)."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "preferences": {},
                           "clusters": [{"name": "", "cluster": {"server": server,
                                                                 "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
                           "contexts": [], "users": [], "current-context": ""}, sort_keys=False)


def detached_jws(content: str, token_id: str, token_secret: str) -> str:
    """A compact JWS over ``content`` with the payload left out (``header..signature``), HS256
    keyed by the token secret, ``kid`` the token ID (cluster-bootstrap's
    ``ComputeDetachedSignature``)."""
    header = _b64url(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    signing_input = f"{header}.{_b64url(content.encode())}".encode()
    return f"{header}..{_b64url(hmac.new(token_secret.encode(), signing_input, hashlib.sha256).digest())}"


def signature_matches(signature: str, content: str, token_id: str, token_secret: str) -> bool:
    return hmac.compare_digest(signature.encode(), detached_jws(content, token_id, token_secret).encode())


def trusted_ca(cluster_info: dict, token_id: str, token_secret: str, server: str) -> tuple[bytes, str]:
    """(the CA PEM, the server URL) ``cluster-info`` publishes, once its signature for
    ``token_id`` proves it (JoinFailed otherwise)."""
    data = cluster_info.get("data") or {}
    content, signature = data.get("kubeconfig", ""), data.get(JWS_PREFIX + token_id)
    if not signature:
        raise JoinFailed(f"{server} does not know token {token_id} (wrong or expired token, or made without the signing usage): "
                         "create one there with kubesvc token create, then retry")
    if not signature_matches(signature, content, token_id, token_secret):
        raise JoinFailed(f"the token's secret does not match {server}'s token {token_id} (wrong token): "
                         "copy it again from kubesvc token create, then retry")
    try:
        cluster = yaml.safe_load(content)["clusters"][0]["cluster"]
        return base64.b64decode(cluster["certificate-authority-data"]), cluster.get("server", server)
    except (ValueError, KeyError, IndexError, TypeError, yaml.YAMLError):
        raise JoinFailed(f"{server}'s cluster-info holds no usable kubeconfig") from None


# ---- the bundle (pure) ------------------------------------------------------------------------------


def bundle_secret(data_dir: Path) -> dict:
    """The Secret a joining server reads: the CA files of ``data_dir`` (see the module docstring)."""
    data = {key: base64.b64encode((Path(data_dir) / path).read_bytes()).decode() for key, path in BUNDLE_FILES.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": BUNDLE, "namespace": "kube-system", "labels": {"app.kubernetes.io/managed-by": "kubesvc"}},
            "data": data}


def rbac_objects() -> list[tuple[str, dict]]:
    """(collection path, object): the Roles and RoleBindings for anonymous ``cluster-info``
    reads and the server group's bundle read."""
    def role(name, namespace, resource, names):
        return (f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": namespace},
                 "rules": [{"apiGroups": [""], "resources": [resource], "resourceNames": names, "verbs": ["get"]}]})

    def binding(name, namespace, kind, subject):
        return (f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]})

    return [role(CLUSTER_INFO_ROLE, "kube-public", "configmaps", [CLUSTER_INFO]),
            binding(CLUSTER_INFO_ROLE, "kube-public", "User", "system:anonymous"),
            role(BUNDLE_ROLE, "kube-system", "secrets", [BUNDLE]),
            binding(BUNDLE_ROLE, "kube-system", "Group", SERVER_GROUP)]


def install_plan(data_dir: Path, bundle: dict) -> dict[Path, bytes]:
    """path -> content of the bundle's files under ``data_dir``; JoinFailed when the data
    directory already belongs to another cluster."""
    files = {}
    for key, relative in BUNDLE_FILES.items():
        value = (bundle.get("data") or {}).get(key)
        if not value:
            raise JoinFailed(f"the server's {BUNDLE} Secret has no {key}: restart kubesvc up --cluster-init on the first server")
        files[Path(data_dir) / relative] = base64.b64decode(value)
    ca = Path(data_dir) / BUNDLE_FILES["ca.crt"]
    if ca.exists() and ca.read_bytes() != files[ca]:
        raise JoinFailed(f"{data_dir} holds the certificates of another cluster: join with a fresh --data-dir")
    return files


def etcd_endpoint(server: str) -> str:
    """The etcd client URL of the server machine ``server`` names (its member listens on
    :2379 of the same address)."""
    host = urlsplit(server).hostname or ""
    return em.url(host, em.CLIENT_PORT)


# ---- the shell ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    ca_pem: bytes
    bundle: dict


async def fetch(server: str, token: str, timeout: float = 15.0) -> Fetched:
    """Steps 1 and 2 of the module docstring against ``server``."""
    import ssl

    import aiohttp

    from kubesvc.apiserver.auth.bootstrap import parse_token

    parsed = parse_token(token)
    if parsed is None:
        raise JoinFailed("--token must be a bootstrap token [a-z0-9]{6}.[a-z0-9]{16}: print one on a server with kubesvc token create")
    token_id, token_secret = parsed
    base = server.rstrip("/")
    limits = aiohttp.ClientTimeout(total=timeout)
    try:
        async with aiohttp.ClientSession(timeout=limits) as session:
            async with session.get(base + CLUSTER_INFO_PATH, ssl=False) as response:  # not trusted yet: the signature decides
                if response.status == 404:
                    raise JoinFailed(f"{server} has no kube-public/cluster-info: is it a server started with kubesvc up --cluster-init?")
                if response.status != 200:
                    raise JoinFailed(f"{server} could not read kube-public/cluster-info ({response.status}: {await _message(response)}): "
                                     "if its etcd lost its quorum, start its other servers, then retry")
                cluster_info = await response.json()
            ca_pem, _ = trusted_ca(cluster_info, token_id, token_secret, server)
            context = ssl.create_default_context(cadata=ca_pem.decode())
            async with session.get(base + BUNDLE_PATH, ssl=context, headers={"Authorization": f"Bearer {token}"}) as response:
                if response.status == 401:
                    raise JoinFailed(f"{server} refused token {token_id} (expired or deleted): create one there with kubesvc token create")
                if response.status == 403:
                    raise JoinFailed(f"token {token_id} may not join servers (its groups lack {SERVER_GROUP}): "
                                     "create one with kubesvc token create --control-plane")
                if response.status != 200:
                    raise JoinFailed(f"{server} answered {response.status} for the server bootstrap Secret: restart kubesvc up --cluster-init there")
                bundle = await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        raise JoinFailed(f"cannot reach {server} ({err or type(err).__name__}): check the URL and that kubesvc up runs there") from None
    return Fetched(ca_pem, bundle)


async def _message(response) -> str:
    """The ``message`` of an error Status, else the start of the body."""
    text = await response.text()
    try:
        return str(json.loads(text).get("message") or text[:200])
    except (ValueError, AttributeError):
        return text[:200].strip()


def install(data_dir: Path, fetched: Fetched) -> list[Path]:
    """Write the bundle's files (0600 in 0700 directories); the ones that were not there before."""
    files = install_plan(data_dir, fetched.bundle)
    made = [path for path in files if not path.exists()]
    for path, content in files.items():
        pki.private_dir(path.parent)
        pki.write_private(path, content)
    return made


async def publish(client, data_dir: Path, server: str) -> None:
    """What joiners read, written (again) by ``up --cluster-init`` through ``client`` (the admin):
    ``cluster-info`` (keeping its signatures), the bundle Secret and the RBAC that opens them."""
    from kubesvc.client.rest import is_already_exists

    async def apply(path: str, obj: dict) -> None:
        try:
            await client.create(path, obj)
        except Exception as err:
            if not is_already_exists(err):
                raise
            name = obj["metadata"]["name"]
            current = await client.get(f"{path}/{name}")
            await client.update(f"{path}/{name}", {**obj, "metadata": {**obj["metadata"],
                                                                       "resourceVersion": current["metadata"]["resourceVersion"]}})

    for path, obj in rbac_objects():
        await apply(path, obj)
    await apply("/api/v1/namespaces/kube-system/secrets", bundle_secret(data_dir))
    content = cluster_info_kubeconfig(server, pki.cluster_ca(data_dir).pem)
    secrets = (await client.list("/api/v1/namespaces/kube-system/secrets", {"fieldSelector": "type=bootstrap.kubernetes.io/token"})).get("items")
    await apply("/api/v1/namespaces/kube-public/configmaps",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CLUSTER_INFO, "namespace": "kube-public"},
                 "data": cluster_info_data(content, secrets or [], datetime.now(timezone.utc))})


def cluster_info_data(content: str, token_secrets: list[dict], now: datetime) -> dict[str, str]:
    """``cluster-info``'s data: the kubeconfig and a signature for every live token with the
    ``signing`` usage (what kubeadm's bootstrap signer keeps there)."""
    from kubesvc.apiserver.auth import bootstrap as bt

    data = {"kubeconfig": content}
    for secret in token_secrets:
        token_id, token_secret = bt.secret_data(secret, bt.TOKEN_ID_KEY), bt.secret_data(secret, bt.TOKEN_SECRET_KEY)
        if (secret.get("type") == bt.SECRET_TYPE and bt.parse_token(f"{token_id}.{token_secret}")
                and bt.secret_data(secret, "usage-bootstrap-signing") == "true" and not bt.has_expired(secret, now)):
            data[JWS_PREFIX + token_id] = detached_jws(content, token_id, token_secret)
    return data


async def sign(client, token_id: str, token_secret: str) -> bool:
    """Add ``token_id``'s signature to ``cluster-info`` (False: there is none, not a cluster server)."""
    current = await _cluster_info(client)
    if current is None:
        return False
    content = (current.get("data") or {}).get("kubeconfig", "")
    await client.patch(CLUSTER_INFO_PATH, {"data": {JWS_PREFIX + token_id: detached_jws(content, token_id, token_secret)}})
    return True


async def published_server(client) -> str | None:
    """The server URL ``cluster-info`` publishes (None: not a cluster server)."""
    current = await _cluster_info(client)
    if current is None:
        return None
    try:
        return yaml.safe_load(current["data"]["kubeconfig"])["clusters"][0]["cluster"]["server"]
    except (KeyError, IndexError, TypeError, yaml.YAMLError):
        return None


async def _cluster_info(client) -> dict | None:
    from kubesvc.client.rest import is_not_found

    try:
        return await client.get(CLUSTER_INFO_PATH)
    except Exception as err:
        if is_not_found(err):
            return None
        raise


async def unsign(client, token_id: str) -> None:
    """Remove ``token_id``'s signature from ``cluster-info`` (if any)."""
    from kubesvc.client.rest import is_not_found

    try:
        await client.patch(CLUSTER_INFO_PATH, {"data": {JWS_PREFIX + token_id: None}})
    except Exception as err:
        if not is_not_found(err):
            raise
