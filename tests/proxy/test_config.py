"""KubeProxyConfiguration: loading, defaults, flags, validation, resolution (upstream
cmd/kube-proxy/app/options_test.go, pkg/proxy/apis/config/validation/validation_test.go)."""

import dataclasses
import textwrap

import pytest

from kubesvc.proxy import config as cfg
from kubesvc.proxy.config import (
    ConfigError,
    KubeProxyConfiguration,
    ProxyFlags,
    append_port_if_needed,
    apply_platform_defaults,
    check_ip_flag,
    check_ip_port_flag,
    complete,
    default_config,
    load_config,
    options_for_family,
    resolve,
    validate,
)
from kubesvc.proxy.types import IPV4, IPV6
from kubesvc.util.golang import aggregate as aggregate_error, format_duration

ROOT = "KubeProxyConfiguration"

# ---- loading (TestLoadConfig, TestLoadConfigFailures) ------------------------------------------

YAML_TEMPLATE = """\
apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: {bind}
clientConnection:
  acceptContentTypes: "abc"
  burst: 100
  contentType: content-type
  kubeconfig: "/path/to/kubeconfig"
  qps: 7
clusterCIDR: "{cluster_cidr}"
configSyncPeriod: 15s
conntrack:
  maxPerCore: 2
  min: 1
  tcpCloseWaitTimeout: 10s
  tcpEstablishedTimeout: 20s
healthzBindAddress: "{healthz}"
hostnameOverride: "foo"
iptables:
  masqueradeAll: true
  masqueradeBit: 17
  minSyncPeriod: 10s
  syncPeriod: 60s
  localhostNodePorts: true
ipvs:
  minSyncPeriod: 10s
  syncPeriod: 60s
  excludeCIDRs:
    - "10.20.30.40/16"
    - "fd00:1::0/64"
nftables:
  masqueradeAll: true
  masqueradeBit: 18
  minSyncPeriod: 10s
  syncPeriod: 60s
kind: KubeProxyConfiguration
metricsBindAddress: "{metrics}"
mode: "{mode}"
oomScoreAdj: 17
portRange: "2-7"
detectLocalMode: "ClusterCIDR"
detectLocal:
  bridgeInterface: "cbr0"
  interfaceNamePrefix: "veth"
nodePortAddresses:
  - "10.20.30.40/16"
  - "fd00:1::0/64"
"""

LOAD_CASES = [
    ("iptables mode, IPv4 all-zeros bind address", "iptables", "0.0.0.0", "0.0.0.0", "1.2.3.0/24", "1.2.3.4:12345", "2.3.4.5:23456"),
    ("iptables mode, non-zeros IPv4 config", "iptables", "9.8.7.6", "9.8.7.6", "1.2.3.0/24", "1.2.3.4:12345", "2.3.4.5:23456"),
    ('iptables mode, IPv6 "::" bind address', "iptables", '"::"', "::", "fd00:1::0/64", "[fd00:1::5]:12345", "[fd00:2::5]:23456"),
    ('iptables mode, IPv6 "[::]" bind address', "iptables", '"[::]"', "[::]", "fd00:1::0/64", "[fd00:1::5]:12345", "[fd00:2::5]:23456"),
    ("iptables mode, IPv6 ::0 bind address", "iptables", "::0", "::0", "fd00:1::0/64", "[fd00:1::5]:12345", "[fd00:2::5]:23456"),
    ("ipvs mode, IPv6 config", "ipvs", "2001:db8::1", "2001:db8::1", "fd00:1::0/64", "[fd00:1::5]:12345", "[fd00:2::5]:23456"),
]


@pytest.mark.parametrize(("mode", "bind", "expected_bind", "cluster_cidr", "healthz", "metrics"), [c[1:] for c in LOAD_CASES],
                         ids=[c[0] for c in LOAD_CASES])
def test_load_config(mode, bind, expected_bind, cluster_cidr, healthz, metrics):
    loaded = load_config(YAML_TEMPLATE.format(bind=bind, cluster_cidr=cluster_cidr, healthz=healthz, metrics=metrics, mode=mode))
    assert loaded.bind_address == expected_bind
    assert dataclasses.asdict(loaded.client_connection) == {
        "kubeconfig": "/path/to/kubeconfig", "accept_content_types": "abc", "content_type": "content-type", "qps": 7.0, "burst": 100}
    assert loaded.cluster_cidr == cluster_cidr
    assert loaded.config_sync_period == 15
    assert dataclasses.asdict(loaded.conntrack) == {
        "max_per_core": 2, "min": 1, "tcp_established_timeout": 20, "tcp_close_wait_timeout": 10, "tcp_be_liberal": False,
        "udp_timeout": 0, "udp_stream_timeout": 0}
    assert loaded.feature_gates == {}
    assert (loaded.healthz_bind_address, loaded.metrics_bind_address) == (healthz, metrics)
    assert loaded.hostname_override == "foo"
    assert dataclasses.asdict(loaded.iptables) == {
        "masquerade_bit": 17, "masquerade_all": True, "localhost_nodeports": True, "sync_period": 60, "min_sync_period": 10}
    assert (loaded.ipvs.sync_period, loaded.ipvs.min_sync_period, loaded.ipvs.exclude_cidrs) == (60, 10, ["10.20.30.40/16", "fd00:1::0/64"])
    assert dataclasses.asdict(loaded.nftables) == {"masquerade_bit": 18, "masquerade_all": True, "sync_period": 60, "min_sync_period": 10}
    assert loaded.mode == mode
    assert (loaded.oom_score_adj, loaded.port_range) == (17, "2-7")
    assert loaded.node_port_addresses == ["10.20.30.40/16", "fd00:1::0/64"]
    assert loaded.detect_local_mode == "ClusterCIDR"
    assert dataclasses.asdict(loaded.detect_local) == {"bridge_interface": "cbr0", "interface_name_prefix": "veth"}
    assert (loaded.logging.format, loaded.logging.flush_frequency) == ("text", 5.0)


