"""The real kubectl (1.32 via the dispatcher) against a real ``kubesvc apiserver``.

Covers every command of api-compat.md §8. Each test works in its own namespace so tests share
one server without seeing each other's objects.
"""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import time
import uuid

import pytest
import yaml

WEB = """
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
"""

WEB_CHANGED = """
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, tier: fe}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
"""


@pytest.fixture
def ns(apiserver):
    name = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    return name


def get_json(apiserver, *args):
    return json.loads(apiserver.kubectl("get", *args, "-o", "json").stdout)


def test_version_reports_minor_32_and_dispatcher_runs_1_32(apiserver):
    out = apiserver.kubectl("version", "-o", "json").stdout
    version = json.loads(out)
    assert version["serverVersion"]["minor"] == "32"
    assert version["clientVersion"]["gitVersion"].startswith("v1.32.")


def test_raw_healthz(apiserver):
    assert apiserver.kubectl("get", "--raw", "/healthz").stdout == "ok"


def test_api_resources_lists_every_kind_with_short_names(apiserver):
    out = apiserver.kubectl("api-resources", "--no-headers").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    for resource in ("services", "pods", "nodes", "namespaces", "endpoints", "events", "endpointslices", "ipaddresses", "servicecidrs", "leases"):
        assert resource in rows, out
    assert rows["services"][1] == "svc"
    assert rows["namespaces"][1] == "ns"
    assert rows["endpoints"][1] == "ep"


def test_apply_create_then_configure_with_smp(apiserver, ns):
    first = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    assert first.stdout.strip() == "service/web created"
    second = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB_CHANGED)
    assert second.stdout.strip() == "service/web configured"
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert [p["port"] for p in svc["spec"]["ports"]] == [80, 443]
    assert svc["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    # reverting removes the port through "$patch: delete" and the label through null
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert [p["port"] for p in svc["spec"]["ports"]] == [80]
    assert svc["metadata"]["labels"] == {"app": "web"}
    again = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    assert again.stdout.strip() == "service/web unchanged"


def test_seed_kube_dns_service_reads_back_with_upstream_defaults(apiserver, ns):
    manifest = next(yaml.safe_load_all(open(Path(__file__).resolve().parents[2] / "examples/kube-dns.yaml")))
    manifest["metadata"]["namespace"] = ns
    manifest["spec"].pop("clusterIP")  # the IP itself is the allocation issue's
    apiserver.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    svc = get_json(apiserver, "-n", ns, "svc", "kube-dns")
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["sessionAffinity"] == "None"
    assert spec["internalTrafficPolicy"] == "Cluster"
    assert spec["ports"] == [
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
    ]
    assert spec["selector"] == {"k8s-app": "kube-dns"}
    assert svc["status"] == {"loadBalancer": {}}
    assert svc["metadata"]["uid"] and svc["metadata"]["creationTimestamp"]


def test_server_side_apply_creates_then_updates_and_tracks_fields(apiserver, ns):
    manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ssa", "labels": {"app": "ssa"}},
                "spec": {"selector": {"app": "ssa"}, "ports": [{"name": "http", "port": 80}]}}
    out = apiserver.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(manifest))
    assert out.stdout.strip() == "service/ssa serverside-applied"
    manifest["spec"]["ports"] = [{"name": "http", "port": 8080}]
    apiserver.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(manifest))
    svc = get_json(apiserver, "-n", ns, "svc", "ssa", "--show-managed-fields")
    # the port the manager dropped is gone (the fake server in api-compat.md kept both)
    assert [p["port"] for p in svc["spec"]["ports"]] == [8080]
    managers = {(m["manager"], m["operation"]) for m in svc["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers


def test_server_side_apply_conflict_with_client_side_apply_manager(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    changed = yaml.safe_load(WEB)
    changed["spec"]["ports"][0]["targetPort"] = 9090
    result = apiserver.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(changed), check=False)
    assert result.returncode != 0
    assert "conflict" in result.stderr.lower()
    forced = apiserver.kubectl("apply", "--server-side", "--force-conflicts", "-n", ns, "-f", "-", input=json.dumps(changed))
    assert "serverside-applied" in forced.stdout
    assert get_json(apiserver, "-n", ns, "svc", "web")["spec"]["ports"][0]["targetPort"] == 9090


def test_server_side_apply_treats_a_services_selector_as_one_atomic_value(apiserver, ns):
    """ServiceSpec.selector is ``+mapType=atomic`` upstream: a second field manager applying a
    selector with other keys conflicts on the whole map (not merged key by key), and once
    forced its selector replaces the first manager's, which then owns no part of it."""
    def apply(manager: str, selector: dict, *flags: str, **options):
        manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "sel"}, "spec": {"selector": selector}}
        if manager == "first":
            manifest["spec"]["ports"] = [{"name": "http", "port": 80}]
        return apiserver.kubectl("apply", "--server-side", f"--field-manager={manager}", *flags, "-n", ns, "-f", "-",
                                 input=json.dumps(manifest), **options)

    apply("first", {"app": "web"})
    conflict = apply("second", {"tier": "fe"}, check=False)
    assert conflict.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "first": .spec.selector' in conflict.stderr, conflict.stderr
    apply("second", {"tier": "fe"}, "--force-conflicts")
    svc = get_json(apiserver, "-n", ns, "svc", "sel", "--show-managed-fields")
    assert svc["spec"]["selector"] == {"tier": "fe"}
    fields = {m["manager"]: m["fieldsV1"] for m in svc["metadata"]["managedFields"]}
    assert fields["second"]["f:spec"]["f:selector"] == {}
    assert "f:selector" not in fields["first"]["f:spec"]


