"""``kubesvc dns``'s names checked before anything starts: a usage error (exit 2), one line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kubesvc.cmd.dns import dns_command


@pytest.mark.parametrize("args, wanted", [
    (["--cluster-domain", "a..b"], "Invalid value for '--cluster-domain': 'a..b': "),
    (["--cluster-domain", ".."], "Invalid value for '--cluster-domain': '..': "),
    (["--cluster-domain", "Cluster_Local"], "Invalid value for '--cluster-domain': 'Cluster_Local': "),
    (["--self-address", "x"], "Invalid value for '--self-address': 'x' is not an IP address"),
])
def test_bad_names_are_a_usage_error(args, wanted):
    result = CliRunner().invoke(dns_command, ["--kubeconfig", "/nonexistent", *args], env={"POD_IP": None})
    assert result.exit_code == 2, result.output
    assert wanted in result.output and "Traceback" not in result.output


def test_a_trailing_dot_and_an_ip_are_fine():
    result = CliRunner().invoke(dns_command, ["--kubeconfig", "/nonexistent", "--cluster-domain", "cluster.local.",
                                              "--self-address", "10.244.0.5"], env={"POD_IP": None})
    assert "no such file" in result.output  # got past the names to the kubeconfig