BASE = YAML_TEMPLATE.format(bind="9.8.7.6", cluster_cidr="1.2.3.0/24", healthz="1.2.3.4:12345", metrics="2.3.4.5:23456", mode="iptables")


@pytest.mark.parametrize(("extra", "error"), [
    pytest.param("foo: bar", 'strict decoding error: unknown field "foo"', id="unknown field"),
    pytest.param("bindAddress: 9.8.7.6", 'strict decoding error: duplicate field "bindAddress"', id="duplicate field"),
    pytest.param("winkernel:\n  sourceVip: 1.2.3.4\n  nope: 1\nlogging:\n  colour: red",
                 'strict decoding error: unknown field "winkernel.nope", unknown field "logging.colour"', id="unknown nested fields"),
])
def test_load_config_strict_and_lenient(extra, error):
    with pytest.raises(ConfigError) as raised:
        load_config(BASE + extra + "\n")
    assert str(raised.value) == error
    assert load_config(BASE + extra + "\n", strict=False).bind_address == "9.8.7.6"  # upstream's lenient v1alpha1 path


@pytest.mark.parametrize(("body", "error"), [
    pytest.param("Twas bryllyg, and ye slythy toves", "could not find expected ':'", id="Decode error test"),
    pytest.param("kind: KubeSchedulerConfiguration", 'no kind "KubeSchedulerConfiguration" is registered for version '
                 '"kubeproxy.config.k8s.io/v1alpha1" in scheme "pkg/proxy/apis/config/scheme/scheme.go:29"', id="Bad config type test"),
    pytest.param("bindAddress: ::", "mapping values are not allowed in this context", id="Missing quotes around :: bindAddress"),
    pytest.param("bindAddress: 1.2.3.4", "Object 'Kind' is missing in", id="missing kind"),
    pytest.param("kind: KubeProxyConfiguration\niptables:\n  masqueradeBit: x",
                 "json: cannot unmarshal string into Go struct field KubeProxyIPTablesConfiguration.iptables.masqueradeBit of type int32",
                 id="wrong type"),
    pytest.param("kind: KubeProxyConfiguration\nconfigSyncPeriod: 1", "json: cannot unmarshal number into Go struct field "
                 "KubeProxyConfiguration.configSyncPeriod of type string", id="duration as a number"),
    pytest.param("kind: KubeProxyConfiguration\nconfigSyncPeriod: soon", 'time: invalid duration "soon"', id="bad duration"),
    pytest.param("kind: KubeProxyConfiguration\nnodePortAddresses: 10.0.0.0/8",
                 "json: cannot unmarshal string into Go struct field KubeProxyConfiguration.nodePortAddresses of type []string", id="list expected"),
])
def test_load_config_failures(body, error):
    with pytest.raises(ConfigError) as raised:
        load_config("apiVersion: kubeproxy.config.k8s.io/v1alpha1\n" + body)
    assert error in str(raised.value)
    assert str(raised.value).startswith("failed to decode: ")


def test_load_config_wrong_api_version():
    with pytest.raises(ConfigError, match='no kind "KubeProxyConfiguration" is registered for version "kubeproxy.config.k8s.io/v1beta1"'):
        load_config("apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n")


def test_load_config_accepts_json():
    loaded = load_config('{"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration", "mode": "nftables",'
                         ' "nodePortAddresses": null, "conntrack": {"maxPerCore": 0}}')
    assert (loaded.mode, loaded.node_port_addresses, loaded.conntrack.max_per_core) == ("nftables", None, 0)


def test_default_config_matches_upstream_defaults():
    """pkg/proxy/apis/config/scheme/testdata/KubeProxyConfiguration/after/v1alpha1.yaml."""
    encoded = default_config().to_json()
    assert {k: encoded[k] for k in ("bindAddress", "bindAddressHardFail", "clusterCIDR", "configSyncPeriod", "detectLocalMode",
                                    "enableProfiling", "healthzBindAddress", "hostnameOverride", "metricsBindAddress", "mode",
                                    "nodePortAddresses", "oomScoreAdj", "portRange", "showHiddenMetricsForVersion")} == {
        "bindAddress": "0.0.0.0", "bindAddressHardFail": False, "clusterCIDR": "", "configSyncPeriod": "15m0s", "detectLocalMode": "",
        "enableProfiling": False, "healthzBindAddress": "0.0.0.0:10256", "hostnameOverride": "", "metricsBindAddress": "127.0.0.1:10249",
        "mode": "", "nodePortAddresses": None, "oomScoreAdj": -999, "portRange": "", "showHiddenMetricsForVersion": ""}
    assert encoded["clientConnection"] == {"acceptContentTypes": "", "burst": 10, "contentType": "application/vnd.kubernetes.protobuf",
                                           "kubeconfig": "", "qps": 5.0}
    assert encoded["conntrack"] == {"maxPerCore": 32768, "min": 131072, "tcpBeLiberal": False, "tcpCloseWaitTimeout": "1h0m0s",
                                    "tcpEstablishedTimeout": "24h0m0s", "udpStreamTimeout": "0s", "udpTimeout": "0s"}
    assert encoded["detectLocal"] == {"bridgeInterface": "", "interfaceNamePrefix": ""}
    assert encoded["iptables"] == {"localhostNodePorts": True, "masqueradeAll": False, "masqueradeBit": 14, "minSyncPeriod": "1s",
                                   "syncPeriod": "30s"}
    assert encoded["ipvs"] == {"excludeCIDRs": None, "minSyncPeriod": "0s", "scheduler": "", "strictARP": False, "syncPeriod": "30s",
                               "tcpFinTimeout": "0s", "tcpTimeout": "0s", "udpTimeout": "0s"}
    assert encoded["nftables"] == {"masqueradeAll": False, "masqueradeBit": 14, "minSyncPeriod": "1s", "syncPeriod": "30s"}
    assert (encoded["featureGates"], encoded["logging"]["format"], encoded["logging"]["flushFrequency"]) == ({}, "text", "5s")


