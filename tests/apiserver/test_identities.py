"""Every component its own identity, as a user of ``kubesvc apiserver`` observes it: the admin
kubeconfig and each component's kubeconfig hold a client certificate (no token), ``kubectl auth
whoami`` names the identity, each is refused what is not its job, the serving certificate
covers the in-cluster names, and the files are private."""

from __future__ import annotations

import json
import socket
import ssl
import stat

import pytest
import yaml

from kubesvc.serving import pki

IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost")


def whoami(apiserver, kubeconfig) -> dict:
    return json.loads(apiserver.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)["status"]["userInfo"]


def port_of(apiserver) -> int:
    return int(apiserver.url.rsplit(":", 1)[1])


def peer_certificate(apiserver, server_hostname: str) -> dict:
    """The apiserver's certificate as a client verifying it for ``server_hostname`` sees it."""
    context = ssl.create_default_context(cafile=str(apiserver.ca_file))
    with socket.create_connection(("127.0.0.1", port_of(apiserver)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_hostname) as tls:
        return tls.getpeercert()


def test_the_admin_kubeconfig_holds_the_admin_certificate_and_no_token(apiserver):
    user = yaml.safe_load(apiserver.kubeconfig.read_text())["users"][0]["user"]
    assert set(user) == {"client-certificate-data", "client-key-data"}
    info = whoami(apiserver, apiserver.kubeconfig)
    assert (info["username"], info["groups"]) == ("system:admin", ["system:masters", "system:authenticated"])
    assert info["extra"]["authentication.kubernetes.io/credential-id"][0].startswith("X509SHA256=")


@pytest.mark.parametrize("component, username", [
    ("controller-manager", "system:kube-controller-manager"),
    ("scheduler", "system:kube-scheduler"),
    ("proxy", "system:kube-proxy"),
], ids=["controller-manager", "scheduler", "proxy"])
def test_each_component_kubeconfig_is_its_own_identity(apiserver, component, username):
    kubeconfig = apiserver.component_kubeconfig(component)
    assert "token" not in yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    info = whoami(apiserver, kubeconfig)
    assert (info["username"], info["groups"]) == (username, ["system:authenticated"])


def test_a_node_kubeconfig_is_the_node(apiserver):
    info = whoami(apiserver, apiserver.node_kubeconfig("whoami-node"))
    assert (info["username"], info["groups"]) == ("system:node:whoami-node", ["system:nodes", "system:authenticated"])


@pytest.mark.parametrize("component, args, username, refused", [
    ("proxy", ("create", "service", "clusterip", "not-mine", "--tcp=80"), "system:kube-proxy", 'cannot create resource "services"'),
    ("proxy", ("get", "secrets"), "system:kube-proxy", 'cannot list resource "secrets"'),
    ("scheduler", ("delete", "namespace", "default"), "system:kube-scheduler", 'cannot delete resource "namespaces"'),
], ids=["proxy-creates-a-service", "proxy-reads-secrets", "scheduler-deletes-a-namespace"])
def test_a_component_is_refused_what_is_not_its_job(apiserver, component, args, username, refused):
    result = apiserver.kubectl(*args, check=False, kubeconfig=apiserver.component_kubeconfig(component))
    assert result.returncode != 0
    assert f'User "{username}" {refused}' in result.stderr, result.stderr


@pytest.mark.parametrize("component, args", [
    ("proxy", ("get", "services,endpointslices", "-A")),
    ("proxy", ("get", "nodes")),
    ("scheduler", ("get", "pods,nodes", "-A")),
], ids=["proxy-watches-services", "proxy-reads-nodes", "scheduler-reads-pods-and-nodes"])
def test_a_component_can_read_what_its_job_needs(apiserver, component, args):
    apiserver.kubectl(*args, kubeconfig=apiserver.component_kubeconfig(component))


@pytest.mark.parametrize("name", IN_CLUSTER_NAMES + ("127.0.0.1",))
def test_the_serving_certificate_verifies_for_every_in_cluster_name(apiserver, name):
    peer = peer_certificate(apiserver, name)  # check_hostname: the handshake fails for a name not covered
    assert dict(x[0] for x in peer["subject"]) == {"commonName": "kube-apiserver"}


def test_the_serving_certificate_covers_the_first_service_ip(apiserver):
    sans = peer_certificate(apiserver, "kubernetes.default.svc")["subjectAltName"]
    assert ("IP Address", "10.96.0.1") in sans
    assert {value for kind, value in sans if kind == "DNS"} == set(IN_CLUSTER_NAMES)


def test_a_name_the_certificate_does_not_cover_fails_verification(apiserver):
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        peer_certificate(apiserver, "kubernetes.example")


def test_the_advertise_address_and_service_range_are_in_the_serving_certificate(fresh_apiserver, tmp_path):
    server = fresh_apiserver("--advertise-address=10.1.2.3", "--service-cluster-ip-range=10.0.0.0/16", data_dir=tmp_path / "data")
    sans = peer_certificate(server, "kubernetes")["subjectAltName"]
    assert {("IP Address", "10.1.2.3"), ("IP Address", "10.0.0.1"), ("IP Address", "127.0.0.1")} <= set(sans)
    assert ("IP Address", "10.96.0.1") not in sans
    server.stop()
    again = fresh_apiserver("--advertise-address=10.9.9.9", "--service-cluster-ip-range=10.0.0.0/16", data_dir=tmp_path / "data")
    sans = peer_certificate(again, "kubernetes")["subjectAltName"]
    assert ("IP Address", "10.9.9.9") in sans and ("IP Address", "10.1.2.3") not in sans  # reissued for the new address
    assert whoami(again, again.kubeconfig)["username"] == "system:admin"  # the same CA: certificates still good


def test_a_client_certificate_from_another_ca_gets_nothing(apiserver, tmp_path):
    stranger = pki.ClusterCA(tmp_path / "other-pki")
    pair = stranger.client("admin", pki.ADMIN)
    kubeconfig = tmp_path / "stranger.kubeconfig"
    pki.write_kubeconfig(kubeconfig, apiserver.url, pki.cluster_ca(apiserver.data_dir), "stranger", pair)
    result = apiserver.kubectl("get", "namespaces", check=False, kubeconfig=kubeconfig)
    assert result.returncode != 0
    assert "default" not in result.stdout


def test_credentials_are_private_files_in_private_directories(apiserver):
    apiserver.node_kubeconfig("modes-node")
    for directory in (apiserver.data_dir / "pki", apiserver.data_dir / "cred"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        for path in directory.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(apiserver.kubeconfig.stat().st_mode) == 0o600
