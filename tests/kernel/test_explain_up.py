"""``kubesvc explain`` under ``kubesvc up``, as a user runs it on the machine after "it doesn't
answer": a Service whose selector matches nothing, one whose Pod fails its readiness probe, one
whose ``targetPort`` names a port no container has, and a healthy one, each named with its cause
and fix (the healthy one said to be healthy). One ``up`` for the module; the Pods are real
processes, the probe failures the agent's own, the endpoints the controller's, the proxy health
the node proxy's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.agent import nsenter_argv
from tests.support.netns import REPO_ROOT, Netns
from tests.support.up import Machine

pytestmark = pytest.mark.kernel

MANIFEST = """
apiVersion: v1
kind: Pod
metadata: {name: web-1, labels: {app: web}}
spec:
  containers:
  - name: app
    image: python
    command: [python3, -m, http.server, "8080"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: sick-1, labels: {app: sick}}
spec:
  containers:
  - name: app
    image: python
    command: [python3, -m, http.server, "8080"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe: {httpGet: {path: /ready, port: 8081}, periodSeconds: 1, failureThreshold: 1}
---
apiVersion: v1
kind: Service
metadata: {name: healthy}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: nomatch}
spec: {selector: {app: webb}, ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: sick}
spec: {selector: {app: sick}, ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: badport}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: web}]}
"""


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    made = Machine(Netns.create("explain"), tmp_path_factory.mktemp("explain"))
    try:
        made.up()
        made.kubectl("apply", "-f", "-", input=MANIFEST)
        yield made
    finally:
        made.teardown()


def explain(machine: Machine, service: str) -> dict:
    argv = nsenter_argv(machine.ns.name, sys.executable, "-m", "kubesvc", "explain", f"svc/{service}",
                        "--kubeconfig", str(machine.kubeconfig), "-o", "json")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def explained(machine: Machine, service: str, wanted: str, timeout: float = 60) -> list[dict]:
    """The findings once ``wanted`` is among their causes (Pods start, probes fail, slices follow)."""
    deadline = time.monotonic() + timeout
    while True:
        findings = explain(machine, service)["findings"]
        if wanted in {f["cause"] for f in findings} or time.monotonic() > deadline:
            return findings
        time.sleep(1)


def test_a_healthy_service_is_said_to_be_healthy(machine):
    findings = explained(machine, "healthy", "healthy")
    assert [f["cause"] for f in findings if f["severity"] != "info"] == ["healthy"], findings
    message = findings[-1]["message"]
    assert message.startswith("svc/healthy is healthy: 1 ready endpoint (")
    assert "; 1 proxy synced" in message  # the node proxy's own /healthz, read at the Node's InternalIP


def test_a_selector_matching_nothing_names_the_nearest_pod(machine):
    findings = explained(machine, "nomatch", "selector-matches-nothing")
    (finding,) = [f for f in findings if f["severity"] == "error"]
    assert finding["cause"] == "selector-matches-nothing"
    assert finding["message"] == "selector app=webb matches no Pod in default (nearest: web-1 has app=web; sick-1 has app=sick)"
    assert finding["fix"].startswith("kubectl label pod web-1 app=webb --overwrite")


def test_a_pod_failing_its_readiness_probe_is_named_with_the_kubelets_reason(machine):
    findings = explained(machine, "sick", "pod-readiness-failing")
    (finding,) = [f for f in findings if f["severity"] == "error"]
    assert finding["cause"] == "pod-readiness-failing"
    assert finding["message"].startswith("Pod sick-1 fails its readiness probe (Readiness probe failed: ")
    assert "8081" in finding["message"]


def test_a_target_port_name_no_container_has(machine):
    findings = explained(machine, "badport", "target-port-name-unknown")
    (finding,) = [f for f in findings if f["severity"] == "error"]
    assert finding["message"] == "port http: targetPort 'web' names no TCP containerPort of Pod web-1 (their named ports: http)"
    assert finding["fix"].startswith("name the container port 'web' in the Pod template")


def test_a_missing_service_is_one_line_and_exit_1(machine):
    argv = nsenter_argv(machine.ns.name, sys.executable, "-m", "kubesvc", "explain", "svc/nope", "--kubeconfig", str(machine.kubeconfig))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", 'Error: services "nope" not found in namespace default\n')