@pytest.mark.parametrize(("bind", "healthz", "metrics", "expected_healthz", "expected_metrics"), [
    pytest.param("", "", "", "0.0.0.0:10256", "127.0.0.1:10249", id="IPv4 defaults"),
    pytest.param("fd00::1", "", "", "[::]:10256", "[::1]:10249", id="IPv6 bind address: IPv6 defaults"),
    pytest.param("", "1.2.3.4", "fd00::2", "1.2.3.4:10256", "[fd00::2]:10249", id="bare IPs get the default ports"),
    pytest.param("", "1.2.3.4:1", "[fd00::2]:2", "1.2.3.4:1", "[fd00::2]:2", id="ports kept"),
])
def test_default_bind_addresses(bind, healthz, metrics, expected_healthz, expected_metrics):
    config = cfg.set_defaults(KubeProxyConfiguration(bind_address=bind, healthz_bind_address=healthz, metrics_bind_address=metrics))
    assert (config.healthz_bind_address, config.metrics_bind_address) == (expected_healthz, expected_metrics)


# ---- flags and Complete ----------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "expected", "error"), [
    pytest.param("", "foo", False, id="Hostname from config file"),
    pytest.param("  bar ", "bar", False, id="Hostname from flag"),
    pytest.param("   ", None, True, id="Hostname is space"),
    pytest.param("Node-A", "node-a", False, id="Hostname lower-cased"),
])
def test_process_hostname_override_flag(tmp_path, flag, expected, error):
    path = tmp_path / "kube-proxy.yaml"
    path.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nhostnameOverride: foo\n")
    flags = ProxyFlags(config=str(path), hostname_override=flag)
    if error:
        with pytest.raises(ConfigError, match="^failed complete: empty hostname-override is invalid$"):
            complete(flags, nft_is_usable=True)
    else:
        assert complete(flags, nft_is_usable=True).hostname_override == expected


def test_options_complete_config_file_wins_over_flags(tmp_path):
    path = tmp_path / "kube-proxy.yaml"
    path.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n"
                    "clusterCIDR: 10.0.0.0/8\n")
    flags = ProxyFlags(config=str(path), proxy_mode="ipvs", cluster_cidr="192.168.0.0/16", ipvs_scheduler="some-scheduler",
                       masquerade_all=True, healthz_port=0, iptables_sync_period=5.0)
    config = complete(flags, nft_is_usable=True)
    assert (config.mode, config.cluster_cidr, config.ipvs.scheduler, config.iptables.masquerade_all) == ("iptables", "10.0.0.0/8", "", False)
    assert (config.healthz_bind_address, config.iptables.sync_period) == ("0.0.0.0:10256", 30.0)


def test_options_complete_without_config_file_uses_flags():
    flags = ProxyFlags(kubeconfig="/etc/kubeconfig", proxy_mode="iptables", cluster_cidr="10.0.0.0/8,fd00::/48",
                       nodeport_addresses=["192.168.0.0/16"], masquerade_all=True, iptables_masquerade_bit=10,
                       iptables_min_sync_period=0.5, iptables_sync_period=10.0, healthz_bind_address="127.0.0.1",
                       metrics_bind_address="0.0.0.0:9999", bind_address="192.168.1.1", feature_gates={"AllBeta": True},
                       detect_local_mode="NodeCIDR", config_sync_period=60.0, conntrack_max_per_core=0)
    config = complete(flags, nft_is_usable=True)
    assert config.client_connection.kubeconfig == "/etc/kubeconfig"
    assert (config.mode, config.cluster_cidr, config.node_port_addresses) == ("iptables", "10.0.0.0/8,fd00::/48", ["192.168.0.0/16"])
    assert (config.iptables.masquerade_all, config.iptables.masquerade_bit) == (True, 10)
    assert (config.iptables.min_sync_period, config.iptables.sync_period) == (0.5, 10.0)
    assert (config.healthz_bind_address, config.metrics_bind_address) == ("127.0.0.1:10256", "0.0.0.0:9999")
    assert (config.bind_address, config.feature_gates, config.detect_local_mode) == ("192.168.1.1", {"AllBeta": True}, "NodeCIDR")
    assert (config.config_sync_period, config.conntrack.max_per_core) == (60.0, 0)


@pytest.mark.parametrize(("mode", "flags", "expected"), [
    pytest.param("", ProxyFlags(iptables_sync_period=7.0, iptables_min_sync_period=2.0), (7.0, 2.0), id="iptables flags, default mode"),
    pytest.param("nftables", ProxyFlags(iptables_sync_period=7.0, iptables_min_sync_period=2.0), (7.0, 2.0),
                 id="iptables flags apply to nftables"),
    pytest.param("ipvs", ProxyFlags(iptables_sync_period=7.0, iptables_min_sync_period=2.0), (30.0, 0.0), id="iptables flags ignored in ipvs"),
    pytest.param("ipvs", ProxyFlags(ipvs_sync_period=9.0, ipvs_min_sync_period=3.0), (9.0, 3.0), id="ipvs flags in ipvs"),
    pytest.param("iptables", ProxyFlags(ipvs_sync_period=9.0, ipvs_min_sync_period=3.0), (30.0, 1.0), id="ipvs flags ignored in iptables"),
])
def test_process_v1alpha1_sync_period_flags(mode, flags, expected):
    flags.proxy_mode = mode or None
    config = complete(flags, nft_is_usable=True)
    assert cfg.effective_sync_periods(config) == expected


