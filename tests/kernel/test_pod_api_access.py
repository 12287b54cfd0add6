"""Pods reach the API, on ``kubesvc up`` in a namespace of its own: a Pod running a Python script
with the official client's ``config.load_incluster_config()`` finds ``KUBERNETES_SERVICE_HOST``
and ``_PORT``, its token, ``ca.crt`` and ``namespace`` under
``/var/run/secrets/kubernetes.io/serviceaccount`` (read-only, upstream's modes), verifies the
apiserver's certificate for 10.96.0.1, lists Services through 10.96.0.1:443 (the proxy DNATs
the ``kubernetes`` Service to the advertise address, kept there by the lease reconciler) and
gets upstream's 403 on Secrets until a RoleBinding allows its ServiceAccount.
"""

from __future__ import annotations

import secrets as random
import sys

import pytest
import yaml

from tests.support.netns import wait_until
from tests.support.up import Machine

pytestmark = pytest.mark.kernel

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# The Pod's program: what it sees, then Services and Secrets through the API, until Secrets are allowed.
SCRIPT = f"""
import json, os, stat, sys, time
from kubernetes import client, config
print("env", os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"], flush=True)
for name in ("token", "ca.crt", "namespace"):
    print("mode", name, oct(stat.S_IMODE(os.stat("{SA_DIR}/" + name).st_mode)), flush=True)
print("namespace", open("{SA_DIR}/namespace").read(), flush=True)
print("subject", json.loads(__import__("base64").urlsafe_b64decode(open("{SA_DIR}/token").read().split(".")[1] + "==="))["sub"], flush=True)
try:
    open("{SA_DIR}/extra", "w")
except OSError as err:
    print("write", err.strerror, flush=True)
config.load_incluster_config()
api = client.CoreV1Api()
namespace = open("{SA_DIR}/namespace").read()
print("services", sorted(s.metadata.name for s in api.list_namespaced_service(namespace).items), flush=True)
while True:
    try:
        print("secrets", sorted(s.metadata.name for s in api.list_namespaced_secret(namespace).items), flush=True)
        break
    except client.ApiException as err:
        print("denied", err.status, json.loads(err.body)["message"], flush=True)
        time.sleep(0.5)
"""


@pytest.fixture(scope="module")
def up(shared_up):
    """The ``kubesvc up`` this module shares with the others of SHARED_UP_MODULES
    (tests/support/up.py, tests/kernel/conftest.py): its Pods' names are its own."""
    return shared_up


def logs(up: Machine, pod: str, namespace: str) -> list[str]:
    result = up.kubectl("logs", pod, "-n", namespace, check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


def test_in_cluster_client_lists_services_and_is_refused_secrets_until_bound(up):
    ns = f"incluster-{random.token_hex(3)}"
    up.kubectl("create", "namespace", ns)
    up.kubectl("create", "service", "clusterip", "web", "--tcp=80:8080", "-n", ns)
    up.kubectl("create", "secret", "generic", "creds", "--from-literal=password=hunter2", "-n", ns)
    up.kubectl("create", "rolebinding", "viewer", "--clusterrole=view", f"--serviceaccount={ns}:default", "-n", ns)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "client", "image": "python", "command": [sys.executable, "-c", SCRIPT]}]}}
    up.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(pod))
    up.pods()

    wait_until(lambda: any(line.startswith("denied") for line in logs(up, "client", ns)), 90,
               "the Pod listed Services and was refused Secrets")
    lines = logs(up, "client", ns)
    assert lines[:8] == [
        "env 10.96.0.1 443",
        "mode token 0o644", "mode ca.crt 0o644", "mode namespace 0o644",
        f"namespace {ns}",
        f"subject system:serviceaccount:{ns}:default",
        "write Read-only file system",
        "services ['web']",
    ], "\n".join(lines)
    assert lines[8] == (f'denied 403 secrets is forbidden: User "system:serviceaccount:{ns}:default" cannot list resource "secrets" '
                        f'in API group "" in the namespace "{ns}"')

    up.kubectl("create", "role", "secret-reader", "--verb=list", "--resource=secrets", "-n", ns)
    up.kubectl("create", "rolebinding", "secret-reader", "--role=secret-reader", f"--serviceaccount={ns}:default", "-n", ns)
    wait_until(lambda: up.get("pod", "client", "-n", ns)["status"].get("phase") == "Succeeded", 60, "the Pod read the Secrets and ended")
    assert logs(up, "client", ns)[-1] == "secrets ['creds']"


def test_kubernetes_service_endpoints_are_the_advertise_address(up):
    eps = up.get("endpoints", "kubernetes", "-n", "default")
    [subset] = eps["subsets"]
    node = up.get("nodes")["items"][0]
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert subset == {"addresses": [{"ip": node_ip}], "ports": [{"name": "https", "port": up.port, "protocol": "TCP"}]}
    eslice = up.get("endpointslice", "kubernetes", "-n", "default")
    assert [e["addresses"] for e in eslice["endpoints"]] == [[node_ip]]
