"""Service ClusterIP and NodePort allocation, seen through the API exactly as a user sees it.

Real ``kubesvc apiserver`` subprocesses on 127.0.0.1, driven with the real kubectl, the official
``kubernetes`` Python client, and aiohttp for truly parallel requests. Expected texts are
upstream's (kube-apiserver with the IPAddress allocator, ``pkg/registry/core/service/storage/
alloc.go``, ``ipallocator``, ``portallocator``; kubectl's ``StandardErrorMessage``), see
/work/shared/reference/control-plane.md §1-§4:

* ``10.96.0.0/24``: static band 10.96.0.1-.16 (``kubernetes`` holds .1), dynamic band
  10.96.0.17-.254 (238 slots) used first; when everything is taken, create is 500
  ``Internal error occurred: failed to allocate a serviceIP: range is full``.
* a taken user-chosen IP / nodePort is 422 ``spec.clusterIPs: Invalid value: ["10.96.0.10"]:
  failed to allocate IP 10.96.0.10: provided IP is already allocated`` /
  ``spec.ports[0].nodePort: Invalid value: 30500: provided port is already allocated``.
* default NodePort range 30000-32767: static band 30000-30085, dynamic band 30086-32767.

Servers are shared between tests where sharing cannot hide a bug (each test works in its own
namespace); the tests that count everything in a server get a private one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from pathlib import Path
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import aiohttp
import pytest
import requests
import requests.adapters
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.support.apiserver import RunningAPIServer, start_apiserver

IPV4_16 = ("--service-cluster-ip-range", "10.96.0.0/16")
IP_ALREADY_ALLOCATED = "failed to allocate IP {ip}: provided IP is already allocated"
RANGE_FULL = "Internal error occurred: failed to allocate a serviceIP: range is full"
REPAIR_REASONS = {"ClusterIPNotAllocated", "ClusterIPAlreadyAllocated", "ClusterIPOutOfRange", "IPAddressNotAllocated",
                  "IPAddressWrongReference", "PortNotAllocated", "PortAlreadyAllocated", "PortOutOfRange"}


# ---- helpers ------------------------------------------------------------------------------------

def service(name: str, *, cluster_ip: str | None = None, type_: str | None = None, node_port: int | None = None,
            namespace: str | None = None, **spec) -> dict:
    port = {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
    if node_port is not None:
        port["nodePort"] = node_port
    body = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [port], **spec}}
    if namespace:
        body["metadata"]["namespace"] = namespace
    if cluster_ip is not None:
        body["spec"]["clusterIP"] = cluster_ip
    if type_ is not None:
        body["spec"]["type"] = type_
    return body


def parallel(server: RunningAPIServer, calls: list[tuple[str, str, dict | None]]) -> list[tuple[int, dict]]:
    """Send every (method, path, body) at once, each on its own connection; (status, JSON body) in order."""
    async def main():
        connector = aiohttp.TCPConnector(ssl=server.tls_context(), limit=len(calls) or 1)  # as the admin (client certificate)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(trust_env=False, connector=connector, timeout=timeout) as session:
            async def one(method, path, body):
                async with session.request(method, server.url + path, json=body) as resp:
                    return resp.status, await resp.json(content_type=None)
            return await asyncio.gather(*(one(*c) for c in calls))
    return asyncio.run(main())


def create_services(server: RunningAPIServer, namespace: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    return parallel(server, [("POST", f"/api/v1/namespaces/{namespace}/services", b) for b in bodies])


def http(server: RunningAPIServer, connections: int = 10) -> requests.Session:
    session = server.session()
    session.mount("https://", requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=connections))
    return session


def new_namespace(server: RunningAPIServer, prefix: str = "alloc") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    server.kubectl("create", "namespace", name)
    return name


def get_json(server: RunningAPIServer, *args: str) -> dict:
    return json.loads(server.kubectl("get", *args, "-o", "json").stdout)


def services_in(server: RunningAPIServer, namespace: str | None = None) -> list[dict]:
    return get_json(server, "services", *(["-n", namespace] if namespace else ["-A"]))["items"]


def ip_addresses(server: RunningAPIServer) -> dict[str, dict]:
    return {i["metadata"]["name"]: i for i in get_json(server, "ipaddresses")["items"]}


def parent(ip_address: dict) -> tuple[str, str, str, str]:
    ref = ip_address["spec"]["parentRef"]
    return ref.get("group", ""), ref["resource"], ref.get("namespace", ""), ref["name"]


def metrics(server: RunningAPIServer) -> dict[str, float]:
    """``name{labels}`` -> value for every sample of /metrics (label order as exposed)."""
    text = http(server).get(server.url + "/metrics", timeout=30).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def ipv4_range(first: str, last: str) -> set[str]:
    a, b = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last))
    return {str(ipaddress.ip_address(i)) for i in range(a, b + 1)}


def python_client(server: RunningAPIServer) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(server.kubeconfig)))


# ---- shared servers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server16(tmp_path_factory):
    """One single-stack server on 10.96.0.0/16 shared by the tests that only look at their own namespace."""
    server = start_apiserver(tmp_path_factory.mktemp("alloc16"), *IPV4_16)
    yield server
    server.stop()


# ---- 1. the worked example on a /24 -------------------------------------------------------------

def test_slash24_upper_band_first_then_lower_band_then_range_is_full(fresh_apiserver):
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/24")
    ns = new_namespace(server)
    assert get_json(server, "svc", "kubernetes", "-n", "default")["spec"]["clusterIP"] == "10.96.0.1"

    # 238 dynamic creates, all at once: exactly the dynamic band 10.96.0.17-10.96.0.254.
    upper = create_services(server, ns, [service(f"u{i}") for i in range(238)])
    assert [status for status, _ in upper] == [201] * 238, {s: b.get("message") for s, b in upper if s != 201}
    upper_ips = [body["spec"]["clusterIP"] for _, body in upper]
    assert set(upper_ips) == ipv4_range("10.96.0.17", "10.96.0.254")
    assert len(set(upper_ips)) == 238

    # Only now the static band, minus the kubernetes Service's 10.96.0.1: 10.96.0.2-10.96.0.16.
    lower = create_services(server, ns, [service(f"l{i}") for i in range(15)])
    assert [status for status, _ in lower] == [201] * 15, {s: b.get("message") for s, b in lower if s != 201}
    assert {body["spec"]["clusterIP"] for _, body in lower} == ipv4_range("10.96.0.2", "10.96.0.16")

    # Full: 500 InternalError, as kubectl and the Python client show it.
    result = server.kubectl("create", "-f", "-", input=json.dumps(service("one-too-many")), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == f'Error from server (InternalError): error when creating "STDIN": {RANGE_FULL}'
    with pytest.raises(ApiException) as full:
        python_client(server).create_namespaced_service(ns, service("one-more"))
    body = json.loads(full.value.body)
    assert full.value.status == 500
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "InternalError", 500)
    assert body["message"] == RANGE_FULL

    # Every IP is an IPAddress pointing at its Service; the failed creates left nothing behind.
    names = {body["spec"]["clusterIP"]: body["metadata"]["name"] for _, body in upper + lower}
    objects = ip_addresses(server)
    assert set(objects) == ipv4_range("10.96.0.1", "10.96.0.254")
    assert parent(objects["10.96.0.1"]) == ("", "services", "default", "kubernetes")
    for ip, name in names.items():
        assert parent(objects[ip]) == ("", "services", ns, name)
    assert {s["metadata"]["name"] for s in services_in(server, ns)} == set(names.values())

    # Deleting one frees exactly its IP, and the next dynamic create gets it (nothing else is free).
    server.kubectl("delete", "svc", "u7", "-n", ns)
    again = create_services(server, ns, [service("again")])
    assert again[0][0] == 201 and again[0][1]["spec"]["clusterIP"] == upper_ips[7]


def test_static_subrange_feature_gate_off_makes_one_shared_pool(fresh_apiserver):
    """ServiceIPStaticSubrange=false: a /27 (offset 16 with the gate on) is one pool, so
    dynamic IPs come from anywhere. With the gate on the first 14 dynamic Services would all
    be in .17-.30; off, all 14 landing there has probability below 1e-4 (each random start
    is in the upper half less than half the time)."""
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/27", "--feature-gates", "ServiceIPStaticSubrange=false")
    ns = new_namespace(server)
    ips = []
    for i in range(14):
        [(status, body)] = create_services(server, ns, [service(f"s{i}")])
        assert status == 201
        ips.append(body["spec"]["clusterIP"])
    assert not set(ips) <= ipv4_range("10.96.0.17", "10.96.0.30")
    assert set(ips) & ipv4_range("10.96.0.2", "10.96.0.16")


def test_range_full_status_carries_its_cause_like_upstream(fresh_apiserver):
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/29")  # 6 usable IPs, kubernetes holds one
    ns = new_namespace(server)
    results = create_services(server, ns, [service(f"s{i}") for i in range(6)])
    assert sorted(status for status, _ in results) == [201] * 5 + [500]
    body = next(body for status, body in results if status == 500)
    assert body["message"] == RANGE_FULL
    assert body["details"] == {"causes": [{"message": "failed to allocate a serviceIP: range is full"}]}


# ---- 2. a static IP in the lower band, conflicts, and what kubectl lists --------------------------

def test_kube_dns_static_ip_after_many_dynamic_creates_and_conflicts(server16):
    ns = new_namespace(server16)
    created = create_services(server16, ns, [service(f"d{i}") for i in range(300)])
    assert [status for status, _ in created] == [201] * 300, {s: b.get("message") for s, b in created if s != 201}
    dynamic = {body["spec"]["clusterIP"]: body["metadata"]["name"] for _, body in created}
    assert len(dynamic) == 300
    # /16: offset 256, so dynamic allocation never touches 10.96.0.1-10.96.1.0.
    static_band = ipv4_range("10.96.0.1", "10.96.1.0")
    assert not set(dynamic) & static_band

    result = server16.kubectl("apply", "-f", str(Path(__file__).resolve().parents[2] / "examples/kube-dns.yaml"))
    assert result.stdout.splitlines() == ["service/kube-dns created"]
    dns = get_json(server16, "svc", "kube-dns", "-n", "kube-system")
    assert dns["spec"]["clusterIP"] == "10.96.0.10" and dns["spec"]["clusterIPs"] == ["10.96.0.10"]
    assert [p["name"] for p in dns["spec"]["ports"]] == ["dns", "dns-tcp"]

    dns2 = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns2", "namespace": ns},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}}
    expected = ('The Service "dns2" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: '
                + IP_ALREADY_ALLOCATED.format(ip="10.96.0.10"))
    for verb in ("create", "apply"):
        result = server16.kubectl(verb, "-f", "-", input=json.dumps(dns2), check=False)
        assert result.returncode == 1
        assert result.stderr.strip() == expected
    # The same through the Python client: 422 Invalid with one cause.
    with pytest.raises(ApiException) as taken:
        python_client(server16).create_namespaced_service(ns, dns2)
    body = json.loads(taken.value.body)
    assert taken.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == expected.removeprefix("The ")
    assert body["details"] == {"name": "dns2", "kind": "Service", "causes": [{
        "reason": "FieldValueInvalid", "field": "spec.clusterIPs",
        "message": 'Invalid value: ["10.96.0.10"]: ' + IP_ALREADY_ALLOCATED.format(ip="10.96.0.10")}]}
    assert server16.kubectl("get", "svc", "dns2", "-n", ns, check=False).returncode == 1

    # A free static IP anywhere in range is accepted, the next one in the lower band too.
    ok = server16.kubectl("create", "-f", "-", "-o", "json", input=json.dumps({**dns2, "spec": {**dns2["spec"], "clusterIP": "10.96.0.11"}}))
    assert json.loads(ok.stdout)["spec"]["clusterIPs"] == ["10.96.0.11"]

    # kubectl get servicecidrs,ipaddresses: the default ServiceCIDR and every IP with its parent.
    listing = server16.kubectl("get", "servicecidrs,ipaddresses").stdout
    assert re.search(r"^NAME\s+CIDRS\s+AGE$", listing, re.M)
    assert re.search(r"^servicecidr\.networking\.k8s\.io/kubernetes\s+10\.96\.0\.0/16\s+\S+$", listing, re.M)
    assert re.search(r"^NAME\s+PARENTREF$", listing, re.M)
    rows = dict(re.findall(r"^ipaddress\.networking\.k8s\.io/(\S+)\s+(\S+)$", listing, re.M))
    assert rows["10.96.0.1"] == "services/default/kubernetes"
    assert rows["10.96.0.10"] == "services/kube-system/kube-dns"
    assert rows["10.96.0.11"] == f"services/{ns}/dns2"
    for ip, name in dynamic.items():
        assert rows[ip] == f"services/{ns}/{name}"

    one = server16.kubectl("get", "ipaddress", "10.96.0.1").stdout.splitlines()
    assert [line.split() for line in one] == [["NAME", "PARENTREF"], ["10.96.0.1", "services/default/kubernetes"]]
    obj = get_json(server16, "ipaddress", "10.96.0.10")
    assert obj["apiVersion"] == "networking.k8s.io/v1" and obj["kind"] == "IPAddress"
    assert obj["metadata"]["labels"] == {"ipaddress.kubernetes.io/ip-family": "IPv4",
                                         "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
    assert obj["spec"]["parentRef"] == {"group": "", "resource": "services", "namespace": "kube-system", "name": "kube-dns"}
    cidr = get_json(server16, "servicecidr", "kubernetes")
    assert cidr["spec"]["cidrs"] == ["10.96.0.0/16"]


@pytest.mark.parametrize("name, ip", [("outside", "10.97.0.10"), ("network", "10.96.0.0"), ("broadcast", "10.96.255.255")],
                         ids=["outside", "network", "broadcast"])
def test_cluster_ip_outside_the_range_is_422(server16, name, ip):
    """Upstream's IPAddress allocator (MetaAllocator.getAllocator) answers ErrMismatchedNetwork when no
    ServiceCIDR contains the IP; the network and the IPv4 broadcast address are not contained either."""
    ns = new_namespace(server16)
    body = service(name, cluster_ip=ip, namespace=ns)
    result = server16.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f'The Service "{name}" is invalid: spec.clusterIPs: Invalid value: ["{ip}"]: '
        f"failed to allocate IP {ip}: the provided network does not match the current range")


# ---- 3. concurrency through HTTP ----------------------------------------------------------------

def test_parallel_dynamic_creates_get_distinct_ips_with_matching_ipaddresses(server16):
    ns = new_namespace(server16)
    results = create_services(server16, ns, [service(f"p{i}") for i in range(200)])
    assert [status for status, _ in results] == [201] * 200, {s: b.get("message") for s, b in results if s != 201}
    by_ip = {body["spec"]["clusterIP"]: body["metadata"]["name"] for _, body in results}
    assert len(by_ip) == 200
    for _, body in results:
        assert body["spec"]["clusterIPs"] == [body["spec"]["clusterIP"]]
        assert ipaddress.ip_address(body["spec"]["clusterIP"]) in ipaddress.ip_network("10.96.0.0/16")
    mine = {ip: obj for ip, obj in ip_addresses(server16).items() if obj["spec"]["parentRef"].get("namespace") == ns}
    assert set(mine) == set(by_ip)
    for ip, obj in mine.items():
        assert parent(obj) == ("", "services", ns, by_ip[ip])
    # What is stored is what the creates answered.
    assert {s["spec"]["clusterIP"]: s["metadata"]["name"] for s in services_in(server16, ns)} == by_ip


def test_parallel_creates_of_the_same_cluster_ip_have_one_winner(server16):
    ns = new_namespace(server16)
    ip = "10.96.0.77"
    results = create_services(server16, ns, [service(f"same{i}", cluster_ip=ip) for i in range(50)])
    winners = [body for status, body in results if status == 201]
    losers = [(i, body) for i, (status, body) in enumerate(results) if status != 201]
    assert len(winners) == 1 and len(losers) == 49, sorted({s for s, _ in results})
    assert winners[0]["spec"]["clusterIPs"] == [ip]
    for i, body in losers:
        assert body["code"] == 422 and body["reason"] == "Invalid"
        assert body["message"] == (f'Service "same{i}" is invalid: spec.clusterIPs: Invalid value: ["{ip}"]: '
                                   + IP_ALREADY_ALLOCATED.format(ip=ip))
    assert [s["metadata"]["name"] for s in services_in(server16, ns)] == [winners[0]["metadata"]["name"]]
    assert parent(ip_addresses(server16)[ip]) == ("", "services", ns, winners[0]["metadata"]["name"])


def test_parallel_creates_of_the_same_node_port_have_one_winner(server16):
    ns = new_namespace(server16)
    results = create_services(server16, ns, [service(f"np{i}", type_="NodePort", node_port=30500) for i in range(50)])
    winners = [body for status, body in results if status == 201]
    losers = [(i, body) for i, (status, body) in enumerate(results) if status != 201]
    assert len(winners) == 1 and len(losers) == 49, sorted({s for s, _ in results})
    assert winners[0]["spec"]["ports"][0]["nodePort"] == 30500
    for i, body in losers:
        assert body["code"] == 422 and body["reason"] == "Invalid"
        assert body["message"] == (f'Service "np{i}" is invalid: spec.ports[0].nodePort: Invalid value: 30500: '
                                   "provided port is already allocated")
    stored = services_in(server16, ns)
    assert [s["metadata"]["name"] for s in stored] == [winners[0]["metadata"]["name"]]
    # None of the losers kept an IP: only the winner's IP belongs to this namespace.
    mine = [ip for ip, obj in ip_addresses(server16).items() if obj["spec"]["parentRef"].get("namespace") == ns]
    assert mine == [stored[0]["spec"]["clusterIP"]]
    # kubectl shows the same 422.
    result = server16.kubectl("create", "-f", "-", "-n", ns, input=json.dumps(service("late", type_="NodePort", node_port=30500)), check=False)
    assert result.stderr.strip() == ('The Service "late" is invalid: spec.ports[0].nodePort: Invalid value: 30500: '
                                     "provided port is already allocated")


def test_parallel_dynamic_node_ports_are_distinct_and_in_the_upper_band(server16):
    ns = new_namespace(server16)
    results = create_services(server16, ns, [service(f"dyn{i}", type_="NodePort") for i in range(100)])
    assert [status for status, _ in results] == [201] * 100, {s: b.get("message") for s, b in results if s != 201}
    ports = [body["spec"]["ports"][0]["nodePort"] for _, body in results]
    assert len(set(ports)) == 100
    assert all(30086 <= p <= 32767 for p in ports), sorted(p for p in ports if not 30086 <= p <= 32767)
    stored = {s["metadata"]["name"]: s["spec"]["ports"][0]["nodePort"] for s in services_in(server16, ns)}
    assert stored == {body["metadata"]["name"]: body["spec"]["ports"][0]["nodePort"] for _, body in results}


# ---- 4. dual-stack ------------------------------------------------------------------------------

def test_dual_stack_families_and_policies(fresh_apiserver, server16):
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/16,fd00:10:96::/112")
    ns = new_namespace(server)
    v4, v6 = ipaddress.ip_network("10.96.0.0/16"), ipaddress.ip_network("fd00:10:96::/112")
    bodies = [
        service("prefer", ipFamilyPolicy="PreferDualStack"),
        service("require6", ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6"]),
        service("single"),
        service("single6", ipFamilyPolicy="SingleStack", ipFamilies=["IPv6"]),
    ]
    results = {body["metadata"]["name"]: (status, body) for status, body in create_services(server, ns, bodies)}
    assert {name: status for name, (status, _) in results.items()} == dict.fromkeys(results, 201), results

    prefer = results["prefer"][1]["spec"]
    assert prefer["ipFamilyPolicy"] == "PreferDualStack" and prefer["ipFamilies"] == ["IPv4", "IPv6"]
    assert len(prefer["clusterIPs"]) == 2 and prefer["clusterIP"] == prefer["clusterIPs"][0]
    assert ipaddress.ip_address(prefer["clusterIPs"][0]) in v4 and ipaddress.ip_address(prefer["clusterIPs"][1]) in v6

    require6 = results["require6"][1]["spec"]
    assert require6["ipFamilyPolicy"] == "RequireDualStack" and require6["ipFamilies"] == ["IPv6", "IPv4"]
    assert ipaddress.ip_address(require6["clusterIPs"][0]) in v6 and ipaddress.ip_address(require6["clusterIPs"][1]) in v4
    assert require6["clusterIP"] == require6["clusterIPs"][0]

    single = results["single"][1]["spec"]
    assert single["ipFamilyPolicy"] == "SingleStack" and single["ipFamilies"] == ["IPv4"]
    assert len(single["clusterIPs"]) == 1 and ipaddress.ip_address(single["clusterIP"]) in v4
    single6 = results["single6"][1]["spec"]
    assert single6["ipFamilies"] == ["IPv6"] and len(single6["clusterIPs"]) == 1
    assert ipaddress.ip_address(single6["clusterIP"]) in v6
    # IPv6 dynamic IPs also come from the upper band (/112: offset 256).
    for ip in (prefer["clusterIPs"][1], require6["clusterIPs"][0], single6["clusterIP"]):
        assert int(ipaddress.ip_address(ip)) - int(v6.network_address) > 256

    # Each IP is an IPAddress of the right family pointing at its Service.
    objects = ip_addresses(server)
    for name, (_, body) in results.items():
        for ip in body["spec"]["clusterIPs"]:
            obj = objects[ip]
            assert parent(obj) == ("", "services", ns, name)
            family = "IPv6" if ":" in ip else "IPv4"
            assert obj["metadata"]["labels"]["ipaddress.kubernetes.io/ip-family"] == family
    assert get_json(server, "servicecidr", "kubernetes")["spec"]["cidrs"] == ["10.96.0.0/16", "fd00:10:96::/112"]
    kubernetes = get_json(server, "svc", "kubernetes", "-n", "default")["spec"]
    assert kubernetes["clusterIPs"] == ["10.96.0.1"] and kubernetes["ipFamilyPolicy"] == "SingleStack"

    # The same PreferDualStack on a single-stack server stays single; RequireDualStack is refused.
    ns16 = new_namespace(server16)
    single_stack = create_services(server16, ns16, [service("prefer", ipFamilyPolicy="PreferDualStack")])
    assert single_stack[0][0] == 201
    assert single_stack[0][1]["spec"]["ipFamilies"] == ["IPv4"] and len(single_stack[0][1]["spec"]["clusterIPs"]) == 1
    result = server16.kubectl("create", "-n", ns16, "-f", "-", input=json.dumps(service("rds", ipFamilyPolicy="RequireDualStack")), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == ('The Service "rds" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": '
                                     "this cluster is not configured for dual-stack services")


# ---- 4b. a ServiceCIDR added and deleted at run time ---------------------------------------------

def test_service_cidr_extends_the_range_and_its_deletion_waits_for_its_ips(fresh_apiserver):
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/28")  # 14 IPs, kubernetes holds one
    ns = new_namespace(server)
    user_cidr = {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "user"},
                 "spec": {"cidrs": ["10.97.0.0/28"]}}
    server.kubectl("create", "-f", "-", input=json.dumps(user_cidr))
    server.kubectl("wait", "--for=condition=Ready", "servicecidr/user", "--timeout=10s")
    assert get_json(server, "servicecidr", "user")["metadata"]["finalizers"] == ["networking.k8s.io/service-cidr-finalizer"]

    # the default range first (13 free), then the new one
    filled = create_services(server, ns, [service(f"s{i}") for i in range(13)])
    assert all(status == 201 for status, _ in filled)
    assert {body["spec"]["clusterIP"] for _, body in filled} == ipv4_range("10.96.0.2", "10.96.0.14")
    [(status, overflow)] = create_services(server, ns, [service("overflow")])
    assert status == 201 and overflow["spec"]["clusterIP"] in ipv4_range("10.97.0.1", "10.97.0.14")
    assert parent(ip_addresses(server)[overflow["spec"]["clusterIP"]]) == ("", "services", ns, "overflow")

    # deleting it while an IP is in use: it stays, Terminating, and serves no more Services
    server.kubectl("delete", "servicecidr", "user", "--wait=false")
    server.kubectl("wait", "--for=condition=Ready=false", "servicecidr/user", "--timeout=10s")
    condition = next(c for c in get_json(server, "servicecidr", "user")["status"]["conditions"] if c["type"] == "Ready")
    assert (condition["reason"], condition["message"]) == (
        "Terminating", "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR")
    [(status, body)] = create_services(server, ns, [service("after")])
    assert (status, body["message"]) == (500, RANGE_FULL)

    # once the Service holding its IP goes, so does the ServiceCIDR (after its 10 s grace)
    server.kubectl("delete", "svc", "overflow", "-n", ns)
    server.kubectl("wait", "--for=delete", "servicecidr/user", "--timeout=30s")
    assert "user" not in {c["metadata"]["name"] for c in get_json(server, "servicecidrs")["items"]}


# ---- 5. type changes with kubectl patch ---------------------------------------------------------

def test_type_changes_allocate_and_release(server16):
    ns = new_namespace(server16)
    kubectl = server16.kubectl
    kubectl("create", "service", "clusterip", "web", "--tcp=80:8080", "-n", ns)
    ip = get_json(server16, "svc", "web", "-n", ns)["spec"]["clusterIP"]

    # ClusterIP -> NodePort allocates a nodePort (dynamic band) and keeps the IP.
    kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"type":"NodePort"}}')
    spec = get_json(server16, "svc", "web", "-n", ns)["spec"]
    node_port = spec["ports"][0]["nodePort"]
    assert spec["type"] == "NodePort" and spec["clusterIP"] == ip and 30086 <= node_port <= 32767
    # Nobody else can take it now.
    taken = kubectl("create", "-n", ns, "-f", "-", input=json.dumps(service("thief", type_="NodePort", node_port=node_port)), check=False)
    assert taken.stderr.strip() == (f'The Service "thief" is invalid: spec.ports[0].nodePort: Invalid value: {node_port}: '
                                    "provided port is already allocated")

    # NodePort -> ClusterIP drops and releases it: another Service can take that very port at once.
    kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"type":"ClusterIP"}}')
    spec = get_json(server16, "svc", "web", "-n", ns)["spec"]
    assert spec["type"] == "ClusterIP" and "nodePort" not in spec["ports"][0] and spec["clusterIP"] == ip
    reuse = json.loads(kubectl("create", "-n", ns, "-f", "-", "-o", "json",
                               input=json.dumps(service("reuse", type_="NodePort", node_port=node_port))).stdout)
    assert reuse["spec"]["ports"][0]["nodePort"] == node_port

    # The clusterIP of an existing Service cannot change.
    changed = kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"clusterIP":"10.96.5.5"}}', check=False)
    assert changed.returncode == 1
    assert changed.stderr.strip() == ('The Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["10.96.5.5"]: '
                                      "may not change once set")
    assert get_json(server16, "svc", "web", "-n", ns)["spec"]["clusterIP"] == ip
    assert "10.96.5.5" not in ip_addresses(server16)

    # ClusterIP -> ExternalName: externalName is required ...
    missing = kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"type":"ExternalName"}}', check=False)
    assert missing.stderr.strip() == 'The Service "web" is invalid: spec.externalName: Required value'
    # ... and with it the server drops clusterIP(s)/ipFamilies/ipFamilyPolicy itself and releases the IP.
    kubectl("patch", "svc", "web", "-n", ns, "-p", '{"spec":{"type":"ExternalName","externalName":"db.example.com"}}')
    spec = get_json(server16, "svc", "web", "-n", ns)["spec"]
    assert spec["type"] == "ExternalName" and spec["externalName"] == "db.example.com"
    for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        assert field not in spec, spec
    assert ip not in ip_addresses(server16)
    assert kubectl("get", "ipaddress", ip, check=False).stderr.strip() == f'Error from server (NotFound): ipaddresses.networking.k8s.io "{ip}" not found'
    # The released IP is free for a user who asks for it.
    reclaimed = json.loads(kubectl("create", "-n", ns, "-f", "-", "-o", "json", input=json.dumps(service("reclaim", cluster_ip=ip))).stdout)
    assert reclaimed["spec"]["clusterIP"] == ip

    # ExternalName -> ClusterIP allocates a fresh IP.
    kubectl("patch", "svc", "web", "-n", ns, "--type=merge", "-p", '{"spec":{"type":"ClusterIP","externalName":null}}')
    spec = get_json(server16, "svc", "web", "-n", ns)["spec"]
    assert spec["type"] == "ClusterIP" and spec["clusterIP"] not in ("", None, ip)
    assert parent(ip_addresses(server16)[spec["clusterIP"]]) == ("", "services", ns, "web")


def test_type_change_to_external_name_clearing_cluster_ip_the_legacy_way(server16):
    """The pre-1.20 recipe (clear clusterIP in the same patch) still works: IP released."""
    ns = new_namespace(server16)
    server16.kubectl("create", "service", "clusterip", "old", "--tcp=80:8080", "-n", ns)
    ip = get_json(server16, "svc", "old", "-n", ns)["spec"]["clusterIP"]
    server16.kubectl("patch", "svc", "old", "-n", ns, "-p", '{"spec":{"type":"ExternalName","externalName":"db.example.com","clusterIP":""}}')
    spec = get_json(server16, "svc", "old", "-n", ns)["spec"]
    assert spec["type"] == "ExternalName" and not spec.get("clusterIP") and not spec.get("clusterIPs")
    assert ip not in ip_addresses(server16)


def test_cleared_cluster_ip_is_omitted_like_upstream(server16):
    ns = new_namespace(server16)
    server16.kubectl("create", "service", "clusterip", "old", "--tcp=80:8080", "-n", ns)
    server16.kubectl("patch", "svc", "old", "-n", ns, "-p", '{"spec":{"type":"ExternalName","externalName":"db.example.com","clusterIP":""}}')
    spec = get_json(server16, "svc", "old", "-n", ns)["spec"]
    assert "clusterIP" not in spec, spec


# ---- 6. the kubernetes Service ------------------------------------------------------------------

def test_kubernetes_service(server16):
    svc = get_json(server16, "svc", "kubernetes", "-n", "default")
    port = urlparse(server16.url).port
    assert svc["metadata"]["labels"] == {"provider": "kubernetes", "component": "apiserver"}
    spec = svc["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["clusterIP"] == "10.96.0.1" and spec["clusterIPs"] == ["10.96.0.1"]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]
    assert not spec.get("selector")
    row = server16.kubectl("get", "svc", "kubernetes", "-n", "default").stdout.splitlines()[1].split()
    assert row[:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    assert parent(ip_addresses(server16)["10.96.0.1"]) == ("", "services", "default", "kubernetes")


# ---- 7. metrics ---------------------------------------------------------------------------------

def test_allocator_metrics(fresh_apiserver):
    server = fresh_apiserver("--service-cluster-ip-range", "10.96.0.0/24")
    ns = new_namespace(server)
    cidr = '"10.96.0.0/24"'
    bodies = ([service(f"dyn{i}") for i in range(20)] + [service(f"st{i}", cluster_ip=f"10.96.0.{2 + i}") for i in range(5)]
              + [service(f"np{i}", type_="NodePort") for i in range(3)] + [service("npst", type_="NodePort", node_port=30010)]
              + [service("headless", cluster_ip="None"), service("ext", type_="ExternalName", externalName="a.example.com")])
    results = create_services(server, ns, bodies)
    assert [s for s, _ in results] == [201] * len(bodies), [b.get("message") for s, b in results if s != 201]
    # Failures: a taken static IP, a taken static nodePort.
    errors = create_services(server, ns, [service("dup", cluster_ip="10.96.0.2"), service("dupnp", type_="NodePort", node_port=30010)])
    assert [s for s, _ in errors] == [422, 422]
    server.kubectl("delete", "svc", "dyn0", "np0", "-n", ns)

    m = metrics(server)
    holding = [s for s in services_in(server) if s["spec"].get("clusterIP") not in (None, "", "None")]
    assert len(holding) == 1 + 20 + 5 + 4 - 2  # kubernetes + dynamic + static + NodePort - deleted
    assert m[f"kube_apiserver_clusterip_allocator_allocated_ips{{cidr={cidr}}}"] == len(holding)
    assert m[f"kube_apiserver_clusterip_allocator_available_ips{{cidr={cidr}}}"] == 254 - len(holding)
    # kubernetes (10.96.0.1) and the 5 explicit ones are static; 20 + 4 NodePort Services are dynamic, plus
    # "dupnp", whose IP was allocated before its nodePort failed (then released: a counter never goes down).
    assert m[f'kube_apiserver_clusterip_allocator_allocation_total{{cidr={cidr},scope="static"}}'] == 1 + 5
    assert m[f'kube_apiserver_clusterip_allocator_allocation_total{{cidr={cidr},scope="dynamic"}}'] == 20 + 4 + 1
    assert m[f'kube_apiserver_clusterip_allocator_allocation_errors_total{{cidr={cidr},scope="static"}}'] == 1
    assert m.get(f'kube_apiserver_clusterip_allocator_allocation_errors_total{{cidr={cidr},scope="dynamic"}}', 0) == 0
    assert m[f"kube_apiserver_clusterip_allocator_allocation_duration_seconds_count{{cidr={cidr}}}"] == 6 + 25
    assert m["kube_apiserver_nodeport_allocator_allocated_ports"] == 3
    assert m["kube_apiserver_nodeport_allocator_available_ports"] == 2768 - 3
    assert m['kube_apiserver_nodeport_allocator_allocation_total{scope="dynamic"}'] == 3
    assert m['kube_apiserver_nodeport_allocator_allocation_total{scope="static"}'] == 1
    assert m['kube_apiserver_nodeport_allocator_allocation_errors_total{scope="static"}'] == 1
    # Filling the range counts one dynamic error per refused create.
    free = 254 - len(holding)
    fill = create_services(server, ns, [service(f"fill{i}") for i in range(free + 2)])
    assert sorted(s for s, _ in fill) == [201] * free + [500, 500]
    m = metrics(server)
    assert m[f"kube_apiserver_clusterip_allocator_allocated_ips{{cidr={cidr}}}"] == 254
    assert m[f"kube_apiserver_clusterip_allocator_available_ips{{cidr={cidr}}}"] == 0
    assert m[f'kube_apiserver_clusterip_allocator_allocation_errors_total{{cidr={cidr},scope="dynamic"}}'] == 2


# ---- 8. crash safety ----------------------------------------------------------------------------

def test_kill_9_during_creates_and_deletes_leaves_a_consistent_allocation(fresh_apiserver, tmp_path):
    data_dir = tmp_path / "crash"
    flags = (*IPV4_16, "--repair-services-interval", "1")
    first = fresh_apiserver(*flags, data_dir=data_dir)
    ns = new_namespace(first)
    # Some Services to delete during the burst.
    seed = create_services(first, ns, [service(f"old{i}", type_="NodePort") for i in range(40)])
    assert [s for s, _ in seed] == [201] * 40

    session = http(first, connections=16)
    base = f"{first.url}/api/v1/namespaces/{ns}/services"
    acked_creates: dict[str, dict] = {}
    acked_deletes: set[str] = set()

    def create(i: int) -> None:
        body = service(f"new{i}", type_="NodePort" if i % 3 == 0 else None,
                       **({"ipFamilyPolicy": "SingleStack"} if i % 2 else {}))
        if i % 5 == 0:
            body["spec"]["clusterIP"] = f"10.96.0.{100 + i // 5}"  # static band
        try:
            resp = session.post(base, json=body, timeout=10)
        except requests.RequestException:
            return
        if resp.status_code == 201:
            acked_creates[body["metadata"]["name"]] = resp.json()

    def delete(i: int) -> None:
        try:
            resp = session.delete(f"{base}/old{i}", timeout=10)
        except requests.RequestException:
            return
        if resp.status_code == 200:
            acked_deletes.add(f"old{i}")

    jobs = [(create, i) for i in range(300)] + [(delete, i) for i in range(40)]
    jobs.sort(key=lambda job: (job[1] * 7 + (job[0] is delete)) % 340)  # creates and deletes interleaved
    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(fn, i) for fn, i in jobs]
        deadline = time.monotonic() + 20
        while len(acked_creates) < 60 and time.monotonic() < deadline:
            time.sleep(0.005)
        first.process.kill()  # SIGKILL mid-burst
        first.process.wait()
        for f in futures:
            f.result()
    assert 60 <= len(acked_creates) < 300, "the kill must land in the middle of the burst"

    second = fresh_apiserver(*flags, data_dir=data_dir)
    time.sleep(2.5)  # the startup repair pass plus at least one periodic one
    stored = {s["metadata"]["name"]: s for s in services_in(second, ns)}
    for name, answer in acked_creates.items():
        assert name in stored, f"acknowledged create {name} is gone"
        assert stored[name]["spec"]["clusterIPs"] == answer["spec"]["clusterIPs"]
        assert stored[name]["metadata"]["uid"] == answer["metadata"]["uid"]
        assert [p.get("nodePort") for p in stored[name]["spec"]["ports"]] == [p.get("nodePort") for p in answer["spec"]["ports"]]
    for name in acked_deletes:
        assert name not in stored, f"acknowledged delete {name} came back"

    everything = services_in(second)
    objects = ip_addresses(second)
    owners: dict[str, str] = {}
    node_ports: dict[int, str] = {}
    for svc in everything:
        key = f'{svc["metadata"]["namespace"]}/{svc["metadata"]["name"]}'
        for ip in svc["spec"].get("clusterIPs") or []:
            assert ip not in owners, f"{ip} shared by {owners[ip]} and {key}"
            owners[ip] = key
            assert ip in objects, f"{key}'s IP {ip} has no IPAddress"
            assert parent(objects[ip]) == ("", "services", svc["metadata"]["namespace"], svc["metadata"]["name"])
        for port in svc["spec"]["ports"]:
            if port.get("nodePort"):
                assert port["nodePort"] not in node_ports, f'nodePort {port["nodePort"]} shared by {node_ports[port["nodePort"]]} and {key}'
                node_ports[port["nodePort"]] = key
    orphans = set(objects) - set(owners)
    assert not orphans, f"IPAddresses without a Service: {sorted(orphans)}"

    # The allocators agree with the store: gauges match, and new creates neither collide nor fail.
    m = metrics(second)
    assert m['kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.96.0.0/16"}'] == len(owners)
    assert m["kube_apiserver_nodeport_allocator_allocated_ports"] == len(node_ports)
    after = create_services(second, ns, [service(f"after{i}", type_="NodePort") for i in range(20)])
    assert [s for s, _ in after] == [201] * 20, [b.get("message") for s, b in after if s != 201]
    for _, body in after:
        assert body["spec"]["clusterIP"] not in owners and body["spec"]["ports"][0]["nodePort"] not in node_ports
    # Static IPs asked before the crash but never acknowledged are free again (or owned by their Service).
    for i in range(0, 300, 5):
        ip = f"10.96.0.{100 + i // 5}"
        assert ip not in objects or owners.get(ip) == f"{ns}/new{i}"

    # The repair loop found nothing to complain about.
    events = get_json(second, "events", "-A")["items"]
    repair_events = [(e["reason"], e["message"]) for e in events if e.get("reason") in REPAIR_REASONS]
    assert repair_events == []
    m = metrics(second)
    for key, value in m.items():
        if key.startswith(("kube_apiserver_clusterip_repair_ip_errors_total", "kube_apiserver_nodeport_repair_port_errors_total")):
            assert value == 0, key

    # ... and not because it is asleep: an IPAddress deleted by hand is back within a pass or two.
    name, answer = next(iter(acked_creates.items()))
    ip = answer["spec"]["clusterIP"]
    second.kubectl("delete", "ipaddress", ip)
    deadline = time.monotonic() + 5
    while second.kubectl("get", "ipaddress", ip, check=False).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert parent(get_json(second, "ipaddress", ip)) == ("", "services", ns, name)
    events = [e for e in get_json(second, "events", "-n", ns)["items"] if e.get("reason") in REPAIR_REASONS]
    assert [(e["type"], e["reason"], e["message"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
        ("Warning", "ClusterIPNotAllocated", f"Cluster IP [IPv4]: {ip} is not allocated; repairing", "Service", name)]