@pytest.mark.parametrize(("flags", "healthz", "metrics"), [
    pytest.param(ProxyFlags(healthz_bind_address="1.2.3.4", healthz_port=12345, metrics_bind_address="2.3.4.5", metrics_port=23456),
                 "1.2.3.4:12345", "2.3.4.5:23456", id="IPv4 bind address"),
    pytest.param(ProxyFlags(healthz_bind_address="1.2.3.4:12345", healthz_port=23456, metrics_bind_address="2.3.4.5:12345", metrics_port=23456),
                 "1.2.3.4:12345", "2.3.4.5:12345", id="IPv4 bind address has port"),
    pytest.param(ProxyFlags(healthz_bind_address="fd00:1::5", healthz_port=12345, metrics_bind_address="fd00:1::6", metrics_port=23456),
                 "[fd00:1::5]:12345", "[fd00:1::6]:23456", id="IPv6 bind address"),
    pytest.param(ProxyFlags(healthz_port=0, metrics_port=0), "", "", id="port 0 disables"),
])
def test_address_from_deprecated_flags(flags, healthz, metrics):
    config = complete(flags, nft_is_usable=True)
    assert (config.healthz_bind_address, config.metrics_bind_address) == (healthz, metrics)


def test_address_from_deprecated_flags_helper():
    assert cfg._address_from_deprecated_flags("1.2.3.4", 12345) == "1.2.3.4:12345"
    assert cfg._address_from_deprecated_flags("1.2.3.4:12345", 23456) == "1.2.3.4:12345"
    assert cfg._address_from_deprecated_flags("fd00:1::5", 12345) == "[fd00:1::5]:12345"
    assert cfg._address_from_deprecated_flags("1.2.3.4", 0) == ""


def test_unreadable_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"^failed complete: open .*missing.yaml: no such file or directory$"):
        complete(ProxyFlags(config=str(tmp_path / "missing.yaml")))


# ---- platform defaults and mode resolution ---------------------------------------------------


@pytest.mark.parametrize(("mode", "nft", "addresses", "expected_mode", "expected_addresses"), [
    pytest.param("", True, None, "nftables", ["primary"], id="blank mode, nft usable: nftables, primary NodePorts"),
    pytest.param("", False, None, "iptables", None, id="blank mode, no nft: iptables, NodePorts everywhere"),
    pytest.param("nftables", False, ["10.0.0.0/8"], "nftables", ["10.0.0.0/8"], id="explicit nftables keeps its addresses"),
    pytest.param("nftables", True, [], "nftables", ["primary"], id="empty list is unset"),
    pytest.param("ipvs", True, None, "ipvs", None, id="ipvs accepted"),
    pytest.param("userspace", True, None, "userspace", None, id="userspace accepted"),
])
def test_platform_defaults(mode, nft, addresses, expected_mode, expected_addresses):
    config = default_config()
    config.mode, config.node_port_addresses = mode, addresses
    apply_platform_defaults(config, nft)
    assert (config.mode, config.node_port_addresses, config.detect_local_mode) == (expected_mode, expected_addresses, "ClusterCIDR")


# ---- validation (TestValidateKubeProxyConfiguration and friends) --------------------------------


def base_config(**changes) -> KubeProxyConfiguration:
    config = cfg.set_defaults(KubeProxyConfiguration(
        bind_address="192.168.59.103", healthz_bind_address="0.0.0.0:10256", metrics_bind_address="127.0.0.1:10249",
        cluster_cidr="192.168.59.0/24", config_sync_period=1.0, mode="iptables", detect_local_mode="ClusterCIDR"))
    config.iptables.masquerade_all, config.iptables.sync_period, config.iptables.min_sync_period = True, 5.0, 2.0
    config.conntrack.max_per_core = config.conntrack.min = 1
    config.conntrack.tcp_established_timeout = config.conntrack.tcp_close_wait_timeout = 5.0
    for name, value in changes.items():
        target = config
        *parents, leaf = name.split("__")
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)
    return config


VALID = {
    "base case": {},
    "different proxy mode": {"mode": "ipvs", "ipvs__sync_period": 10.0, "ipvs__min_sync_period": 5.0},
    "nftables mode": {"mode": "nftables", "nftables__sync_period": 10.0, "nftables__min_sync_period": 5.0},
    "empty healthz bind address": {"healthz_bind_address": ""},
    "ipv6 only cluster": {"bind_address": "fd00:192:168:59::103", "healthz_bind_address": "", "metrics_bind_address": "[::1]:10249",
                          "cluster_cidr": "fd00:192:168:59::/64"},
    "custom port for healthz bind address": {"healthz_bind_address": "0.0.0.0:12345"},
    "ipv6 cluster cidr": {"cluster_cidr": "fd00:192:168::/64"},
    "dual stack cluster cidr": {"cluster_cidr": "192.168.59.0/24,fd00:192:168::/64"},
    "detect local mode interface prefix": {"detect_local_mode": "InterfaceNamePrefix", "detect_local__interface_name_prefix": "vethabcde"},
    "detect local mode bridge prefix": {"detect_local_mode": "BridgeInterface", "detect_local__bridge_interface": "avz"},
    "minSyncPeriod can be 0": {"iptables__min_sync_period": 0.0},
    "primary nodePortAddresses": {"node_port_addresses": ["primary"]},
    "known feature gate": {"feature_gates": {"PreferSameTrafficDistribution": True}},
    "previous minor version for hidden metrics": {"show_hidden_metrics_for_version": "1.32"},
    "valid port range": {"port_range": "2-7"},
    "json logging": {"logging__format": "json"},
}


