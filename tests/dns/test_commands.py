"""The DNS flags' bad input, as a user meets it: one line and a non-zero exit, nothing started."""

from __future__ import annotations

from click.testing import CliRunner

from kubesvc.cmd import main


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def test_dns_without_kubeconfig_outside_a_pod():
    result = run("dns", env={"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""})
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined (or give --kubeconfig)"]


def test_dns_bad_upstream(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                          "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n")
    result = run("dns", "--kubeconfig", str(kubeconfig), "--upstream", "resolver.example")
    assert result.exit_code == 1 and result.output.strip() == "Error: upstream 'resolver.example': not an IP address"


def test_agent_cluster_dns_must_be_ips(tmp_path):
    result = run("agent", "--kubeconfig", str(tmp_path / "none"), "--pod-cidr", "10.244.0.0/24", "--cluster-dns", "10.96.0.10,dns")
    assert result.exit_code == 2 and "--cluster-dns: 'dns' is not an IP address" in result.output


def test_up_cluster_dns_must_be_an_ip(tmp_path):
    result = run("up", "--data-dir", str(tmp_path / "d"), "--cluster-dns", "kube-dns")
    assert result.exit_code == 2 and "--cluster-dns: 'kube-dns' is not an IP address" in result.output
    assert not (tmp_path / "d").exists()
