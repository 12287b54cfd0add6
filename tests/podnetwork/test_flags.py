"""``--pod-network`` on the command lines that start an agent: ``kubesvc agent`` refuses it
without ``--cluster-cidr`` in one line, ``up`` and ``join`` refuse a bad ``--cluster-cidr``
before anything starts, and ``up`` keeps the flag out of the apiserver's arguments."""

from __future__ import annotations

from click.testing import CliRunner

from kubesvc.cmd.agent import agent_command
from kubesvc.cmd.join import join_command
from kubesvc.cmd.up import up_command
from kubesvc.up import NODE_FLAGS, without_flags


def test_agent_pod_network_needs_a_cluster_cidr(tmp_path):
    kubeconfig = tmp_path / "k"
    kubeconfig.write_text("")
    result = CliRunner().invoke(agent_command, ["--kubeconfig", str(kubeconfig), "--pod-cidr", "10.244.1.0/24", "--pod-network", "vxlan"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == \
        "Error: Invalid value: --pod-network vxlan needs --cluster-cidr (the range every node's podCIDR is in)"


def test_agent_pod_network_choices(tmp_path):
    result = CliRunner().invoke(agent_command, ["--kubeconfig", "x", "--pod-cidr", "10.244.1.0/24", "--pod-network", "gre"])
    assert result.exit_code == 2 and "'gre' is not one of 'none', 'routes', 'vxlan'" in result.output


def test_up_refuses_a_bad_cluster_cidr_with_a_pod_network(tmp_path):
    result = CliRunner().invoke(up_command, ["--data-dir", str(tmp_path / "d"), "--pod-network", "routes", "--cluster-cidr", "nonsense"])
    assert result.exit_code == 2 and "--cluster-cidr" in result.output, result.output
    assert not (tmp_path / "d").exists()


def test_join_refuses_a_bad_cluster_cidr(tmp_path):
    result = CliRunner().invoke(join_command, ["https://192.0.2.1:6443", "--token", "abcdef.0123456789abcdef", "--node-ip", "192.0.2.9",
                                               "--data-dir", str(tmp_path / "d"), "--pod-network", "vxlan", "--cluster-cidr", "10.244.0.0/33"])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "d").exists()


def test_up_keeps_pod_network_from_the_apiserver():
    assert without_flags(["--pod-network", "vxlan", "--secure-port", "0", "--pod-network=routes"], NODE_FLAGS) == ["--secure-port", "0"]