@pytest.mark.parametrize("changes", list(VALID.values()), ids=list(VALID))
def test_validate_kube_proxy_configuration_success(changes):
    assert validate(base_config(**changes)) == []


INVALID = {
    "invalid BindAddress": ({"bind_address": "10.10.12.11:2000"},
                            [f'{ROOT}.BindAddress: Invalid value: "10.10.12.11:2000": not a valid textual representation of an IP address']),
    "invalid HealthzBindAddress": ({"healthz_bind_address": "0.0.0.0"}, [f'{ROOT}.HealthzBindAddress: Invalid value: "0.0.0.0": must be IP:port']),
    "invalid MetricsBindAddress": ({"metrics_bind_address": "127.0.0.1"},
                                   [f'{ROOT}.MetricsBindAddress: Invalid value: "127.0.0.1": must be IP:port']),
    "clusterCIDR missing subset range": (
        {"cluster_cidr": "192.168.59.0"},
        [f'{ROOT}.DetectLocalConfiguration.ClusterCIDRs[0]: Invalid value: "192.168.59.0": '
         "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"]),
    "invalid number of ClusterCIDRs": (
        {"cluster_cidr": "192.168.59.0/24,fd00:192:168::/64,10.0.0.0/16"},
        [f'{ROOT}.DetectLocalConfiguration.ClusterCIDRs: Invalid value: []string{{"192.168.59.0/24", "fd00:192:168::/64", "10.0.0.0/16"}}: '
         "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48]"]),
    "ClusterCIDRs of one family": (
        {"cluster_cidr": "10.0.0.0/8,192.168.0.0/16"},
        [f'{ROOT}.DetectLocalConfiguration.ClusterCIDRs: Invalid value: []string{{"10.0.0.0/8", "192.168.0.0/16"}}: '
         "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48]"]),
    "configSyncPeriod must be > 0": ({"config_sync_period": -1.0}, [f"{ROOT}.ConfigSyncPeriod: Invalid value: -1s: must be greater than 0"]),
    "ipvs mode selected without providing required SyncPeriod": (
        {"mode": "ipvs", "ipvs__sync_period": 0.0}, [f"{ROOT}.SyncPeriod: Invalid value: 0s: must be greater than 0"]),
    "SyncPeriod must be >= MinSyncPeriod": (
        {"iptables__sync_period": 1.0, "iptables__min_sync_period": 5.0},
        [f"{ROOT}.SyncPeriod: Invalid value: 5s: must be greater than or equal to {ROOT}.MinSyncPeriod"]),
    "SyncPeriod must be > 0": (
        {"iptables__sync_period": -5.0},
        [f"{ROOT}.SyncPeriod: Invalid value: -5s: must be greater than 0",
         f"{ROOT}.SyncPeriod: Invalid value: 2s: must be greater than or equal to {ROOT}.MinSyncPeriod"]),
    "MinSyncPeriod must be > 0": ({"iptables__min_sync_period": -1.0},
                                  [f"{ROOT}.MinSyncPeriod: Invalid value: -1s: must be greater than or equal to 0"]),
    "nftables sync periods are the nftables section's": (
        {"mode": "nftables", "nftables__sync_period": 1.0, "nftables__min_sync_period": 1.5},
        [f"{ROOT}.SyncPeriod: Invalid value: 1.5s: must be greater than or equal to {ROOT}.MinSyncPeriod"]),
    "interfacePrefix is empty": ({"detect_local_mode": "InterfaceNamePrefix"},
                                 [f'{ROOT}.DetectLocalConfiguration.InterfacePrefix: Invalid value: "": must not be empty']),
    "bridgeInterfaceName is empty": ({"detect_local_mode": "BridgeInterface", "detect_local__interface_name_prefix": "eth0"},
                                     [f'{ROOT}.DetectLocalConfiguration.InterfaceName: Invalid value: "": must not be empty']),
    "invalid DetectLocalMode": ({"detect_local_mode": "Guess"},
                                [f'{ROOT}.DetectLocalMode: Unsupported value: "Guess": supported values: '
                                 '"ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", ""']),
    "invalid logging format": ({"logging__format": "unsupported format"},
                               [f'{ROOT}.logging.format: Invalid value: "unsupported format": Unsupported log format']),
    "MasqueradeBit cannot be > 31": ({"iptables__masquerade_bit": 32},
                                     [f"{ROOT}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: must be within the range [0, 31]"]),
    "MasqueradeBit cannot be < 0": ({"iptables__masquerade_bit": -10},
                                    [f"{ROOT}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: -10: must be within the range [0, 31]"]),
    "nftables MasqueradeBit checked in nftables mode": (
        {"mode": "nftables", "nftables__masquerade_bit": 40},
        [f"{ROOT}.KubeProxyNFTablesConfiguration.MasqueradeBit: Invalid value: 40: must be within the range [0, 31]"]),
    "nftables MasqueradeBit ignored in iptables mode": ({"nftables__masquerade_bit": 40}, []),
    "invalid proxy mode": ({"mode": "kernelspace"},
                           [f'{ROOT}.Mode.ProxyMode: Invalid value: "kernelspace": must be iptables, ipvs, nftables, userspace or blank '
                            "(blank means the best-available proxy [currently nftables, or iptables where nft is not usable])"]),
    "burst < 0": ({"client_connection__burst": -5}, [f"{ROOT}.ClientConnection.Burst: Invalid value: -5: must be greater than or equal to 0"]),
    "OOMScoreAdj out of range": ({"oom_score_adj": 1001},
                                 [f"{ROOT}.KubeProxyLinuxConfiguration.OOMScoreAdj: Invalid value: 1001: must be within the range [-1000, 1000]"]),
    "invalid port range": ({"port_range": "7-2"}, [f'{ROOT}.PortRange: Invalid value: "7-2": must be a valid port range (e.g. 300-2000)']),
    "unknown feature gate": ({"feature_gates": {"Foo": True, "AllBeta": False}},
                             [f'{ROOT}.featureGates: Invalid value: map[string]bool{{"AllBeta":false, "Foo":true}}: unrecognized feature gate: Foo']),
    "hidden metrics for another version": (
        {"show_hidden_metrics_for_version": "1.30"},
        [f'{ROOT}.ShowHiddenMetricsForVersion: Invalid value: "1.30": --show-hidden-metrics-for-version must be omitted or have '
         "the value '1.32'. Only the previous minor version is allowed"]),
}


