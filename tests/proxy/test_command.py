"""``kubesvc proxy``'s command line: bad input gets one clear line and a non-zero exit."""

import subprocess
import sys

import pytest


def proxy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kubesvc", "proxy", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("args", "message"), [
    (["--proxy-mode", "bogus", "--kubeconfig", "/nonexistent"],
     'KubeProxyConfiguration.Mode.ProxyMode: Invalid value: "bogus"'),
    (["--iptables-sync-period", "3x"], 'time: invalid duration "3x"'),
    (["--feature-gates", "NoSuchGate=true"], "unrecognized feature gate: NoSuchGate"),
    (["--healthz-bind-address", "nonsense"], "--healthz-bind-address"),
    (["--iptables-masquerade-bit", "32", "--kubeconfig", "/nonexistent"], "must be within the range [0, 31]"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "invalid kubeconfig"),
    (["--config", "/nonexistent/config.yaml"], "failed complete"),
], ids=["mode", "duration", "feature-gate", "bind-address", "masquerade-bit", "kubeconfig", "config-file"])
def test_bad_input_is_one_line_and_non_zero(args, message):
    result = proxy(*args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_config_file_with_unknown_field_is_rejected(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nbogus: 1\n")
    result = proxy("--config", str(config))
    assert result.returncode != 0
    assert 'unknown field "bogus"' in result.stderr
    assert "Traceback" not in result.stderr
