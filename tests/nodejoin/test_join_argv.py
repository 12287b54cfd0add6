"""What ``kubesvc join`` runs on its machine: the agent with the node's identity, the zone,
node IP, the Pod CIDR the cluster gave and the cluster DNS settings ``up`` gives its own agent;
the proxy and the LB announcer with kube-proxy's kubeconfig (as k3s's agents run kube-proxy);
extra flags passed through last, as given."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesvc.cluster.join import JoinFailed
from kubesvc.nodejoin.system import JoinOptions, JoinSystem


def system(tmp_path: Path, **options) -> JoinSystem:
    joined = JoinSystem(JoinOptions(server="https://192.0.2.1:6443", token="abcdef.0123456789abcdef", data_dir=tmp_path, node_name="m2",
                                    node_ips=["192.0.2.12"], **options))
    joined.pod_cidrs = ["10.244.3.0/24"]
    return joined


def flag(argv: list, name: str) -> str:
    argv = [str(a) for a in argv]
    return argv[argv.index(name) + 1]


def test_the_agent_gets_the_nodes_identity_zone_and_the_clusters_ranges(tmp_path):
    argv = [str(a) for a in system(tmp_path, zone="zone-b", agent_args=["--pod-network", "routes"]).agent_argv()]
    assert argv[argv.index("agent") - 2:argv.index("agent")] == ["-m", "kubesvc"]
    assert flag(argv, "--kubeconfig") == str(tmp_path / "kubeconfig")
    assert (flag(argv, "--node-name"), flag(argv, "--zone"), flag(argv, "--node-ip"), flag(argv, "--pod-cidr")) == \
        ("m2", "zone-b", "192.0.2.12", "10.244.3.0/24")
    assert (flag(argv, "--cluster-dns"), flag(argv, "--cluster-domain")) == ("10.96.0.10", "cluster.local")
    assert flag(argv, "--client-ca-file") == str(tmp_path / "pki" / "ca.crt")
    assert argv[-2:] == ["--pod-network", "routes"]


def test_dns_follows_the_service_range_or_the_flag(tmp_path):
    assert flag(system(tmp_path, service_cidrs=["10.43.0.0/16"]).agent_argv(), "--cluster-dns") == "10.43.0.10"
    assert flag(system(tmp_path, cluster_dns="10.43.0.53").agent_argv(), "--cluster-dns") == "10.43.0.53"


def test_the_proxy_runs_with_kube_proxys_kubeconfig(tmp_path):
    argv = [str(a) for a in system(tmp_path, proxy_args=["--v", "2"]).proxy_argv()]
    assert flag(argv, "--kubeconfig") == str(tmp_path / "kube-proxy.kubeconfig")
    assert (flag(argv, "--hostname-override"), flag(argv, "--bind-address")) == ("m2", "192.0.2.12")
    assert argv[-2:] == ["--v", "2"]


def test_the_lb_announcer_runs_as_kube_proxy_with_the_node_name_and_ip(tmp_path):
    argv = [str(a) for a in system(tmp_path).lb_announcer_argv()]
    assert argv[argv.index("lb-announcer") - 2:argv.index("lb-announcer")] == ["-m", "kubesvc"]
    assert (flag(argv, "--kubeconfig"), flag(argv, "--node-name"), flag(argv, "--node-ip")) == \
        (str(tmp_path / "kube-proxy.kubeconfig"), "m2", "192.0.2.12")


async def test_a_restarted_join_with_a_valid_credential_needs_no_token(tmp_path):
    """As a restarted kubelet: the data dir's unexpired certificate for this node is used; the
    server (here unreachable) is not asked and the token (here expired long ago) not needed."""
    from kubesvc.nodejoin import tlsbootstrap
    from kubesvc.serving import pki

    ca = pki.ClusterCA(tmp_path / "ca")
    pair = ca.node_client("m2")
    joined = system(tmp_path / "node")
    tlsbootstrap.write_credentials(joined.paths, "https://192.0.2.1:6443", ca.pem, pair.key.read_bytes(), pair.cert.read_bytes(), "m2")
    proxy = ca.client("kube-proxy", pki.PROXY)
    tlsbootstrap.write_identity(joined.paths, tlsbootstrap.kube_proxy_identity(joined.paths), "https://192.0.2.1:6443", ca.pem,
                                proxy.key.read_bytes(), proxy.cert.read_bytes())
    await joined.credentials()  # would fail to reach 192.0.2.1 if it tried
    assert joined.made == []
    other = system(tmp_path / "node")
    other.options.node_name = "m3"  # another node's name: that certificate is not its credential
    other.options.server = "https://127.0.0.1:1"
    with pytest.raises(JoinFailed, match="cannot reach"):
        await other.credentials()


def test_the_serving_request_has_the_kubelet_serving_shape_and_the_agent_uses_the_issued_pair(tmp_path):
    import base64
    from datetime import datetime, timezone

    from cryptography import x509

    from kubesvc.controllers.certificates.csr import kubelet_serving_problem
    from kubesvc.nodejoin import tlsbootstrap
    from kubesvc.nodejoin.csr import new_key, serving_csr_object
    from kubesvc.serving import pki

    obj = serving_csr_object(new_key(), "m2", ["192.0.2.12"], ["m2"])
    request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
    assert obj["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert kubelet_serving_problem(request, obj["spec"]["usages"]) == ""
    joined = system(tmp_path)
    assert "--tls-cert-file" not in [str(a) for a in joined.agent_argv()]  # nothing issued yet: the agent's own self-signed one
    assert "--rotate-server-certificates" in joined.agent_argv()  # and the issued pair taken in place once written there:
    assert flag(joined.agent_argv(), "--cert-dir") == str(joined.paths.serving_cert.parent)
    ca = pki.ClusterCA(tmp_path / "ca")
    pair = ca.node_serving("m2", ["192.0.2.12"])
    pki.private_dir(joined.paths.serving_cert.parent)
    pki.write_private(joined.paths.serving_cert, pair.cert.read_bytes())
    pki.write_private(joined.paths.serving_key, pair.key.read_bytes())
    assert tlsbootstrap.serving_usable(joined.paths, ["192.0.2.12"], datetime.now(timezone.utc))
    assert not tlsbootstrap.serving_usable(joined.paths, ["192.0.2.99"], datetime.now(timezone.utc))  # another address: ask again
    assert flag(joined.agent_argv(), "--tls-cert-file") == str(joined.paths.serving_cert)


async def test_a_node_credential_without_kube_proxys_asks_for_it_and_says_which_failed(tmp_path):
    """A data dir with the node's certificate but not kube-proxy's (a join of an older kubesvc):
    only kube-proxy's is asked for, as the node; an unreachable server is one line naming it."""
    from kubesvc.nodejoin import tlsbootstrap
    from kubesvc.serving import pki

    ca = pki.ClusterCA(tmp_path / "ca")
    pair = ca.node_client("m2")
    joined = system(tmp_path / "node")
    joined.options.server = "https://127.0.0.1:1"
    tlsbootstrap.write_credentials(joined.paths, "https://127.0.0.1:1", ca.pem, pair.key.read_bytes(), pair.cert.read_bytes(), "m2")
    with pytest.raises(JoinFailed, match=r"^kube-proxy's client certificate \(for the proxy and the LoadBalancer announcer\): cannot reach"):
        await joined.credentials()
    assert joined.made == [] and not joined.paths.proxy_kubeconfig.exists()
