"""cmd/flags.py: the flag parsing every command shares, with upstream's messages."""

import click
import pytest

from kubesvc.cmd import flags
from kubesvc.proxy.config import PROXY_FEATURE_GATES


class Param:
    def __init__(self, name):
        self.name = name


@pytest.mark.parametrize(("text", "expected"), [
    ("", {}),
    ("TopologyAwareHints=false", {"TopologyAwareHints": False}),
    (" AllAlpha=TRUE , AllBeta=false ,", {"AllAlpha": True, "AllBeta": False}),
], ids=["empty", "one", "spaces-case-trailing-comma"])
def test_feature_gates(text, expected):
    assert flags.parse_feature_gates(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("TopologyAwareHints", "missing bool value for TopologyAwareHints"),
    ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
    ("AllAlpha=yes", "invalid value of AllAlpha=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"),
], ids=["no-value", "unknown", "not-a-bool"])
def test_feature_gate_errors_are_component_bases(text, message):
    with pytest.raises(click.BadParameter, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        flags.parse_feature_gates(text)


def test_each_binary_knows_its_own_gates():
    proxy_only = next(name for name in PROXY_FEATURE_GATES if name not in flags.KNOWN_FEATURE_GATES)
    assert flags.feature_gates(PROXY_FEATURE_GATES, optional=True)(None, None, f"{proxy_only}=true") == {proxy_only: True}
    assert flags.feature_gates(PROXY_FEATURE_GATES, optional=True)(None, None, None) is None
    with pytest.raises(click.BadParameter, match="unrecognized feature gate"):
        flags.feature_gates()(None, None, f"{proxy_only}=true")


@pytest.mark.parametrize(("text", "seconds"), [("0s", 0.0), ("1m30s", 90.0), ("250ms", 0.25)], ids=["zero", "m-s", "ms"])
def test_durations(text, seconds):
    assert flags.duration(None, None, text) == seconds
    assert flags.optional_duration(None, None, text) == seconds


def test_duration_errors():
    with pytest.raises(click.BadParameter, match='time: invalid duration "3x"'):
        flags.duration(None, None, "3x")
    with pytest.raises(click.BadParameter, match="-1s must not be negative"):
        flags.duration(None, None, "-1s")
    assert flags.optional_duration(None, None, None) is None
    assert flags.optional_duration(None, None, "-1s") == -1.0  # the component validates it


def test_bounded_uses_kube_controller_managers_words():
    check = flags.bounded(1, 50)
    assert check(None, Param("concurrent_service_endpoint_syncs"), 5) == 5
    with pytest.raises(click.BadParameter, match="^concurrent-service-endpoint-syncs must not be less than 1, but got 0$"):
        check(None, Param("concurrent_service_endpoint_syncs"), 0)
    with pytest.raises(click.BadParameter, match="must not be more than 50, but got 51"):
        check(None, Param("concurrent_service_endpoint_syncs"), 51)


@pytest.mark.parametrize(("value", "expected"), [
    ("10.244.0.0/24", ["10.244.0.0/24"]),
    ("10.244.0.0/24, fd00:10:244::/64", ["10.244.0.0/24", "fd00:10:244::/64"]),
], ids=["ipv4", "dual-stack"])
def test_pod_cidrs(value, expected):
    assert flags.parse_pod_cidrs(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("10.0.0.0/24,10.1.0.0/24", "the two CIDRs must be of different IP families"),
    ("10.0.0.0/31", "10.0.0.0/31 is too small for Pods"),
    ("bogus", "invalid CIDR address: bogus"),
], ids=["same-family", "too-small", "not-a-cidr"])
def test_pod_cidr_errors(value, message):
    with pytest.raises(ValueError, match=message):
        flags.parse_pod_cidrs(value)


@pytest.mark.parametrize(("value", "expected"), [("10.0.0.7", ["10.0.0.7"]), ("10.0.0.7,fd00::7", ["10.0.0.7", "fd00::7"]),
                                                ("", []), ("010.0.0.7", ["10.0.0.7"])],
                         ids=["one", "pair", "none", "sloppy"])
def test_node_ips(value, expected):
    assert flags.parse_node_ips(value) == expected


@pytest.mark.parametrize("value", ["10.0.0.7,10.0.0.8", "nonsense", "fe80::1%eth0", "10.0.0.7,fd00::7,10.0.0.8"],
                         ids=["same-family", "not-an-ip", "zone", "three"])
def test_node_ip_errors(value):
    with pytest.raises(ValueError, match="--node-ip"):
        flags.parse_node_ips(value)


def test_service_cidrs_keep_kube_apiservers_size_check():
    assert flags.service_cidrs(None, None, "10.96.0.0/12,fd00::/108") == "10.96.0.0/12,fd00::/108"
    with pytest.raises(click.BadParameter, match=r"specified --service-cluster-ip-range\[1\] is too large"):
        flags.service_cidrs(None, None, "10.96.0.0/12,fd00::/64")


def test_checked_and_comma_list():
    assert flags.checked(int)(None, None, None) is None
    with pytest.raises(click.BadParameter):
        flags.checked(int)(None, None, "x")
    assert flags.comma_list(None, None, " a, ,b ") == ["a", "b"]
    assert flags.comma_list(None, None, None) is None


def test_a_bad_kubeconfig_is_one_line(tmp_path):
    with pytest.raises(click.ClickException, match="^invalid kubeconfig: "):
        flags.load_kubeconfig(str(tmp_path / "missing"))