def test_create_twice_is_already_exists(apiserver, ns):
    assert apiserver.kubectl("create", "-n", ns, "-f", "-", input=WEB).stdout.strip() == "service/web created"
    again = apiserver.kubectl("create", "-n", ns, "-f", "-", input=WEB, check=False)
    assert again.returncode == 1
    assert 'Error from server (AlreadyExists): error when creating "STDIN": services "web" already exists' in again.stderr


def test_get_columns_wide_all_namespaces_labels_and_sort(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    other = yaml.safe_load(WEB)
    other["metadata"] = {"name": "api", "labels": {"app": "api"}}
    other["spec"]["selector"] = {"app": "api"}
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(other))

    out = apiserver.kubectl("get", "svc", "-n", ns).stdout.splitlines()
    assert out[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert set(rows) == {"web", "api"}
    assert rows["web"][1] == "ClusterIP" and rows["web"][4] == "80/TCP"

    wide = apiserver.kubectl("get", "svc", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "SELECTOR"
    assert any(line.split()[0] == "web" and line.split()[-1] == "app=web" for line in wide[1:])

    everywhere = apiserver.kubectl("get", "svc", "-A", "--show-labels").stdout.splitlines()
    assert everywhere[0].split()[0] == "NAMESPACE" and everywhere[0].split()[-1] == "LABELS"
    assert any(line.split()[:2] == [ns, "web"] and line.split()[-1] == "app=web" for line in everywhere[1:])

    selected = apiserver.kubectl("get", "svc", "-n", ns, "-l", "app in (web),app!=api", "-o", "name").stdout.split()
    assert selected == ["service/web"]

    by_name = apiserver.kubectl("get", "svc", "-n", ns, "--sort-by=.metadata.name", "--no-headers").stdout.splitlines()
    assert [line.split()[0] for line in by_name] == ["api", "web"]


def test_chunked_list_follows_continue(apiserver, ns):
    for i in range(5):
        manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}"}, "spec": {"ports": [{"port": 80}]}}
        apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
    out = apiserver.kubectl("get", "svc", "-n", ns, "--chunk-size=2", "-o", "name").stdout.split()
    assert out == [f"service/s{i}" for i in range(5)]


def test_get_yaml_and_endpointslices(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    doc = yaml.safe_load(apiserver.kubectl("get", "svc", "web", "-n", ns, "-o", "yaml").stdout)
    assert doc["kind"] == "Service" and doc["metadata"]["name"] == "web"
    slice_manifest = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                      "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
                      "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}],
                      "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(slice_manifest))
    out = apiserver.kubectl("get", "endpointslices", "-n", ns).stdout.splitlines()
    assert out[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert out[1].split()[:4] == ["web-abc", "IPv4", "8080", "10.244.0.5"]
    assert any(line.split()[:2] == [ns, "web-abc"] for line in apiserver.kubectl("get", "endpointslices", "-A").stdout.splitlines())

    described = apiserver.kubectl("describe", "svc", "web", "-n", ns).stdout
    assert "Endpoints:" in described and "10.244.0.5:8080" in described
    assert "IP Family Policy:" in described


def test_watch_prints_rows_as_objects_change(apiserver, ns):
    watcher = subprocess.Popen(
        ["kubectl", f"--kubeconfig={apiserver.kubeconfig}", f"--cache-dir={apiserver.cache_dir}", "get", "svc", "-n", ns, "-w",
         "--output-watch-events", "--request-timeout=20s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
        apiserver.kubectl("label", "svc", "web", "-n", ns, "seen=yes")
        apiserver.kubectl("delete", "svc", "web", "-n", ns)
        time.sleep(1.5)
    finally:
        watcher.terminate()
        out, _ = watcher.communicate(timeout=10)
    events = [line.split()[0] for line in out.splitlines()[1:] if line.split()[1:2] == ["web"]]
    assert events == ["ADDED", "MODIFIED", "DELETED"], out


def test_patch_three_ways_and_no_change(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    merge = apiserver.kubectl("patch", "svc", "web", "-n", ns, "--type", "merge", "-p", '{"metadata":{"labels":{"a":"1"}}}')
    assert merge.stdout.strip() == "service/web patched"
    again = apiserver.kubectl("patch", "svc", "web", "-n", ns, "--type", "merge", "-p", '{"metadata":{"labels":{"a":"1"}}}')
    assert again.stdout.strip() == "service/web patched (no change)"
    apiserver.kubectl("patch", "svc", "web", "-n", ns, "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/b","value":"2"}]')
    apiserver.kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"ports":[{"port":9090,"name":"x"}]}}')
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert svc["metadata"]["labels"] == {"app": "web", "a": "1", "b": "2"}
    assert sorted(p["port"] for p in svc["spec"]["ports"]) == [80, 9090]


def test_edit_label_and_status_subresource(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=WEB)
    edited = apiserver.kubectl("edit", "svc", "web", "-n", ns, env={"EDITOR": "sed -i s/sessionAffinity:\\ None/sessionAffinity:\\ ClientIP/"})
    assert edited.stdout.strip() == "service/web edited"
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    apiserver.kubectl("label", "svc", "web", "-n", ns, "tier=x")
    assert get_json(apiserver, "-n", ns, "svc", "web")["metadata"]["labels"]["tier"] == "x"
    apiserver.kubectl("patch", "svc", "web", "-n", ns, "--subresource=status", "--type=merge",
                      "-p", '{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.7"}]}}}')
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert svc["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.7"}]


def test_wait_for_condition_on_node(apiserver):
    name = f"node-{uuid.uuid4().hex[:6]}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    apiserver.kubectl("create", "-f", "-", input=json.dumps(node))
    timed_out = apiserver.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=2s", check=False)
    assert timed_out.returncode != 0 and "timed out" in timed_out.stderr
    apiserver.kubectl("patch", f"node/{name}", "--subresource=status", "--type=merge",
                      "-p", '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"}]}}')
    done = apiserver.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=10s")
    assert done.stdout.strip() == f"node/{name} condition met"
    apiserver.kubectl("delete", "node", name)


def test_delete_waits_for_finalizers(apiserver, ns):
    manifest = yaml.safe_load(WEB)
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
    deleter = subprocess.Popen(["kubectl", f"--kubeconfig={apiserver.kubeconfig}", f"--cache-dir={apiserver.cache_dir}",
                                "delete", "svc", "web", "-n", ns, "--timeout=20s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2)
    assert deleter.poll() is None, "kubectl delete must wait while a finalizer holds the object"
    assert get_json(apiserver, "-n", ns, "svc", "web")["metadata"]["deletionTimestamp"]
    apiserver.kubectl("patch", "svc", "web", "-n", ns, "--type", "json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    out, err = deleter.communicate(timeout=20)
    assert deleter.returncode == 0, err
    assert out.strip() == 'service "web" deleted'
    assert apiserver.kubectl("get", "svc", "web", "-n", ns, check=False).returncode == 1


def test_explain_uses_openapi_v3(apiserver):
    out = apiserver.kubectl("explain", "svc.spec.ports").stdout
    assert "KIND:" in out and "Service" in out
    assert "targetPort" in out and "protocol" in out
    slices = apiserver.kubectl("explain", "endpointslices.endpoints.conditions").stdout
    assert "serving" in slices and "terminating" in slices


def test_create_namespace_and_service_send_protobuf(apiserver):
    name = f"pb-{uuid.uuid4().hex[:6]}"
    assert apiserver.kubectl("create", "namespace", name).stdout.strip() == f"namespace/{name} created"
    out = apiserver.kubectl("create", "service", "clusterip", "cs1", "--tcp=80:8080", "-n", name).stdout.strip()
    assert out == "service/cs1 created"
    svc = get_json(apiserver, "-n", name, "svc", "cs1")
    assert svc["spec"]["ports"] == [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert svc["spec"]["selector"] == {"app": "cs1"}


def test_bad_manifest_prints_invalid_bullets(apiserver, ns):
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "Bad_Name"}, "spec": {"ports": [{"port": 70000}]}}
    result = apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode == 1
    assert 'The Service "Bad_Name" is invalid: ' in result.stderr
    assert "* metadata.name: Invalid value: \"Bad_Name\": a DNS-1035 label must consist of lower case alphanumeric characters" in result.stderr
    assert "* spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive" in result.stderr
    noports = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "noports"}, "spec": {}}
    result = apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(noports), check=False)
    assert 'The Service "noports" is invalid: spec.ports: Required value' in result.stderr


def test_unknown_field_is_rejected_by_strict_validation(apiserver, ns):
    bad = yaml.safe_load(WEB)
    bad["spec"]["bogusField"] = 1
    result = apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert result.returncode == 1
    assert 'strict decoding error: unknown field "spec.bogusField"' in result.stderr


def test_apply_of_a_kind_list_creates_each_item(apiserver, ns):
    """kubectl validates a ``kind: List`` itself against ``/openapi/v2`` (gnostic protobuf), then
    applies each item; the server must serve that document (a 404 failed the whole apply)."""
    items = yaml.safe_load(WEB), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "listed"}, "data": {"k": "v"}}
    document = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(items)})
    result = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=document)
    assert result.stdout.splitlines() == ["service/web created", "configmap/listed created"]
    assert get_json(apiserver, "configmap", "listed", "-n", ns)["data"] == {"k": "v"}


