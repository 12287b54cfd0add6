"""``kubesvc proxy``'s client and conntrack flags reach the KubeProxyConfiguration the proxy runs
with (upstream's --kube-api-* and --conntrack-* flags)."""

from unittest import mock

import pytest
from click.testing import CliRunner

from kubesvc.cmd import proxy


def completed_config(*args):
    seen = {}

    def stop(config, **_):
        seen["config"] = config
        raise proxy.ConfigError("stop here")

    with mock.patch.object(proxy, "resolve", stop):
        result = CliRunner().invoke(proxy.proxy_command, list(args))
    assert result.exit_code == 1 and "stop here" in result.output
    return seen["config"]


@pytest.mark.parametrize(("args", "section", "expected"), [
    (["--kube-api-qps", "50", "--kube-api-burst", "100", "--kube-api-content-type", "application/json"], "client_connection",
     {"qps": 50.0, "burst": 100, "content_type": "application/json"}),
    ([], "client_connection", {"qps": 5.0, "burst": 10, "content_type": "application/vnd.kubernetes.protobuf"}),
    (["--conntrack-tcp-timeout-established", "2h", "--conntrack-tcp-timeout-close-wait", "10m", "--conntrack-tcp-be-liberal",
      "--conntrack-udp-timeout", "30s", "--conntrack-udp-timeout-stream", "2m"], "conntrack",
     {"tcp_established_timeout": 7200.0, "tcp_close_wait_timeout": 600.0, "tcp_be_liberal": True, "udp_timeout": 30.0,
      "udp_stream_timeout": 120.0}),
    ([], "conntrack", {"max_per_core": 32768, "min": 131072, "tcp_established_timeout": 86400.0, "tcp_close_wait_timeout": 3600.0,
                       "tcp_be_liberal": False, "udp_timeout": 0.0, "udp_stream_timeout": 0.0}),
], ids=["client-flags", "client-defaults", "conntrack-flags", "conntrack-defaults"])
def test_flags_reach_the_configuration(args, section, expected):
    config = getattr(completed_config(*args), section)
    assert {name: getattr(config, name) for name in expected} == expected


def test_a_bad_conntrack_duration_is_a_usage_error():
    result = CliRunner().invoke(proxy.proxy_command, ["--conntrack-udp-timeout", "3x"])
    assert result.exit_code == 2
    assert 'time: invalid duration "3x"' in result.output
