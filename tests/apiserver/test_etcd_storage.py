"""``kubesvc apiserver --storage-backend etcd3`` on a real etcd (with client TLS, as a kubeadm
etcd serves), driven by the real kubectl: a Service gets its ClusterIP, reads back, lists and
watches; a second apiserver process on the same etcd sees it and its changes; an etcd that
does not answer is one line at start and a fast 5xx at run time, and once it is back the
apiservers write again."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import pytest

from tests.support.apiserver import running_apiserver
from tests.support.etcd import running_etcd

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""


@pytest.fixture(scope="module")
def etcd():
    with running_etcd(tls=True) as server:
        yield server


def service(server, name: str) -> dict:
    return json.loads(server.kubectl("get", "svc", name, "-n", "default", "-o", "json").stdout)


def test_two_apiservers_on_one_etcd_serve_the_same_services_and_outlive_an_etcd_restart(etcd, tmp_path):
    with running_apiserver(tmp_path / "one", *etcd.flags()) as one, running_apiserver(tmp_path / "two", *etcd.flags()) as two:
        watcher = subprocess.Popen(
            ["kubectl", f"--kubeconfig={two.kubeconfig}", f"--cache-dir={two.cache_dir}", "get", "svc", "-n", "default", "-w",
             "--output-watch-events", "--request-timeout=20s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)
            assert one.kubectl("apply", "-n", "default", "-f", "-", input=SERVICE).stdout.strip() == "service/web created"
            created = service(one, "web")
            assert ipaddress.ip_address(created["spec"]["clusterIP"]) in ipaddress.ip_network("10.96.0.0/12")
            assert service(two, "web")["spec"]["clusterIP"] == created["spec"]["clusterIP"]
            ip_address = json.loads(two.kubectl("get", "ipaddresses", created["spec"]["clusterIP"], "-o", "json").stdout)
            assert ip_address["spec"]["parentRef"]["name"] == "web"
            names = two.kubectl("get", "svc", "-n", "default", "-o", "name").stdout.split()
            assert names == ["service/kubernetes", "service/web"]
            two.kubectl("label", "svc", "web", "-n", "default", "seen=yes")
            assert service(one, "web")["metadata"]["labels"]["seen"] == "yes"
            one.kubectl("delete", "svc", "web", "-n", "default")
            time.sleep(1.0)
        finally:
            watcher.terminate()
            out, _ = watcher.communicate(timeout=10)
        events = [line.split()[0] for line in out.splitlines()[1:] if line.split()[1:2] == ["web"]]
        assert events == ["ADDED", "MODIFIED", "DELETED"], out
        again = two.kubectl("create", "service", "clusterip", "web", "--tcp=80:80", "--clusterip", created["spec"]["clusterIP"],
                            check=False)
        assert again.returncode == 0, again.stderr  # released by the delete on the other apiserver

        # etcd gone: a write is a 500 Status naming etcd, at once; back: both apiservers write again
        etcd.kill()
        started = time.monotonic()
        answer = one.session().post(f"{one.url}/api/v1/namespaces/default/services", timeout=30, json={
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "after"}, "spec": {"ports": [{"port": 80}]}})
        assert time.monotonic() - started < 10
        status = answer.json()
        assert answer.status_code == 500 and status["kind"] == "Status" and status["code"] == 500, status
        assert status["message"].startswith(f"etcd ({etcd.client_url}): "), status  # etcd's words, as kube-apiserver passes them
        etcd.restart()
        deadline = time.monotonic() + 15
        while two.kubectl("create", "service", "clusterip", "after", "--tcp=80:80", check=False).returncode:
            assert time.monotonic() < deadline, "the apiserver did not write to etcd again"
            time.sleep(0.2)
        assert one.kubectl("get", "svc", "-n", "default", "-o", "name").stdout.split() == \
            ["service/after", "service/kubernetes", "service/web"]


def test_etcd_unreachable_at_start_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "kubesvc", "apiserver", f"--data-dir={tmp_path}", "--secure-port=0", "--storage-backend=etcd3",
         "--etcd-servers=http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "etcd" in lines[0] and "127.0.0.1:9" in lines[0], result.stderr