def test_a_kind_list_item_with_an_unknown_field_is_refused_by_kubectl(apiserver, ns):
    """The item is checked against the v2 definitions: kubectl's own message, nothing created."""
    bad = yaml.safe_load(WEB)
    bad["spec"]["bogus"] = 1
    result = apiserver.kubectl("apply", "-n", ns, "-f", "-", check=False,
                               input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [bad]}))
    assert result.returncode == 1
    assert ('error validating data: ValidationError(Service.spec): unknown field "bogus" in io.k8s.api.core.v1.ServiceSpec'
            in result.stderr), result.stderr
    assert apiserver.kubectl("get", "svc", "web", "-n", ns, check=False).returncode == 1


def test_delete_namespace_deletes_its_objects(apiserver):
    name = f"gone-{uuid.uuid4().hex[:6]}"
    apiserver.kubectl("create", "namespace", name)
    apiserver.kubectl("apply", "-n", name, "-f", "-", input=WEB)
    assert apiserver.kubectl("delete", "namespace", name, "--timeout=30s").stdout.strip() == f'namespace "{name}" deleted'
    assert apiserver.kubectl("get", "namespace", name, check=False).returncode == 1
    missing = apiserver.kubectl("apply", "-n", name, "-f", "-", input=WEB, check=False)
    assert missing.returncode == 1 and f'namespaces "{name}" not found' in missing.stderr


def test_metrics_count_requests_by_resource_and_code(apiserver, ns):
    apiserver.kubectl("get", "svc", "-n", ns)
    apiserver.kubectl("get", "svc", "missing", "-n", ns, check=False)
    metrics = apiserver.kubectl("get", "--raw", "/metrics").stdout
    lines = [line for line in metrics.splitlines() if line.startswith("apiserver_request_total{") and 'resource="services"' in line]
    assert any('verb="GET"' in line and 'code="200"' in line for line in lines), lines
    assert any('verb="GET"' in line and 'code="404"' in line for line in lines), lines