@pytest.mark.parametrize(("changes", "expected"), list(INVALID.values()), ids=list(INVALID))
def test_validate_kube_proxy_configuration_errors(changes, expected):
    assert [str(error) for error in validate(base_config(**changes))] == expected


CONNTRACK = f"{ROOT}.KubeProxyLinuxConfiguration.KubeProxyConntrackConfiguration"


@pytest.mark.parametrize(("changes", "expected"), [
    pytest.param({}, [], id="valid 5 second timeouts"),
    pytest.param({"conntrack__tcp_established_timeout": 0.0, "conntrack__tcp_close_wait_timeout": 0.0}, [],
                 id="valid duration equal to 0 second timeout"),
    pytest.param({"conntrack__max_per_core": -1}, [f"{CONNTRACK}.MaxPerCore: Invalid value: -1: must be greater than or equal to 0"],
                 id="invalid MaxPerCore < 0"),
    pytest.param({"conntrack__min": -1}, [f"{CONNTRACK}.Min: Invalid value: -1: must be greater than or equal to 0"], id="invalid minimum < 0"),
    pytest.param({"conntrack__tcp_established_timeout": -5.0},
                 [f"{CONNTRACK}.TCPEstablishedTimeout: Invalid value: -5s: must be greater than or equal to 0"], id="invalid TCPEstablishedTimeout < 0"),
    pytest.param({"conntrack__tcp_close_wait_timeout": -5.0},
                 [f"{CONNTRACK}.TCPCloseWaitTimeout: Invalid value: -5s: must be greater than or equal to 0"], id="invalid TCPCloseWaitTimeout < 0"),
    pytest.param({"conntrack__udp_timeout": -5.0}, [f"{CONNTRACK}.UDPTimeout: Invalid value: -5s: must be greater than or equal to 0"],
                 id="invalid UDPTimeout < 0"),
    pytest.param({"conntrack__udp_stream_timeout": -5.0},
                 [f"{CONNTRACK}.UDPStreamTimeout: Invalid value: -5s: must be greater than or equal to 0"], id="invalid UDPStreamTimeout < 0"),
])
def test_validate_kube_proxy_conntrack_configuration(changes, expected):
    assert [str(error) for error in validate(base_config(**changes))] == expected


IPVS_PATH = f"{ROOT}.KubeProxyIPVSConfiguration"


@pytest.mark.parametrize(("changes", "expected"), [
    pytest.param({"ipvs__sync_period": 10.0, "ipvs__min_sync_period": 10.0}, [], id="SyncPeriod == MinSyncPeriod"),
    pytest.param({"ipvs__sync_period": 5.0, "ipvs__min_sync_period": 0.0}, [], id="MinSyncPeriod can be 0"),
    pytest.param({"ipvs__sync_period": 0.0, "ipvs__min_sync_period": 10.0},
                 [f"{ROOT}.SyncPeriod: Invalid value: 0s: must be greater than 0",
                  f"{ROOT}.SyncPeriod: Invalid value: 10s: must be greater than or equal to {ROOT}.MinSyncPeriod"], id="SyncPeriod cannot be 0"),
    pytest.param({"ipvs__tcp_timeout": 1.0, "ipvs__tcp_fin_timeout": 2.0, "ipvs__udp_timeout": 3.0}, [], id="IPVS Timeout > 0"),
    pytest.param({"ipvs__tcp_timeout": -1.0, "ipvs__tcp_fin_timeout": -1.0, "ipvs__udp_timeout": -1.0},
                 [f"{IPVS_PATH}.TCPTimeout: Invalid value: -1s: must be greater than or equal to 0",
                  f"{IPVS_PATH}.TCPFinTimeout: Invalid value: -1s: must be greater than or equal to 0",
                  f"{IPVS_PATH}.UDPTimeout: Invalid value: -1s: must be greater than or equal to 0"], id="TCP,TCPFin,UDP Timeouts < 0"),
    pytest.param({"ipvs__exclude_cidrs": ["10.0.0.0/8", "1.2.3", "::1/128"]},
                 [f'{IPVS_PATH}.ExcludeCidrs[1]: Invalid value: "1.2.3": must be a valid CIDR'], id="invalid exclude CIDR"),
])
def test_validate_kube_proxy_ipvs_configuration(changes, expected):
    errors = validate(base_config(mode="ipvs", **{"ipvs__sync_period": 10.0, **changes}))
    assert [str(error) for error in errors] == expected


