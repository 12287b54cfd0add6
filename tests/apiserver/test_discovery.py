"""Discovery documents, compared with what kube-apiserver 1.32 serves (api-compat.md §2.2).

The storageVersionHash values are the ones a real cluster reports for these kinds
(``kubectl get --raw /api/v1``), e.g. services ``0/CO1lhkEBI=``.
"""

from __future__ import annotations

import pytest

from kubesvc.api.scheme import KindInfo
from kubesvc.api.schema import Obj
from kubesvc.apiserver import appkeys
from kubesvc.apiserver.discovery import (
    AGGREGATED_CONTENT_TYPE,
    AGGREGATED_CONTENT_TYPE_V2BETA1,
    Discovery,
    storage_version_hash,
    wants_aggregated,
)

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

SERVICES = KindInfo("", "v1", "Service", "services", "service", True, Obj("x"), short_names=("svc",), categories=("all",), subresources=("status",))
NAMESPACES = KindInfo("", "v1", "Namespace", "namespaces", "namespace", False, Obj("x"), short_names=("ns",), subresources=("status", "finalize"))
ENDPOINT_SLICES = KindInfo("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", True, Obj("x"))
LEASES = KindInfo("coordination.k8s.io", "v1", "Lease", "leases", "lease", True, Obj("x"))
IP_ADDRESSES = KindInfo("networking.k8s.io", "v1", "IPAddress", "ipaddresses", "ipaddress", False, Obj("x"), short_names=("ip",))
SERVICE_CIDRS = KindInfo("networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", "servicecidr", False, Obj("x"), subresources=("status",))
IP_ADDRESSES_BETA = KindInfo("networking.k8s.io", "v1beta1", "IPAddress", "ipaddresses", "ipaddress", False, Obj("x"))

DISCOVERY = Discovery([ENDPOINT_SLICES, SERVICES, IP_ADDRESSES_BETA, LEASES, NAMESPACES, SERVICE_CIDRS, IP_ADDRESSES], "127.0.0.1:6443")


def test_api_versions():
    assert DISCOVERY.api_versions() == {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    }


def test_api_group_list_orders_groups_by_priority_and_versions_by_preference():
    networking_versions = [{"groupVersion": "networking.k8s.io/v1", "version": "v1"}, {"groupVersion": "networking.k8s.io/v1beta1", "version": "v1beta1"}]
    assert DISCOVERY.api_group_list() == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {"name": "networking.k8s.io", "versions": networking_versions, "preferredVersion": networking_versions[0]},
            {"name": "coordination.k8s.io", "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}], "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}},
            {"name": "discovery.k8s.io", "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}], "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"}},
        ],
    }


def test_api_group():
    assert DISCOVERY.api_group("discovery.k8s.io") == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "discovery.k8s.io",
        "versions": [{"groupVersion": "discovery.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "discovery.k8s.io/v1", "version": "v1"},
    }


@pytest.mark.parametrize("group", ["", "apps", "example.com"])
def test_unknown_group_is_none(group):
    assert DISCOVERY.api_group(group) is None


def test_core_resource_list():
    assert DISCOVERY.api_resource_list("", "v1") == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": [
            {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": ALL_VERBS, "shortNames": ["ns"], "storageVersionHash": "Q3oi5N2YM8M="},
            {"name": "namespaces/finalize", "singularName": "", "namespaced": False, "kind": "Namespace", "verbs": ["update"]},
            {"name": "namespaces/status", "singularName": "", "namespaced": False, "kind": "Namespace", "verbs": ["get", "patch", "update"]},
            {"name": "services", "singularName": "service", "namespaced": True, "kind": "Service", "verbs": ALL_VERBS, "shortNames": ["svc"], "categories": ["all"], "storageVersionHash": "0/CO1lhkEBI="},
            {"name": "services/status", "singularName": "", "namespaced": True, "kind": "Service", "verbs": ["get", "patch", "update"]},
        ],
    }


def test_group_resource_list():
    listing = DISCOVERY.api_resource_list("networking.k8s.io", "v1")
    assert listing["groupVersion"] == "networking.k8s.io/v1"
    assert [r["name"] for r in listing["resources"]] == ["ipaddresses", "servicecidrs", "servicecidrs/status"]
    assert listing["resources"][0] == {"name": "ipaddresses", "singularName": "ipaddress", "namespaced": False, "kind": "IPAddress", "verbs": ALL_VERBS, "shortNames": ["ip"], "storageVersionHash": storage_version_hash("networking.k8s.io", "v1", "IPAddress")}


@pytest.mark.parametrize("group, version", [("", "v2"), ("apps", "v1"), ("discovery.k8s.io", "v1beta1")])
def test_unknown_group_version_is_none(group, version):
    assert DISCOVERY.api_resource_list(group, version) is None


