"""``kubesvc apiserver --storage-backend etcd3`` on a real etcd (with client TLS, as a kubeadm
etcd serves), driven by the real kubectl: a Service gets its ClusterIP, reads back, lists and
watches; a second apiserver process on the same etcd sees it and its changes; an etcd that
does not answer is one line at start and a fast 5xx at run time, and once it is back the
apiservers write again; watches open when etcd goes end cleanly and, re-opened from their
last resourceVersion once it is back, miss nothing."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import pytest
import requests

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


def create_configmap(session, server, name: str, timeout: float = 30):
    return session.post(f"{server.url}/api/v1/namespaces/default/configmaps", timeout=timeout,
                        json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"name": name}})


def watch_events(response) -> tuple[list[dict], str]:
    """Every event of a watch response until the apiserver ends it, and how it ended ("clean":
    the chunked body was closed properly; else the client's error)."""
    events = []
    try:
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
    except requests.RequestException as exc:
        return events, f"{type(exc).__name__}: {exc}"
    return events, "clean"


def test_etcd_gone_at_run_time_fails_requests_fast_and_watches_resume_from_their_resource_version(etcd, tmp_path):
    """etcd killed under a running apiserver: reads and writes are a 5xx Status at once (not at
    the client's timeout), an open watch ends cleanly (the client re-watches), a re-watch while
    etcd is away ends with a 500 ERROR event; once etcd is back, a re-watch from the last
    resourceVersion the client saw delivers every write made since, through either apiserver.
    An etcd that never answers makes a read a 500 at etcd's request deadline."""
    prefix = f"--etcd-prefix={etcd.new_prefix()}"
    with running_apiserver(tmp_path / "one", *etcd.flags(), prefix) as one, \
            running_apiserver(tmp_path / "two", *etcd.flags(), prefix) as two:
        session = one.session()
        configmaps = f"{one.url}/api/v1/namespaces/default/configmaps"
        assert create_configmap(session, one, "before").status_code == 201
        listed = session.get(configmaps, timeout=30).json()
        watch = session.get(configmaps, params={"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"]},
                            stream=True, timeout=(5, 60))
        assert watch.status_code == 200
        lines = watch.iter_lines()
        assert create_configmap(session, one, "c1").status_code == 201
        first = json.loads(next(line for line in lines if line))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "c1")
        last_seen = first["object"]["metadata"]["resourceVersion"]

        etcd.kill()
        started = time.monotonic()
        rest, ending = watch_events(watch)
        assert ending == "clean" and time.monotonic() - started < 15, ending
        assert [e["type"] for e in rest] in ([], ["ERROR"]), rest  # nothing after c1 was written

        for method, url, body in (("GET", f"{configmaps}/c1", None), ("GET", configmaps, None),
                                  ("POST", configmaps, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "down"}}),
                                  ("DELETE", f"{configmaps}/c1", None)):
            started = time.monotonic()
            answer = session.request(method, url, json=body, timeout=30)
            assert time.monotonic() - started < 10, (method, url)
            status = answer.json()
            assert 500 <= answer.status_code < 600 and status["kind"] == "Status" and status["code"] == answer.status_code, \
                (method, url, answer.status_code, status)
        started = time.monotonic()
        rewatch = session.get(configmaps, params={"watch": "1", "resourceVersion": last_seen}, stream=True, timeout=(5, 30))
        events, ending = watch_events(rewatch) if rewatch.status_code == 200 else ([rewatch.json()], "status")
        assert time.monotonic() - started < 10 and ending in ("clean", "status"), ending
        assert [e.get("object", e).get("code") for e in events] == [500], events

        etcd.restart()
        deadline = time.monotonic() + 30
        while (answer := create_configmap(two.session(), two, "c2", timeout=10)).status_code != 201:
            assert answer.status_code >= 500 and time.monotonic() < deadline, (answer.status_code, answer.text)
            time.sleep(0.2)
        assert create_configmap(session, one, "c3").status_code == 201

        # the client re-watches from the last resourceVersion it saw: every later write, once
        resumed = session.get(configmaps, params={"watch": "1", "resourceVersion": last_seen}, stream=True, timeout=(5, 60))
        assert resumed.status_code == 200
        names, events = [], resumed.iter_lines()
        while len(names) < 2:
            event = json.loads(next(line for line in events if line))
            assert event["type"] == "ADDED", event
            names.append(event["object"]["metadata"]["name"])
        resumed.close()
        assert names == ["c2", "c3"]

        # an etcd that takes connections and never answers (stopped, as behind a partition):
        # a 500 Status at etcd's request deadline (5 s), long before the client's timeout
        etcd.pause()
        try:
            started = time.monotonic()
            answer = session.get(f"{configmaps}/c1", timeout=60)
            assert time.monotonic() - started < 15 and answer.status_code == 500, (answer.status_code, answer.text)
            assert "request to etcd timed out" in answer.json()["message"], answer.text
        finally:
            etcd.resume()
        assert session.get(f"{configmaps}/c1", timeout=30).status_code == 200