@pytest.mark.parametrize(("address", "expected"), [
    pytest.param("0.0.0.0:10256", [], id="all IPs"),
    pytest.param("127.0.0.1:10256", [], id="localhost"),
    pytest.param("10.10.10.10:10256", [], id="specific IP"),
    pytest.param("[fd00::1]:10256", [], id="IPv6"),
    pytest.param("10.10.10.10", ['"10.10.10.10": must be IP:port'], id="missing port"),
    pytest.param("123.456.789.10:12345", ['"123.456.789.10": must be a valid IP'], id="digits outside of 1-255"),
    pytest.param("10.10.10.10:foo", ['"foo": must be a valid port'], id="invalid named-port"),
    pytest.param("10.10.10.10:0", ['"0": must be a valid port'], id="port cannot be 0"),
    pytest.param("10.10.10.10:65536", ['"65536": must be a valid port'], id="port is greater than allowed range"),
    pytest.param("10.10.10.10:+80", [], id="Atoi takes a plus sign"),
    pytest.param("10.10.10.10:\u0663", ['"\u0663": must be a valid port'], id="Atoi takes ASCII digits only"),
])
def test_validate_host_port(address, expected):
    errors = validate(base_config(healthz_bind_address=address))
    assert [str(error) for error in errors] == [f"{ROOT}.HealthzBindAddress: Invalid value: {e}" for e in expected]


NODE_PORT_ADDRESS_CASES = {
    "no addresses": ([], []),
    "valid 1": (["127.0.0.0/8"], []),
    "valid 2": (["0.0.0.0/0"], []),
    "valid 3": (["::/0"], []),
    "valid 4": (["127.0.0.1/32", "1.2.3.0/24"], []),
    "valid 9": (["10.20.0.0/16", "100.200.0.0/16"], []),
    "valid 11": (["2001:db8::/32"], []),
    "primary": (["primary"], []),
    "invalid foo address": (["foo"], [("[0]", "foo", "must be a valid CIDR")]),
    "invalid octet address": (["10.0.0.0/0", "1.2.3"], [("[1]", "1.2.3", "must be a valid CIDR")]),
    "address cannot be 0": (["127.0.0.1/32", "0", "1.2.3.0/24"], [("[1]", "0", "must be a valid CIDR")]),
    "address missing subnet range": (["127.0.0.1/32", "10.20.30.40", "1.2.3.0/24"], [("[1]", "10.20.30.40", "must be a valid CIDR")]),
    "missing ipv6 subnet ranges": (["::0", "::1", "2001:db8::/32"], [("[0]", "::0", "must be a valid CIDR"), ("[1]", "::1", "must be a valid CIDR")]),
    "invalid ipv6 ip format": (["::1/128", "2001:db8::/32", "2001:db8:xyz/64"], [("[2]", "2001:db8:xyz/64", "must be a valid CIDR")]),
    "invalid primary/CIDR mix 1": (["primary", "127.0.0.1/32"], [("[0]", "primary", "can't use both 'primary' and CIDRs")]),
    "invalid primary/CIDR mix 2": (["127.0.0.1/32", "primary"], [("[1]", "primary", "can't use both 'primary' and CIDRs")]),
}


@pytest.mark.parametrize(("addresses", "expected"), list(NODE_PORT_ADDRESS_CASES.values()), ids=list(NODE_PORT_ADDRESS_CASES))
def test_validate_kube_proxy_node_port_address(addresses, expected):
    errors = validate(base_config(node_port_addresses=addresses))
    assert [str(error) for error in errors] == [f'{ROOT}.NodePortAddresses{i}: Invalid value: "{v}": {d}' for i, v, d in expected]


def test_aggregate_error_formats_one_or_many_and_drops_repeats():
    errors = validate(base_config(iptables__masquerade_bit=32, bind_address="x"))
    assert aggregate_error(errors[:1]) == f"{ROOT}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: must be within the range [0, 31]"
    assert aggregate_error(errors + errors[:1]) == (
        f"[{ROOT}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: must be within the range [0, 31], "
        f'{ROOT}.BindAddress: Invalid value: "x": not a valid textual representation of an IP address]')


# ---- resolve and per-family options -----------------------------------------------------------