@pytest.mark.parametrize(
    "group, kind_name, expected",
    [
        pytest.param("", "Service", "0/CO1lhkEBI=", id="services"),
        pytest.param("", "Pod", "xPOwRZ+Yhw8=", id="pods"),
        pytest.param("", "Node", "XwShjMxG9Fs=", id="nodes"),
        pytest.param("", "Namespace", "Q3oi5N2YM8M=", id="namespaces"),
        pytest.param("", "Endpoints", "fWeeMqaN/OA=", id="endpoints"),
        pytest.param("", "Event", "r2yiGXH7wu8=", id="events"),
        pytest.param("coordination.k8s.io", "Lease", "gqkMMb/YqFM=", id="leases"),
    ],
)
def test_storage_version_hash_matches_a_real_cluster(group, kind_name, expected):
    assert storage_version_hash(group, "v1", kind_name) == expected


def test_aggregated_core():
    service_kind = {"group": "", "version": "v1", "kind": "Service"}
    namespace_kind = {"group": "", "version": "v1", "kind": "Namespace"}
    assert DISCOVERY.aggregated(core=True) == {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [
            {
                "metadata": {"creationTimestamp": None},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            {
                                "resource": "namespaces",
                                "responseKind": namespace_kind,
                                "scope": "Cluster",
                                "singularResource": "namespace",
                                "verbs": ALL_VERBS,
                                "shortNames": ["ns"],
                                "subresources": [
                                    {"subresource": "finalize", "responseKind": namespace_kind, "verbs": ["update"]},
                                    {"subresource": "status", "responseKind": namespace_kind, "verbs": ["get", "patch", "update"]},
                                ],
                            },
                            {
                                "resource": "services",
                                "responseKind": service_kind,
                                "scope": "Namespaced",
                                "singularResource": "service",
                                "verbs": ALL_VERBS,
                                "shortNames": ["svc"],
                                "categories": ["all"],
                                "subresources": [{"subresource": "status", "responseKind": service_kind, "verbs": ["get", "patch", "update"]}],
                            },
                        ],
                        "freshness": "Current",
                    }
                ],
            }
        ],
    }


def test_aggregated_groups():
    document = DISCOVERY.aggregated(core=False)
    assert [item["metadata"] for item in document["items"]] == [
        {"name": "networking.k8s.io", "creationTimestamp": None},
        {"name": "coordination.k8s.io", "creationTimestamp": None},
        {"name": "discovery.k8s.io", "creationTimestamp": None},
    ]
    assert [v["version"] for v in document["items"][0]["versions"]] == ["v1", "v1beta1"]
    assert document["items"][2]["versions"][0]["resources"] == [
        {"resource": "endpointslices", "responseKind": {"group": "discovery.k8s.io", "version": "v1", "kind": "EndpointSlice"}, "scope": "Namespaced", "singularResource": "endpointslice", "verbs": ALL_VERBS}
    ]


def test_aggregated_v2beta1_names_its_version():
    assert DISCOVERY.aggregated(core=False, content_type=AGGREGATED_CONTENT_TYPE_V2BETA1)["apiVersion"] == "apidiscovery.k8s.io/v2beta1"


def test_aggregated_documents_are_computed_once():
    assert DISCOVERY.aggregated(core=True) is DISCOVERY.aggregated(core=True)


def test_a_server_without_core_kinds():
    discovery = Discovery([LEASES], "10.0.0.1:443")
    assert discovery.api_versions()["versions"] == []
    assert discovery.aggregated(core=True)["items"] == []


KUBECTL_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"


@pytest.mark.parametrize(
    "accept, expected",
    [
        pytest.param(KUBECTL_ACCEPT, AGGREGATED_CONTENT_TYPE, id="kubectl-1.32"),
        pytest.param("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", AGGREGATED_CONTENT_TYPE_V2BETA1, id="v2beta1-only"),
        pytest.param("application/json", None, id="python-client"),
        pytest.param("", None, id="no-accept"),
        pytest.param("*/*", None, id="wildcard"),
        pytest.param("application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", None, id="legacy-preferred"),
        pytest.param("application/json;q=0.5,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", AGGREGATED_CONTENT_TYPE, id="q-values"),
        pytest.param("application/json;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io", AGGREGATED_CONTENT_TYPE, id="parameter-order"),
        pytest.param("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0", None, id="q-zero"),
        pytest.param("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList", None, id="unknown-version"),
        pytest.param("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", None, id="protobuf-aggregated"),
        pytest.param("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", AGGREGATED_CONTENT_TYPE, id="other-as-skipped"),
    ],
)
def test_wants_aggregated(accept, expected):
    assert wants_aggregated(accept) == expected


async def test_server_address_of_an_ipv6_bind_address_is_bracketed(tmp_path):
    """serverAddressByClientCIDRs is net.JoinHostPort(host, port): ``[::1]:6443``, not ``::1:6443``."""
    from kubesvc.apiserver.server import APIServer, ServerConfig

    server = APIServer(ServerConfig(data_dir=tmp_path, bind_address="::1", secure_port=0))
    await server.start()
    try:
        versions = server.runner.app[appkeys.DISCOVERY].api_versions()
        (entry,) = versions["serverAddressByClientCIDRs"]
        assert entry["serverAddress"] == f"[::1]:{server.port}"
    finally:
        await server.stop()
