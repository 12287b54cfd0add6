"""Restarting the apiserver on the same --data-dir keeps every object and its resourceVersion,
and later writes get higher resourceVersions; the kubeconfig written first stays valid."""

from __future__ import annotations

import json


def _services(server) -> dict[str, str]:
    """Services the test made (the apiserver rewrites ``kubernetes`` when its port changes)."""
    out = json.loads(server.kubectl("get", "svc", "-A", "-o", "json").stdout)
    return {f'{i["metadata"]["namespace"]}/{i["metadata"]["name"]}': i["metadata"]["resourceVersion"] for i in out["items"]
            if i["metadata"]["name"] != "kubernetes"}


def test_restart_keeps_objects_and_revisions_increase(fresh_apiserver, tmp_path):
    data_dir = tmp_path / "data"
    first = fresh_apiserver(data_dir=data_dir)
    for i in range(5):
        manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"s{i}"}, "spec": {"ports": [{"port": 80 + i}]}}
        first.kubectl("create", "-f", "-", input=json.dumps(manifest))
    first.kubectl("delete", "svc", "s4")
    before = _services(first)
    kubeconfig = first.kubeconfig.read_text()
    first.stop()

    second = fresh_apiserver(data_dir=data_dir)
    assert second.kubeconfig.read_text().split("server:")[0] == kubeconfig.split("server:")[0]  # same CA and token
    assert _services(second) == before
    assert set(before) == {f"default/s{i}" for i in range(4)}
    manifest = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "after"}, "spec": {"ports": [{"port": 80}]}}
    created = json.loads(second.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(manifest)).stdout)
    assert int(created["metadata"]["resourceVersion"]) > max(int(rv) for rv in before.values())