def _loaded(body: str) -> KubeProxyConfiguration:
    return load_config("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + textwrap.dedent(body))


SECTIONS = """\
iptables: {masqueradeAll: false, masqueradeBit: 10, syncPeriod: 11s, minSyncPeriod: 1s}
ipvs: {syncPeriod: 12s, minSyncPeriod: 2s}
nftables: {masqueradeAll: true, masqueradeBit: 20, syncPeriod: 13s, minSyncPeriod: 3s}
"""


@pytest.mark.parametrize(("mode", "sync", "min_sync", "masquerade_all", "masquerade_bit"), [
    pytest.param("iptables", 11.0, 1.0, False, 10, id="iptables"),
    pytest.param("ipvs", 12.0, 2.0, False, 10, id="ipvs uses its periods and the iptables bit"),
    pytest.param("nftables", 13.0, 3.0, True, 20, id="nftables"),
    pytest.param("userspace", 11.0, 1.0, False, 10, id="userspace uses the iptables section"),
])
def test_resolve_takes_the_active_modes_section(mode, sync, min_sync, masquerade_all, masquerade_bit):
    settings = resolve(_loaded(f"mode: {mode}\n" + SECTIONS), os_hostname=lambda: "node-1")
    assert (settings.mode, settings.sync_period, settings.min_sync_period) == (mode, sync, min_sync)
    assert (settings.masquerade_all, settings.masquerade_bit, settings.health_timeout) == (masquerade_all, masquerade_bit, 2 * sync)


def test_resolve_defaults():
    settings = resolve(default_config(), nft_is_usable=False, os_hostname=lambda: " Worker-7 ")
    assert (settings.mode, settings.hostname, settings.nodeport_addresses, settings.detect_local_mode) == ("iptables", "worker-7", (), "ClusterCIDR")
    assert (settings.healthz_bind_address, settings.metrics_bind_address, settings.config_sync_period) == ("0.0.0.0:10256", "127.0.0.1:10249", 900.0)
    assert settings.conntrack.max_entries(4) == 131072 and settings.conntrack.max_entries(8) == 262144
    assert settings.configz()["mode"] == "iptables"
    assert resolve(default_config(), nft_is_usable=True, os_hostname=lambda: "n").nodeport_addresses == ("primary",)


def test_resolve_feature_gates_and_cidrs():
    settings = resolve(_loaded("mode: nftables\nclusterCIDR: 10.0.0.0/8,fd00::/48\nfeatureGates: {PreferSameTrafficDistribution: true}\n"),
                       os_hostname=lambda: "n")
    assert settings.cluster_cidrs == ("10.0.0.0/8", "fd00::/48")
    assert settings.feature_enabled("PreferSameTrafficDistribution") and settings.feature_enabled("ServiceTrafficDistribution")


def test_resolve_rejects_invalid_configuration():
    with pytest.raises(ConfigError) as raised:
        resolve(_loaded("iptables: {masqueradeBit: 32}\nmode: iptables\n"), os_hostname=lambda: "n")
    assert str(raised.value) == (f"failed validate: {ROOT}.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: "
                                 "must be within the range [0, 31]")


def test_resolve_rejects_empty_hostname():
    with pytest.raises(ConfigError, match="^empty hostname is invalid$"):
        resolve(_loaded("mode: iptables\n"), os_hostname=lambda: "  ")


NODE = {"metadata": {"name": "node-1"}, "spec": {"podCIDRs": ["10.244.1.0/24", "fd00:244:1::/64"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]}}


@pytest.mark.parametrize(("body", "family", "node", "nft_local", "localhost"), [
    pytest.param("mode: iptables\nclusterCIDR: 10.0.0.0/8,fd00::/48\n", IPV4, None, "ip saddr 10.0.0.0/8", True,
                 id="iptables IPv4: cluster CIDR, localhost NodePorts"),
    pytest.param("mode: iptables\nclusterCIDR: 10.0.0.0/8,fd00::/48\n", IPV6, None, "ip6 saddr fd00::/48", False,
                 id="iptables IPv6: never localhost NodePorts"),
    pytest.param("mode: iptables\nclusterCIDR: 10.0.0.0/8\niptables: {localhostNodePorts: false}\n", IPV4, None, "ip saddr 10.0.0.0/8", False,
                 id="localhostNodePorts disabled"),
    pytest.param("mode: iptables\nnodePortAddresses: [192.168.0.0/16]\n", IPV4, NODE, "", False,
                 id="nodePortAddresses without loopback: no localhost NodePorts, no CIDR: no-op detector"),
    pytest.param("mode: nftables\ndetectLocalMode: NodeCIDR\n", IPV4, NODE, "ip saddr 10.244.1.0/24", False, id="nftables NodeCIDR"),
    pytest.param("mode: nftables\ndetectLocalMode: InterfaceNamePrefix\ndetectLocal: {interfaceNamePrefix: veth}\n", IPV6, NODE, "iif veth*",
                 False, id="interface prefix"),
])
def test_options_for_family(body, family, node, nft_local, localhost):
    settings = resolve(_loaded(body), os_hostname=lambda: "Node-1")
    options = options_for_family(settings, family, node)
    assert (options.family, options.node_name, options.masquerade_bit) == (family, "node-1", 14)
    assert options.local_detector.nft_if_local() == nft_local
    assert options.localhost_nodeports is localhost


# ---- small helpers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (5e-9, "5ns"), (1.5e-6, "1.5µs"), (0.25, "250ms"), (1, "1s"), (1.5, "1.5s"), (90, "1m30s"), (900, "15m0s"),
    (3600, "1h0m0s"), (86400, "24h0m0s"), (-1, "-1s"), (3661.5, "1h1m1.5s"),
])
def test_format_go_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("value", "error"), [
    ("", None), ("1.2.3.4", None), ("1.2.3.4:10256", None), ("[::]:10256", None), ("::", None),
    ("1.2.3.4:x", '"x" is not a valid number'), ("foo:1", '"foo" is not a valid IP address'),
    ("foo", '"foo" is not in a valid format (ip or ip:port): address foo: missing port in address'),
    ("1.2.3.4:0", None), ("1.2.3.4:+80", '"+80" is not a valid number'), ("1.2.3.4:65536", '"65536" is not a valid number'),
])
def test_check_ip_port_flag(value, error):
    assert check_ip_port_flag(value) == error


def test_check_ip_flag():
    assert check_ip_flag("10.0.0.1") is None and check_ip_flag("") is None
    assert check_ip_flag("10.0.0.1:80") == '"10.0.0.1:80" is not a valid IP address'


@pytest.mark.parametrize("address, joined", [
    ("1.2.3.4", "1.2.3.4:10256"), ("fd00::1", "[fd00::1]:10256"), ("1.2.3.4:80", "1.2.3.4:80"),
    ("[fd00::1]:80", "[fd00::1]:80"), ("not-an-ip", "not-an-ip"),
    ("::ffff:1.2.3.4", "::ffff:1.2.3.4:10256"),  # To4() != nil: no brackets, as upstream
])
def test_append_port_if_needed(address, joined):
    """proxyutil.AppendPortIfNeeded."""
    assert append_port_if_needed(address, 10256) == joined
