"""The kube-dns add-on's objects against a real apiserver, as ``kubesvc up`` installs them: the
Service at the DNS IP with k3s's ports and labels (what ``kubectl cluster-info`` prints), and a
ServiceAccount whose RBAC allows what ``kubesvc dns`` reads and nothing more (asked with
``kubectl auth can-i --as``); a second install leaves everything as it was."""

from __future__ import annotations

import asyncio
import json

import pytest

from kubesvc.dns import addon
from tests.support.apiserver import start_apiserver
from tests.support.cluster import api_client

SA = "system:serviceaccount:kube-system:coredns"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = start_apiserver(tmp_path_factory.mktemp("addon") / "api")
    try:
        yield running
    finally:
        running.stop()


def install(server) -> list[str]:
    async def go():
        async with api_client(server) as client:
            return await addon.install(client, "10.96.0.10", "cluster.local")

    return asyncio.run(go())


def test_install_once_then_leave_alone(server):
    first = install(server)
    assert first[:4] == ["serviceaccount/coredns", "clusterrole/system:coredns", "clusterrolebinding/system:coredns", "service/kube-dns"]
    assert first[4] in ("deployment/coredns", "pod/coredns")
    assert install(server) == []
    svc = json.loads(server.kubectl("get", "service", "kube-dns", "-n", "kube-system", "-o", "json").stdout)
    assert svc["spec"]["clusterIP"] == "10.96.0.10"
    assert [(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"), ("metrics", 9153, "TCP")]
    info = server.kubectl("cluster-info").stdout
    assert f"CoreDNS is running at {server.url}/api/v1/namespaces/kube-system/services/kube-dns:dns/proxy" in info, info


@pytest.mark.parametrize("verb, resource, allowed", [
    ("list", "services", "yes"), ("watch", "services", "yes"), ("list", "endpointslices.discovery.k8s.io", "yes"),
    ("watch", "endpointslices.discovery.k8s.io", "yes"), ("list", "namespaces", "yes"), ("watch", "namespaces", "yes"),
    ("get", "services", "no"), ("create", "services", "no"), ("list", "pods", "no"), ("list", "secrets", "no"),
    ("list", "endpoints", "no"), ("update", "endpointslices.discovery.k8s.io", "no"),
])
def test_least_privilege(server, verb, resource, allowed):
    install(server)
    result = server.kubectl("auth", "can-i", verb, resource, "--all-namespaces", f"--as={SA}", check=False)
    assert result.stdout.strip() == allowed, (verb, resource, result.stdout, result.stderr)


def test_the_dns_ip_is_the_tenth_of_the_range():
    assert addon.cluster_dns_ip("10.96.0.0/12") == "10.96.0.10"
    assert addon.cluster_dns_ip("10.43.0.0/16") == "10.43.0.10"
    assert addon.cluster_dns_ip("fd00:10:96::/112") == "fd00:10:96::a"


def test_pods_mode_and_its_grant():
    # k3s's and kubeadm's Corefile say `pods insecure`: nothing to watch; `verified` watches Pods
    def parts(**kwargs):
        made = {obj["kind"]: obj for obj in addon.objects("10.96.0.10", "cluster.local", deployment=True, **kwargs)}
        command = made["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
        granted = {r for rule in made["ClusterRole"]["rules"] for r in rule["resources"]}
        return command[command.index("--pods") + 1], "pods" in granted

    assert parts() == ("insecure", False)
    assert parts(pods="verified") == ("verified", True)
