"""kube-proxy's configuration: the ``KubeProxyConfiguration`` file (``kubeproxy.config.k8s.io/v1alpha1``),
its command-line flags, defaults, validation, and the settings the proxy runs with.

Upstream sources: ``pkg/proxy/apis/config/v1alpha1`` (types, ``defaults.go``, ``conversion.go``),
``pkg/proxy/apis/config/validation/validation.go``, ``cmd/kube-proxy/app/options.go`` and
``server_linux.go``. The path a configuration takes, as upstream's ``Options.Complete`` →
``Validate`` → ``newProxyServer``:

1. **Load or flag.** With ``--config FILE`` the file is the whole configuration: it is decoded
   (YAML or JSON; ``kind``/``apiVersion`` must be ``KubeProxyConfiguration`` /
   ``kubeproxy.config.k8s.io/v1alpha1``; unknown or repeated fields are an error, see below),
   defaulted, and every other flag is ignored except ``--hostname-override`` (and the logging
   flags, ``--master``, ``--cleanup``, which are not configuration). Without ``--config`` the
   defaults are overlaid with the flags given.
2. **Platform defaults** (``platformApplyDefaults``): an empty ``mode`` becomes ``nftables`` when
   the ``nft`` tool is usable here, else ``iptables`` (upstream picks iptables; we prefer
   nftables); in nftables mode an unset ``nodePortAddresses`` becomes ``["primary"]``; an empty
   ``detectLocalMode`` becomes ``ClusterCIDR``.
3. **Validate** with upstream's field paths and messages, e.g.
   ``KubeProxyConfiguration.KubeProxyIPTablesConfiguration.MasqueradeBit: Invalid value: 32: must be within the range [0, 31]``
   (upstream names paths after its internal Go types, not the YAML keys). Several errors print
   as ``[first, second]``.
4. **Resolve** into ``ProxySettings``: the file keeps one section per mode, the running proxy one
   value each. ``syncPeriod``/``minSyncPeriod`` come from the active mode's section (iptables
   for iptables and userspace, ``ipvs``, ``nftables``), ``masqueradeAll`` from ``nftables`` in
   nftables mode else ``iptables``, ``masqueradeBit`` from ``nftables`` in nftables mode else
   ``iptables`` (ipvs uses the iptables bit); the health timeout is 2 × ``syncPeriod``.

Meaning of the sync periods: ``minSyncPeriod`` rate-limits syncs; ``syncPeriod`` is the retry
delay after a failed sync (and the iptables canary check period), not a periodic resync.

Strictness: upstream tries a strict decode and, for v1alpha1, falls back to a lenient one that
only logs ``Using lenient decoding as strict decoding failed``. We fail on the strict error
(``strict decoding error: unknown field "iptables.foo"``) so a typo never silently runs with
defaults; ``load_config(..., strict=False)`` restores upstream's lenient behaviour.

Durations are Go duration strings (``30s``, ``1m0s``, ``250ms``) in the file and float seconds
in Python.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import logging
import shutil
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from kubesvc.api.decode import json_kind
from kubesvc.api.errors import FieldError, GoSyntax, invalid_value
from kubesvc.proxy.backend import ProxyOptions
from kubesvc.proxy.localdetector import DETECT_LOCAL_MODES, new_local_detector
from kubesvc.util.golang import quote as go_quote
from kubesvc.util.ipnet import parse_cidr_sloppy, parse_ip_sloppy
from kubesvc.proxy.nodeportaddresses import NODE_PORT_ADDRESSES_PRIMARY, NodePortAddresses, node_ips_from_node
from kubesvc.proxy.types import IPV4
from kubesvc.util import golang
from kubesvc.util.golang import format_duration, parse_duration
from kubesvc.util.ipnet import parse_port_range, split_host_port

log = logging.getLogger("kubesvc.proxy.config")

GROUP = "kubeproxy.config.k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "KubeProxyConfiguration"
SCHEME_NAME = "pkg/proxy/apis/config/scheme/scheme.go:29"

IPTABLES, IPVS, NFTABLES, USERSPACE = "iptables", "ipvs", "nftables", "userspace"
PROXY_MODES = (IPTABLES, IPVS, NFTABLES, USERSPACE)

PROXY_HEALTHZ_PORT = 10256  # ports.ProxyHealthzPort
PROXY_STATUS_PORT = 10249  # ports.ProxyStatusPort (metrics)
KUBE_PROXY_OOM_SCORE_ADJ = -999  # qos.KubeProxyOOMScoreAdj
# The Kubernetes minor version we follow; --show-hidden-metrics-for-version accepts the previous one.
KUBE_VERSION = (1, 33)
LOG_FORMATS = ("json", "text")

# Feature gates kube-proxy knows, with their defaults (Kubernetes 1.33).
PROXY_FEATURE_GATES: Mapping[str, bool] = MappingProxyType({
    "AllAlpha": False,
    "AllBeta": False,
    "ComponentFlagz": False,
    "ComponentStatusz": False,
    "ContextualLogging": True,
    "KubeProxyDrainingTerminatingNodes": True,
    "LoadBalancerIPMode": True,
    "LoggingAlphaOptions": False,
    "LoggingBetaOptions": True,
    "MultiCIDRServiceAllocator": True,
    "NFTablesProxyMode": True,
    "PreferSameTrafficDistribution": True,  # 1.34's default (beta; alpha, off in 1.33): the apiserver and controller-manager here take PreferSameZone/Node
    "ServiceTrafficDistribution": True,
    "TopologyAwareHints": True,
})


class ConfigError(Exception):
    """A configuration that cannot be used. ``str()`` is one line, prefixed like kube-proxy's
    ``RunE`` (``failed complete: ...`` / ``failed validate: ...``) when ``stage`` is given."""

    def __init__(self, message: str, stage: str = ""):
        self.message = message
        self.stage = stage
        super().__init__(f"failed {stage}: {message}" if stage else message)


# ---- address flags ---------------------------------------------------------------------------


def append_port_if_needed(address: str, port: int) -> str:
    """``proxyutil.AppendPortIfNeeded``: add ``:port`` to a bare IP; anything else unchanged."""
    try:
        split_host_port(address)
        return address
    except ValueError:
        pass
    ip = parse_ip_sloppy(address)
    if ip is None:
        return address
    # Not ipnet.join_host_port: upstream brackets by To4() == nil, not by a colon, so a mapped
    # ::ffff:1.2.3.4 gets no brackets here
    return f"[{address}]:{port}" if ip.version == 6 else f"{address}:{port}"


def check_ip_flag(value: str) -> str | None:
    """Upstream ``utilflag.IPVar`` (``--bind-address``): None if fine, else the error."""
    if value and parse_ip_sloppy(value) is None:
        return f"{go_quote(value)} is not a valid IP address"
    return None


def check_ip_port_flag(value: str) -> str | None:
    """Upstream ``utilflag.IPPortVar`` (``--healthz-bind-address``, ``--metrics-bind-address``):
    an IP, or IP:port, or empty."""
    if not value or parse_ip_sloppy(value) is not None:
        return None
    try:
        host, port = split_host_port(value)
    except ValueError as err:
        return f"{go_quote(value)} is not in a valid format (ip or ip:port): address {value}: {err}"
    if parse_ip_sloppy(host) is None:
        return f"{go_quote(host)} is not a valid IP address"
    try:
        golang.parse_uint(port, 16)  # netutils.ParsePort(port, true)
    except ValueError:
        return f"{go_quote(port)} is not a valid number"
    return None


# ---- the model (v1alpha1, field for field) -----------------------------------------------------
#
# Field metadata: "json" (the key in the file) and "go" (the Go type, for decoding and for Go's
# error text). Go types: string, bool, int32, float32, duration (metav1.Duration), []string,
# map[string]bool, raw (kept as decoded), or a nested dataclass. "ptr": the Go field is a
# pointer, so unset (None) is distinct from zero and defaulting only fills None.


def _f(json_name: str, go: str, default: Any = None, *, ptr: bool = False, factory: Callable | None = None):
    meta = {"json": json_name, "go": go, "ptr": ptr}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ClientConnectionConfiguration:
    kubeconfig: str = _f("kubeconfig", "string", "")
    accept_content_types: str = _f("acceptContentTypes", "string", "")
    content_type: str = _f("contentType", "string", "")
    qps: float = _f("qps", "float32", 0.0)
    burst: int = _f("burst", "int32", 0)


@dataclass
class KubeProxyIPTablesConfiguration:
    masquerade_bit: int | None = _f("masqueradeBit", "int32", ptr=True)
    masquerade_all: bool = _f("masqueradeAll", "bool", False)
    localhost_nodeports: bool | None = _f("localhostNodePorts", "bool", ptr=True)
    sync_period: float = _f("syncPeriod", "duration", 0.0)
    min_sync_period: float = _f("minSyncPeriod", "duration", 0.0)


@dataclass
class KubeProxyIPVSConfiguration:
    sync_period: float = _f("syncPeriod", "duration", 0.0)
    min_sync_period: float = _f("minSyncPeriod", "duration", 0.0)
    scheduler: str = _f("scheduler", "string", "")
    exclude_cidrs: list[str] | None = _f("excludeCIDRs", "[]string")
    strict_arp: bool = _f("strictARP", "bool", False)
    tcp_timeout: float = _f("tcpTimeout", "duration", 0.0)
    tcp_fin_timeout: float = _f("tcpFinTimeout", "duration", 0.0)
    udp_timeout: float = _f("udpTimeout", "duration", 0.0)


@dataclass
class KubeProxyNFTablesConfiguration:
    masquerade_bit: int | None = _f("masqueradeBit", "int32", ptr=True)
    masquerade_all: bool = _f("masqueradeAll", "bool", False)
    sync_period: float = _f("syncPeriod", "duration", 0.0)
    min_sync_period: float = _f("minSyncPeriod", "duration", 0.0)


@dataclass
class KubeProxyConntrackConfiguration:
    max_per_core: int | None = _f("maxPerCore", "int32", ptr=True)
    min: int | None = _f("min", "int32", ptr=True)
    tcp_established_timeout: float | None = _f("tcpEstablishedTimeout", "duration", ptr=True)
    tcp_close_wait_timeout: float | None = _f("tcpCloseWaitTimeout", "duration", ptr=True)
    tcp_be_liberal: bool = _f("tcpBeLiberal", "bool", False)
    udp_timeout: float = _f("udpTimeout", "duration", 0.0)
    udp_stream_timeout: float = _f("udpStreamTimeout", "duration", 0.0)


@dataclass
class KubeProxyWinkernelConfiguration:
    network_name: str = _f("networkName", "string", "")
    source_vip: str = _f("sourceVip", "string", "")
    enable_dsr: bool = _f("enableDSR", "bool", False)
    root_hns_endpoint_name: str = _f("rootHnsEndpointName", "string", "")
    forward_health_check_vip: bool = _f("forwardHealthCheckVip", "bool", False)


@dataclass
class DetectLocalConfiguration:
    bridge_interface: str = _f("bridgeInterface", "string", "")
    interface_name_prefix: str = _f("interfaceNamePrefix", "string", "")


@dataclass
class VModuleItem:
    file_pattern: str = _f("filePattern", "string", "")
    verbosity: int = _f("verbosity", "int32", 0)


@dataclass
class LoggingConfiguration:
    """component-base ``LoggingConfiguration`` (``flushFrequency`` also takes nanoseconds)."""

    format: str = _f("format", "string", "")
    flush_frequency: float = _f("flushFrequency", "duration-or-nanos", 0.0)
    verbosity: int = _f("verbosity", "int32", 0)
    vmodule: list[VModuleItem] | None = _f("vmodule", "[]VModuleItem")
    options: dict | None = _f("options", "raw")


@dataclass
class KubeProxyConfiguration:
    api_version: str = _f("apiVersion", "string", API_VERSION)
    kind: str = _f("kind", "string", KIND)
    feature_gates: dict[str, bool] | None = _f("featureGates", "map[string]bool")
    client_connection: ClientConnectionConfiguration = _f("clientConnection", "struct", factory=ClientConnectionConfiguration)
    logging: LoggingConfiguration = _f("logging", "struct", factory=LoggingConfiguration)
    hostname_override: str = _f("hostnameOverride", "string", "")
    bind_address: str = _f("bindAddress", "string", "")
    healthz_bind_address: str = _f("healthzBindAddress", "string", "")
    metrics_bind_address: str = _f("metricsBindAddress", "string", "")
    bind_address_hard_fail: bool = _f("bindAddressHardFail", "bool", False)
    enable_profiling: bool = _f("enableProfiling", "bool", False)
    show_hidden_metrics_for_version: str = _f("showHiddenMetricsForVersion", "string", "")
    mode: str = _f("mode", "string", "")
    iptables: KubeProxyIPTablesConfiguration = _f("iptables", "struct", factory=KubeProxyIPTablesConfiguration)
    ipvs: KubeProxyIPVSConfiguration = _f("ipvs", "struct", factory=KubeProxyIPVSConfiguration)
    nftables: KubeProxyNFTablesConfiguration = _f("nftables", "struct", factory=KubeProxyNFTablesConfiguration)
    winkernel: KubeProxyWinkernelConfiguration = _f("winkernel", "struct", factory=KubeProxyWinkernelConfiguration)
    detect_local_mode: str = _f("detectLocalMode", "string", "")
    detect_local: DetectLocalConfiguration = _f("detectLocal", "struct", factory=DetectLocalConfiguration)
    cluster_cidr: str = _f("clusterCIDR", "string", "")
    node_port_addresses: list[str] | None = _f("nodePortAddresses", "[]string")
    oom_score_adj: int | None = _f("oomScoreAdj", "int32", ptr=True)
    conntrack: KubeProxyConntrackConfiguration = _f("conntrack", "struct", factory=KubeProxyConntrackConfiguration)
    config_sync_period: float = _f("configSyncPeriod", "duration", 0.0)
    port_range: str = _f("portRange", "string", "")
    windows_run_as_service: bool = _f("windowsRunAsService", "bool", False)

    def to_json(self) -> dict:
        """The configuration as v1alpha1 JSON (durations as Go strings), e.g. for ``/configz``."""
        return _encode(self)


_GO_STRUCT_NAMES = {
    KubeProxyConfiguration: "KubeProxyConfiguration",
    ClientConnectionConfiguration: "ClientConnectionConfiguration",
    KubeProxyIPTablesConfiguration: "KubeProxyIPTablesConfiguration",
    KubeProxyIPVSConfiguration: "KubeProxyIPVSConfiguration",
    KubeProxyNFTablesConfiguration: "KubeProxyNFTablesConfiguration",
    KubeProxyConntrackConfiguration: "KubeProxyConntrackConfiguration",
    KubeProxyWinkernelConfiguration: "KubeProxyWinkernelConfiguration",
    DetectLocalConfiguration: "DetectLocalConfiguration",
    LoggingConfiguration: "LoggingConfiguration",
    VModuleItem: "VModuleItem",
}
_GO_QUALIFIED = {
    ClientConnectionConfiguration: "v1alpha1.ClientConnectionConfiguration",
    LoggingConfiguration: "v1.LoggingConfiguration",
}


def _struct_fields(cls) -> dict[str, dataclasses.Field]:
    return {f.metadata["json"]: f for f in dataclasses.fields(cls)}


def _nested_type(cls, f: dataclasses.Field):
    return {"clientConnection": ClientConnectionConfiguration, "logging": LoggingConfiguration,
            "iptables": KubeProxyIPTablesConfiguration, "ipvs": KubeProxyIPVSConfiguration,
            "nftables": KubeProxyNFTablesConfiguration, "winkernel": KubeProxyWinkernelConfiguration,
            "detectLocal": DetectLocalConfiguration, "conntrack": KubeProxyConntrackConfiguration}[f.metadata["json"]]


def _encode(obj) -> dict:
    out: dict = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        go = f.metadata["go"]
        if go == "struct":
            out[f.metadata["json"]] = _encode(value)
        elif go in ("duration", "duration-or-nanos"):
            out[f.metadata["json"]] = None if value is None else format_duration(value)
        elif go == "[]VModuleItem":
            out[f.metadata["json"]] = None if value is None else [_encode(item) for item in value]
        else:
            out[f.metadata["json"]] = copy.deepcopy(value)
    return out


# ---- decoding ---------------------------------------------------------------------------------


class _Mapping(dict):
    """A YAML mapping that remembers keys it saw twice (strict decoding rejects them)."""

    duplicates: list[str]


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _ConfigLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    pass


def _construct_mapping(loader, node) -> _Mapping:
    loader.flatten_mapping(node)
    mapping = _Mapping()
    mapping.duplicates = []
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        key = ("true" if key else "false") if isinstance(key, bool) else "null" if key is None else str(key)
        if key in mapping:
            mapping.duplicates.append(key)
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_ConfigLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


class _TypeError(Exception):
    """Go's ``json.UnmarshalTypeError`` (a non-strict decoding failure)."""


def _plain(value):
    """YAML-only values as sigs.k8s.io/yaml turns them into JSON (timestamps become strings)."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


class _Decoder:
    def __init__(self, strict: bool):
        self.strict = strict
        self.strict_errors: list[str] = []

    def struct(self, cls, data: Mapping, path: list[str]):
        known = _struct_fields(cls)
        for key in getattr(data, "duplicates", ()):
            self.strict_errors.append(f"duplicate field {go_quote('.'.join([*path, key]))}")
        values = {}
        for key, raw in data.items():
            f = known.get(key)
            if f is None:
                self.strict_errors.append(f"unknown field {go_quote('.'.join([*path, key]))}")
                continue
            raw = _plain(raw)
            if raw is None:  # JSON null leaves the Go field as it is
                continue
            values[f.name] = self.value(cls, f, raw, [*path, key])
        return cls(**values)

    def _type_error(self, cls, path: list[str], raw, go_type: str, number_text: str | None = None) -> _TypeError:
        kind = json_kind(raw)
        if number_text is not None:
            kind = f"number {number_text}"
        return _TypeError(f"json: cannot unmarshal {kind} into Go struct field {_GO_STRUCT_NAMES[cls]}.{'.'.join(path)} of type {go_type}")

    def value(self, cls, f: dataclasses.Field, raw, path: list[str]):
        go = f.metadata["go"]
        if go == "string":
            if not isinstance(raw, str):
                raise self._type_error(cls, path, raw, "string")
            return raw
        if go == "bool":
            if not isinstance(raw, bool):
                raise self._type_error(cls, path, raw, "bool")
            return raw
        if go == "int32":
            return self._int32(cls, raw, path)
        if go == "float32":
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise self._type_error(cls, path, raw, "float32")
            return float(raw)
        if go in ("duration", "duration-or-nanos"):
            if go == "duration-or-nanos" and isinstance(raw, int) and not isinstance(raw, bool):
                return raw / 1e9
            if not isinstance(raw, str):
                raise self._type_error(cls, path, raw, "string")
            try:
                return parse_duration(raw)
            except ValueError as err:
                raise _TypeError(str(err)) from None
        if go == "[]string":
            if not isinstance(raw, list):
                raise self._type_error(cls, path, raw, "[]string")
            for item in raw:
                if not isinstance(_plain(item), str):
                    raise self._type_error(cls, path, item, "string")
            return [_plain(item) for item in raw]
        if go == "map[string]bool":
            if not isinstance(raw, dict):
                raise self._type_error(cls, path, raw, "map[string]bool")
            for key in getattr(raw, "duplicates", ()):
                self.strict_errors.append(f"duplicate field {go_quote('.'.join([*path, key]))}")
            for item in raw.values():
                if not isinstance(item, bool):
                    raise self._type_error(cls, path, item, "bool")
            return dict(raw)
        if go == "[]VModuleItem":
            if not isinstance(raw, list):
                raise self._type_error(cls, path, raw, "v1.VModuleConfiguration")
            items = []
            for item in raw:
                if not isinstance(item, dict):
                    raise self._type_error(cls, path, item, "v1.VModuleItem")
                items.append(self.struct(VModuleItem, item, path))
            return items
        if go == "raw":
            return raw
        nested = _nested_type(cls, f)
        if not isinstance(raw, dict):
            raise self._type_error(cls, path, raw, _GO_QUALIFIED.get(nested, f"v1alpha1.{_GO_STRUCT_NAMES[nested]}"))
        return self.struct(nested, raw, path)

    def _int32(self, cls, raw, path: list[str]) -> int:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise self._type_error(cls, path, raw, "int32")
        if isinstance(raw, float):
            if not raw.is_integer():
                raise self._type_error(cls, path, raw, "int32", number_text=repr(raw))
            raw = int(raw)
        if not -(2**31) <= raw < 2**31:
            raise self._type_error(cls, path, raw, "int32", number_text=str(raw))
        return raw


def decode_config(data: Any, *, strict: bool = True) -> KubeProxyConfiguration:
    """A ``KubeProxyConfiguration`` from parsed YAML/JSON (not yet defaulted); ``ConfigError`` on
    a wrong kind/apiVersion, a type mismatch or (``strict``) an unknown or repeated field."""
    document = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    if not isinstance(data, dict):
        if data is None:
            raise ConfigError(f"failed to decode: Object 'Kind' is missing in '{document}'")
        raise ConfigError(
            "failed to decode: couldn't get version/kind; json parse error: json: cannot unmarshal "
            f"{json_kind(data)} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; "
            "Kind string \"json:\\\"kind,omitempty\\\"\" }")
    kind, api_version = data.get("kind"), data.get("apiVersion")
    if not kind:
        raise ConfigError(f"failed to decode: Object 'Kind' is missing in '{document}'")
    if not api_version:
        raise ConfigError(f"failed to decode: Object 'apiVersion' is missing in '{document}'")
    if kind != KIND or api_version != API_VERSION:
        raise ConfigError(f"failed to decode: no kind {go_quote(str(kind))} is registered for version "
                          f"{go_quote(str(api_version))} in scheme {go_quote(SCHEME_NAME)}")
    decoder = _Decoder(strict)
    try:
        config = decoder.struct(KubeProxyConfiguration, data, [])
    except _TypeError as err:
        raise ConfigError(f"failed to decode: {err}") from None
    if decoder.strict_errors:
        message = "strict decoding error: " + ", ".join(decoder.strict_errors)
        if strict:
            raise ConfigError(message)
        log.warning("Using lenient decoding as strict decoding failed: %s", message)
    return config


def load_config(text: str | bytes, *, strict: bool = True) -> KubeProxyConfiguration:
    """Decode a YAML or JSON ``KubeProxyConfiguration`` and apply the v1alpha1 defaults
    (upstream ``Options.loadConfig``)."""
    try:
        data = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        line = f"line {err.problem_mark.line + 1}: " if err.problem_mark is not None else ""
        raise ConfigError(f"failed to decode: error converting YAML to JSON: yaml: {line}{err.problem}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"failed to decode: error converting YAML to JSON: yaml: {err}") from None
    config = decode_config(data, strict=strict)
    set_defaults(config)
    return config


def load_config_file(path: str | Path, *, strict: bool = True) -> KubeProxyConfiguration:
    try:
        text = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"open {path}: {(err.strerror or str(err)).lower()}") from None
    return load_config(text, strict=strict)


# ---- defaults ---------------------------------------------------------------------------------


def set_defaults(config: KubeProxyConfiguration) -> KubeProxyConfiguration:
    """Upstream ``SetDefaults_KubeProxyConfiguration`` (v1alpha1): zero values and unset pointers
    get the defaults; returns the same object."""
    if not config.bind_address:
        config.bind_address = "0.0.0.0"
    bind = parse_ip_sloppy(config.bind_address)
    healthz_host, metrics_host = ("0.0.0.0", "127.0.0.1") if bind is not None and bind.version == 4 else ("[::]", "[::1]")
    config.healthz_bind_address = (append_port_if_needed(config.healthz_bind_address, PROXY_HEALTHZ_PORT)
                                   if config.healthz_bind_address else f"{healthz_host}:{PROXY_HEALTHZ_PORT}")
    config.metrics_bind_address = (append_port_if_needed(config.metrics_bind_address, PROXY_STATUS_PORT)
                                   if config.metrics_bind_address else f"{metrics_host}:{PROXY_STATUS_PORT}")
    if config.oom_score_adj is None:
        config.oom_score_adj = KUBE_PROXY_OOM_SCORE_ADJ
    iptables, ipvs, nftables, conntrack = config.iptables, config.ipvs, config.nftables, config.conntrack
    if iptables.masquerade_bit is None:
        iptables.masquerade_bit = 14
    if iptables.localhost_nodeports is None:
        iptables.localhost_nodeports = True
    if iptables.sync_period == 0:
        iptables.sync_period = 30.0
    if iptables.min_sync_period == 0:
        iptables.min_sync_period = 1.0
    if ipvs.sync_period == 0:
        ipvs.sync_period = 30.0
    if nftables.masquerade_bit is None:
        nftables.masquerade_bit = 14
    if nftables.sync_period == 0:
        nftables.sync_period = 30.0
    if nftables.min_sync_period == 0:
        nftables.min_sync_period = 1.0
    if conntrack.max_per_core is None:
        conntrack.max_per_core = 32 * 1024
    if conntrack.min is None:
        conntrack.min = 128 * 1024
    if conntrack.tcp_established_timeout is None:
        conntrack.tcp_established_timeout = 24 * 3600.0
    if conntrack.tcp_close_wait_timeout is None:
        conntrack.tcp_close_wait_timeout = 3600.0
    if config.config_sync_period == 0:
        config.config_sync_period = 15 * 60.0
    client = config.client_connection
    if not client.content_type:
        client.content_type = "application/vnd.kubernetes.protobuf"
    if client.qps == 0:
        client.qps = 5.0
    if client.burst == 0:
        client.burst = 10
    if config.feature_gates is None:
        config.feature_gates = {}
    if not config.logging.format:
        config.logging.format = "text"
    if config.logging.flush_frequency == 0:
        config.logging.flush_frequency = 5.0
    return config


def default_config() -> KubeProxyConfiguration:
    """What kube-proxy runs with when given no file and no flags (before platform defaults)."""
    return set_defaults(KubeProxyConfiguration())


def nft_usable() -> bool:
    """nftables mode needs the ``nft`` tool (our kernel layer drives it)."""
    return shutil.which("nft") is not None


def resolve_mode(mode: str, nft_is_usable: bool) -> str:
    """Empty means the best available: nftables where ``nft`` is usable, else iptables."""
    if mode:
        return mode
    return NFTABLES if nft_is_usable else IPTABLES


def apply_platform_defaults(config: KubeProxyConfiguration, nft_is_usable: bool | Callable[[], bool] | None = None) -> KubeProxyConfiguration:
    """Upstream ``platformApplyDefaults`` (with our default mode); returns the same object."""
    if not config.mode:
        usable = nft_is_usable() if callable(nft_is_usable) else nft_usable() if nft_is_usable is None else nft_is_usable
        config.mode = resolve_mode("", usable)
        log.info("Using %s proxy", config.mode)
    if config.mode == NFTABLES and not config.node_port_addresses:
        config.node_port_addresses = [NODE_PORT_ADDRESSES_PRIMARY]
    if not config.detect_local_mode:
        config.detect_local_mode = DETECT_LOCAL_MODES[0]  # ClusterCIDR
    return config


# ---- command-line flags -------------------------------------------------------------------------


@dataclass
class ProxyFlags:
    """kube-proxy's flags as given on the command line; None means "not given". Names follow the
    flags (``--iptables-sync-period`` → ``iptables_sync_period``); durations in seconds."""

    config: str = ""
    hostname_override: str = ""
    kubeconfig: str | None = None
    kube_api_content_type: str | None = None
    kube_api_burst: int | None = None
    kube_api_qps: float | None = None
    proxy_mode: str | None = None
    cluster_cidr: str | None = None
    nodeport_addresses: list[str] | None = None
    masquerade_all: bool | None = None
    iptables_masquerade_bit: int | None = None
    iptables_localhost_nodeports: bool | None = None
    iptables_sync_period: float | None = None
    iptables_min_sync_period: float | None = None
    ipvs_sync_period: float | None = None
    ipvs_min_sync_period: float | None = None
    ipvs_scheduler: str | None = None
    ipvs_exclude_cidrs: list[str] | None = None
    ipvs_strict_arp: bool | None = None
    ipvs_tcp_timeout: float | None = None
    ipvs_tcpfin_timeout: float | None = None
    ipvs_udp_timeout: float | None = None
    bind_address: str | None = None
    bind_address_hard_fail: bool | None = None
    healthz_bind_address: str | None = None
    metrics_bind_address: str | None = None
    healthz_port: int | None = None  # deprecated; 0 disables the server
    metrics_port: int | None = None  # deprecated; 0 disables the server
    profiling: bool | None = None
    show_hidden_metrics_for_version: str | None = None
    feature_gates: dict[str, bool] | None = None
    detect_local_mode: str | None = None
    pod_bridge_interface: str | None = None
    pod_interface_name_prefix: str | None = None
    config_sync_period: float | None = None
    oom_score_adj: int | None = None
    conntrack_max_per_core: int | None = None
    conntrack_min: int | None = None
    conntrack_tcp_timeout_established: float | None = None
    conntrack_tcp_timeout_close_wait: float | None = None
    conntrack_tcp_be_liberal: bool | None = None
    conntrack_udp_timeout: float | None = None
    conntrack_udp_timeout_stream: float | None = None


# flag → (section, attribute) for flags that map one-to-one onto the file
_DIRECT_FLAGS = {
    "kubeconfig": ("client_connection", "kubeconfig"),
    "kube_api_content_type": ("client_connection", "content_type"),
    "kube_api_burst": ("client_connection", "burst"),
    "kube_api_qps": ("client_connection", "qps"),
    "proxy_mode": ("", "mode"),
    "cluster_cidr": ("", "cluster_cidr"),
    "nodeport_addresses": ("", "node_port_addresses"),
    "iptables_masquerade_bit": ("iptables", "masquerade_bit"),
    "iptables_localhost_nodeports": ("iptables", "localhost_nodeports"),
    "ipvs_scheduler": ("ipvs", "scheduler"),
    "ipvs_exclude_cidrs": ("ipvs", "exclude_cidrs"),
    "ipvs_strict_arp": ("ipvs", "strict_arp"),
    "ipvs_tcp_timeout": ("ipvs", "tcp_timeout"),
    "ipvs_tcpfin_timeout": ("ipvs", "tcp_fin_timeout"),
    "ipvs_udp_timeout": ("ipvs", "udp_timeout"),
    "bind_address": ("", "bind_address"),
    "bind_address_hard_fail": ("", "bind_address_hard_fail"),
    "healthz_bind_address": ("", "healthz_bind_address"),
    "metrics_bind_address": ("", "metrics_bind_address"),
    "profiling": ("", "enable_profiling"),
    "show_hidden_metrics_for_version": ("", "show_hidden_metrics_for_version"),
    "detect_local_mode": ("", "detect_local_mode"),
    "pod_bridge_interface": ("detect_local", "bridge_interface"),
    "pod_interface_name_prefix": ("detect_local", "interface_name_prefix"),
    "config_sync_period": ("", "config_sync_period"),
    "oom_score_adj": ("", "oom_score_adj"),
    "conntrack_max_per_core": ("conntrack", "max_per_core"),
    "conntrack_min": ("conntrack", "min"),
    "conntrack_tcp_timeout_established": ("conntrack", "tcp_established_timeout"),
    "conntrack_tcp_timeout_close_wait": ("conntrack", "tcp_close_wait_timeout"),
    "conntrack_tcp_be_liberal": ("conntrack", "tcp_be_liberal"),
    "conntrack_udp_timeout": ("conntrack", "udp_timeout"),
    "conntrack_udp_timeout_stream": ("conntrack", "udp_stream_timeout"),
}


def apply_flags(config: KubeProxyConfiguration, flags: ProxyFlags) -> KubeProxyConfiguration:
    """Overlay the given flags on a (defaulted) configuration, as upstream binds its flags to the
    config and then runs ``processV1Alpha1Flags``; returns the same object."""
    for name, (section, attribute) in _DIRECT_FLAGS.items():
        value = getattr(flags, name)
        if value is not None:
            setattr(getattr(config, section) if section else config, attribute, copy.copy(value))
    if flags.feature_gates is not None:
        config.feature_gates = {**(config.feature_gates or {}), **flags.feature_gates}
    if flags.masquerade_all is not None:  # internal Linux.MasqueradeAll: whichever mode runs
        config.iptables.masquerade_all = config.nftables.masquerade_all = flags.masquerade_all
    # The internal config has one sync period; the iptables flags set it unless the mode is ipvs
    # (so they also apply to nftables), the ipvs flags only in ipvs mode.
    if config.mode == IPVS:
        if flags.ipvs_sync_period is not None:
            config.ipvs.sync_period = flags.ipvs_sync_period
        if flags.ipvs_min_sync_period is not None:
            config.ipvs.min_sync_period = flags.ipvs_min_sync_period
    else:
        if flags.iptables_sync_period is not None:
            config.iptables.sync_period = config.nftables.sync_period = flags.iptables_sync_period
        if flags.iptables_min_sync_period is not None:
            config.iptables.min_sync_period = config.nftables.min_sync_period = flags.iptables_min_sync_period
    return config


def _address_from_deprecated_flags(address: str, port: int) -> str:
    """``addressFromDeprecatedFlags``: port 0 disables the server, else the port fills a bare IP."""
    return "" if port == 0 else append_port_if_needed(address, port)


def complete(flags: ProxyFlags, *, nft_is_usable: bool | Callable[[], bool] | None = None) -> KubeProxyConfiguration:
    """Upstream ``Options.Complete``: the configuration from ``--config`` (other flags ignored) or
    from the flags, then platform defaults and ``--hostname-override``. ``ConfigError`` (stage
    ``complete``) if the file cannot be used."""
    if flags.config:
        try:
            config = load_config_file(flags.config)
        except ConfigError as err:
            raise ConfigError(err.message, "complete") from None
    else:
        config = apply_flags(default_config(), flags)
        config.healthz_bind_address = _address_from_deprecated_flags(
            config.healthz_bind_address, PROXY_HEALTHZ_PORT if flags.healthz_port is None else flags.healthz_port)
        config.metrics_bind_address = _address_from_deprecated_flags(
            config.metrics_bind_address, PROXY_STATUS_PORT if flags.metrics_port is None else flags.metrics_port)
    apply_platform_defaults(config, nft_is_usable)
    if flags.hostname_override:  # the flag wins even over the file
        hostname = flags.hostname_override.strip()
        if not hostname:
            raise ConfigError("empty hostname-override is invalid", "complete")
        config.hostname_override = hostname.lower()
    return config


# ---- validation -------------------------------------------------------------------------------


def _invalid(path: str, value, detail: str) -> FieldError:
    """``field.Invalid``, the value shown as Go's ``%#v`` would print its Go type."""
    return invalid_value(path, GoSyntax(_go_value(value)), detail)


def _go_value(value) -> str:
    """How ``field.Error`` prints a bad value: strings quoted, durations as Go durations (pass a
    ``_Duration``), lists and maps in ``%#v`` form."""
    if value is None:
        return "null"
    if isinstance(value, _Duration):
        return format_duration(value.seconds)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, list):
        return golang.go_syntax_strings(value)
    if isinstance(value, dict):
        return "map[string]bool{" + ", ".join(f"{go_quote(k)}:{_go_value(v)}" for k, v in sorted(value.items())) + "}"
    return str(value)


@dataclass(frozen=True)
class _Duration:
    seconds: float


def effective_sync_periods(config: KubeProxyConfiguration) -> tuple[float, float]:
    """(syncPeriod, minSyncPeriod) of the active mode's section (upstream conversion)."""
    section = config.ipvs if config.mode == IPVS else config.nftables if config.mode == NFTABLES else config.iptables
    return section.sync_period, section.min_sync_period


def effective_masquerade(config: KubeProxyConfiguration) -> tuple[bool, int]:
    """(masqueradeAll, masqueradeBit) of the active mode (nftables its own, others iptables')."""
    section = config.nftables if config.mode == NFTABLES else config.iptables
    bit = section.masquerade_bit
    return section.masquerade_all, 14 if bit is None else bit


def _parse_port_range(text: str) -> bool:
    """Whether ``utilnet.ParsePortRange`` accepts ``text`` (``""``, ``N``, ``N-M``, ``N+K``)."""
    try:
        parse_port_range(text)
    except ValueError:
        return False
    return True


def _validate_host_port(text: str, path: str) -> list[FieldError]:
    try:
        host, port = split_host_port(text)
    except ValueError:
        return [_invalid(path, text, "must be IP:port")]
    errors = []
    if parse_ip_sloppy(host) is None:
        errors.append(_invalid(path, host, "must be a valid IP"))
    try:
        number = golang.atoi(port)
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        errors.append(_invalid(path, port, "must be a valid port"))
    return errors


def _validate_dual_stack_cidrs(cidrs: list[str], path: str) -> list[FieldError]:
    pair_message = "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48]"
    if not cidrs:
        return [_invalid(path, cidrs, "must contain at least one CIDR")]
    if len(cidrs) > 2:
        return [_invalid(path, cidrs, pair_message)]
    errors = []
    parsed = [parse_cidr_sloppy(cidr) for cidr in cidrs]
    for index, (cidr, network) in enumerate(zip(cidrs, parsed)):
        if network is None:
            errors.append(_invalid(f"{path}[{index}]", cidr, "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"))
    if len(cidrs) == 2 and None not in parsed and parsed[0].version == parsed[1].version:
        errors.append(_invalid(path, cidrs, pair_message))
    return errors


def _validate_feature_gates(gates: Mapping[str, bool], path: str) -> list[FieldError]:
    for name in sorted(gates):
        if name not in PROXY_FEATURE_GATES:
            return [_invalid(path, dict(gates), f"unrecognized feature gate: {name}")]
    return []


def validate(config: KubeProxyConfiguration) -> list[FieldError]:
    """Upstream ``validation.Validate`` over the configuration (after defaults), in its order."""
    root = "KubeProxyConfiguration"
    errors: list[FieldError] = []
    errors += _validate_feature_gates(config.feature_gates or {}, f"{root}.featureGates")

    def masquerade_bit(bit: int | None, path: str) -> None:
        if bit is not None and not 0 <= bit <= 31:
            errors.append(_invalid(path, bit, "must be within the range [0, 31]"))

    masquerade_bit(config.iptables.masquerade_bit, f"{root}.KubeProxyIPTablesConfiguration.MasqueradeBit")
    if config.mode == IPVS:
        ipvs_path = f"{root}.KubeProxyIPVSConfiguration"
        for name, value in (("TCPTimeout", config.ipvs.tcp_timeout), ("TCPFinTimeout", config.ipvs.tcp_fin_timeout),
                            ("UDPTimeout", config.ipvs.udp_timeout)):
            if value < 0:
                errors.append(_invalid(f"{ipvs_path}.{name}", _Duration(value), "must be greater than or equal to 0"))
        for index, cidr in enumerate(config.ipvs.exclude_cidrs or []):
            if parse_cidr_sloppy(cidr) is None:
                errors.append(_invalid(f"{ipvs_path}.ExcludeCidrs[{index}]", cidr, "must be a valid CIDR"))
    elif config.mode == NFTABLES:
        masquerade_bit(config.nftables.masquerade_bit, f"{root}.KubeProxyNFTablesConfiguration.MasqueradeBit")

    linux = f"{root}.KubeProxyLinuxConfiguration"
    conntrack, conntrack_path = config.conntrack, f"{linux}.KubeProxyConntrackConfiguration"
    for name, count in (("MaxPerCore", conntrack.max_per_core), ("Min", conntrack.min)):
        if count is not None and count < 0:
            errors.append(_invalid(f"{conntrack_path}.{name}", count, "must be greater than or equal to 0"))
    for name, seconds in (("TCPEstablishedTimeout", conntrack.tcp_established_timeout), ("TCPCloseWaitTimeout", conntrack.tcp_close_wait_timeout),
                          ("UDPTimeout", conntrack.udp_timeout), ("UDPStreamTimeout", conntrack.udp_stream_timeout)):
        if seconds is not None and seconds < 0:
            errors.append(_invalid(f"{conntrack_path}.{name}", _Duration(seconds), "must be greater than or equal to 0"))
    if config.oom_score_adj is not None and not -1000 <= config.oom_score_adj <= 1000:
        errors.append(_invalid(f"{linux}.OOMScoreAdj", config.oom_score_adj, "must be within the range [-1000, 1000]"))

    if config.mode and config.mode not in PROXY_MODES:
        errors.append(_invalid(f"{root}.Mode.ProxyMode", config.mode,
                               f"must be {', '.join(sorted(PROXY_MODES))} or blank "
                               "(blank means the best-available proxy [currently nftables, or iptables where nft is not usable])"))
    if config.client_connection.burst < 0:
        errors.append(_invalid(f"{root}.ClientConnection.Burst", config.client_connection.burst, "must be greater than or equal to 0"))

    if config.config_sync_period <= 0:
        errors.append(_invalid(f"{root}.ConfigSyncPeriod", _Duration(config.config_sync_period), "must be greater than 0"))
    sync_period, min_sync_period = effective_sync_periods(config)
    if sync_period <= 0:
        errors.append(_invalid(f"{root}.SyncPeriod", _Duration(sync_period), "must be greater than 0"))
    if min_sync_period < 0:
        errors.append(_invalid(f"{root}.MinSyncPeriod", _Duration(min_sync_period), "must be greater than or equal to 0"))
    if min_sync_period > sync_period:
        errors.append(_invalid(f"{root}.SyncPeriod", _Duration(min_sync_period), f"must be greater than or equal to {root}.MinSyncPeriod"))

    if parse_ip_sloppy(config.bind_address) is None:
        errors.append(_invalid(f"{root}.BindAddress", config.bind_address, "not a valid textual representation of an IP address"))
    if config.healthz_bind_address:
        errors += _validate_host_port(config.healthz_bind_address, f"{root}.HealthzBindAddress")
    errors += _validate_host_port(config.metrics_bind_address, f"{root}.MetricsBindAddress")
    if not _parse_port_range(config.port_range):
        errors.append(_invalid(f"{root}.PortRange", config.port_range, "must be a valid port range (e.g. 300-2000)"))

    addresses = config.node_port_addresses or []
    for index, address in enumerate(addresses):
        if address == NODE_PORT_ADDRESSES_PRIMARY:
            if index != 0 or len(addresses) != 1:
                errors.append(_invalid(f"{root}.NodePortAddresses[{index}]", address, "can't use both 'primary' and CIDRs"))
            break
        if parse_cidr_sloppy(address) is None:
            errors.append(_invalid(f"{root}.NodePortAddresses[{index}]", address, "must be a valid CIDR"))

    version = config.show_hidden_metrics_for_version
    allowed = f"{KUBE_VERSION[0]}.{KUBE_VERSION[1] - 1}"
    if version and version != allowed:
        errors.append(_invalid(f"{root}.ShowHiddenMetricsForVersion", version,
                               f"--show-hidden-metrics-for-version must be omitted or have the value '{allowed}'. "
                               "Only the previous minor version is allowed"))

    supported = [*DETECT_LOCAL_MODES, ""]
    if config.detect_local_mode not in supported:
        errors.append(FieldError("FieldValueNotSupported", f"{root}.DetectLocalMode",
                                 "supported values: " + ", ".join(go_quote(mode) for mode in supported), GoSyntax(go_quote(config.detect_local_mode))))
    detect_path = f"{root}.DetectLocalConfiguration"
    if config.detect_local_mode == "BridgeInterface" and not config.detect_local.bridge_interface:
        errors.append(_invalid(f"{detect_path}.InterfaceName", "", "must not be empty"))
    elif config.detect_local_mode == "InterfaceNamePrefix" and not config.detect_local.interface_name_prefix:
        errors.append(_invalid(f"{detect_path}.InterfacePrefix", "", "must not be empty"))
    elif config.detect_local_mode == "ClusterCIDR" and config.cluster_cidr:
        errors += _validate_dual_stack_cidrs(config.cluster_cidr.split(","), f"{detect_path}.ClusterCIDRs")

    if config.logging.format not in LOG_FORMATS:
        errors.append(_invalid(f"{root}.logging.format", config.logging.format, "Unsupported log format"))
    return errors


# ---- what the proxy runs with -------------------------------------------------------------------


@dataclass(frozen=True)
class ConntrackSettings:
    """The conntrack sysctls to set (0 / None: leave the kernel's value)."""

    max_per_core: int = 32768
    min: int = 131072
    tcp_established_timeout: float = 86400.0
    tcp_close_wait_timeout: float = 3600.0
    tcp_be_liberal: bool = False
    udp_timeout: float = 0.0
    udp_stream_timeout: float = 0.0

    def max_entries(self, cpus: int) -> int:
        """Upstream ``getConntrackMax``: ``max(maxPerCore × cpus, min)``, or 0 (leave as is)
        when ``maxPerCore`` is 0; ``nf_conntrack_buckets`` (hashsize) is a quarter of it."""
        if self.max_per_core <= 0:
            return 0
        return max(self.max_per_core * cpus, self.min)


@dataclass(frozen=True)
class IPVSSettings:
    scheduler: str = ""
    exclude_cidrs: tuple[str, ...] = ()
    strict_arp: bool = False
    tcp_timeout: float = 0.0
    tcp_fin_timeout: float = 0.0
    udp_timeout: float = 0.0


@dataclass(frozen=True)
class ProxySettings:
    """One kube-proxy process's resolved settings (upstream's internal configuration after
    conversion, plus the node name)."""

    mode: str
    hostname: str  # the Node's name: --hostname-override or the host name, lower-cased
    kubeconfig: str = ""
    client_qps: float = 5.0
    client_burst: int = 10
    client_content_type: str = "application/vnd.kubernetes.protobuf"
    client_accept_content_types: str = ""
    bind_address: str = "0.0.0.0"  # overrides the node's primary IP unless unspecified
    bind_address_hard_fail: bool = False
    healthz_bind_address: str = "0.0.0.0:10256"  # "" disables
    metrics_bind_address: str = "127.0.0.1:10249"  # "" disables
    enable_profiling: bool = False
    sync_period: float = 30.0
    min_sync_period: float = 1.0
    config_sync_period: float = 900.0
    masquerade_all: bool = False
    masquerade_bit: int = 14
    localhost_nodeports: bool = True
    cluster_cidrs: tuple[str, ...] = ()
    detect_local_mode: str = "ClusterCIDR"
    bridge_interface: str = ""
    interface_name_prefix: str = ""
    nodeport_addresses: tuple[str, ...] = ()  # CIDRs, or ("primary",); () = every local address
    feature_gates: Mapping[str, bool] = field(default_factory=lambda: PROXY_FEATURE_GATES)
    oom_score_adj: int = KUBE_PROXY_OOM_SCORE_ADJ
    conntrack: ConntrackSettings = field(default_factory=ConntrackSettings)
    ipvs: IPVSSettings = field(default_factory=IPVSSettings)
    udp_idle_timeout: float = 0.25  # userspace mode: --udp-timeout (old udpIdleTimeout)
    config: Mapping[str, Any] = field(default_factory=dict, compare=False)  # the v1alpha1 JSON

    @property
    def health_timeout(self) -> float:
        """``/healthz`` turns 503 when an update is pending this long (2 × syncPeriod)."""
        return 2 * self.sync_period

    def feature_enabled(self, name: str) -> bool:
        return bool(self.feature_gates.get(name, False))

    def configz(self) -> dict:
        """The configuration served at ``/configz`` under ``kubeproxy.config.k8s.io``."""
        return copy.deepcopy(dict(self.config))


def node_hostname(hostname_override: str, os_hostname: Callable[[], str] = socket.gethostname) -> str:
    """``nodeutil.GetHostname``: the override, else the host name; trimmed and lower-cased."""
    hostname = hostname_override or os_hostname()
    hostname = hostname.strip()
    if not hostname:
        raise ConfigError("empty hostname is invalid")
    return hostname.lower()


def resolve(config: KubeProxyConfiguration, *, nft_is_usable: bool | Callable[[], bool] | None = None,
            os_hostname: Callable[[], str] = socket.gethostname) -> ProxySettings:
    """The settings to run with. Applies the platform defaults to a copy (so a bare
    ``default_config()`` works), validates (``ConfigError`` stage ``validate`` with upstream's
    aggregate message) and resolves the per-mode sections into single values."""
    config = apply_platform_defaults(copy.deepcopy(config), nft_is_usable)
    errors = validate(config)
    if errors:
        raise ConfigError(golang.aggregate(errors), "validate")
    sync_period, min_sync_period = effective_sync_periods(config)
    masquerade_all, masquerade_bit = effective_masquerade(config)
    conntrack = config.conntrack
    client = config.client_connection
    return ProxySettings(
        mode=config.mode,
        hostname=node_hostname(config.hostname_override, os_hostname),
        kubeconfig=client.kubeconfig,
        client_qps=client.qps,
        client_burst=client.burst,
        client_content_type=client.content_type,
        client_accept_content_types=client.accept_content_types,
        bind_address=config.bind_address,
        bind_address_hard_fail=config.bind_address_hard_fail,
        healthz_bind_address=config.healthz_bind_address,
        metrics_bind_address=config.metrics_bind_address,
        enable_profiling=config.enable_profiling,
        sync_period=sync_period,
        min_sync_period=min_sync_period,
        config_sync_period=config.config_sync_period,
        masquerade_all=masquerade_all,
        masquerade_bit=masquerade_bit,
        localhost_nodeports=bool(config.iptables.localhost_nodeports),
        cluster_cidrs=tuple(config.cluster_cidr.split(",")) if config.cluster_cidr else (),
        detect_local_mode=config.detect_local_mode,
        bridge_interface=config.detect_local.bridge_interface,
        interface_name_prefix=config.detect_local.interface_name_prefix,
        nodeport_addresses=tuple(config.node_port_addresses or ()),
        feature_gates=MappingProxyType({**PROXY_FEATURE_GATES, **(config.feature_gates or {})}),
        oom_score_adj=KUBE_PROXY_OOM_SCORE_ADJ if config.oom_score_adj is None else config.oom_score_adj,
        conntrack=ConntrackSettings(
            max_per_core=conntrack.max_per_core or 0,
            min=conntrack.min or 0,
            tcp_established_timeout=conntrack.tcp_established_timeout or 0.0,
            tcp_close_wait_timeout=conntrack.tcp_close_wait_timeout or 0.0,
            tcp_be_liberal=conntrack.tcp_be_liberal,
            udp_timeout=conntrack.udp_timeout,
            udp_stream_timeout=conntrack.udp_stream_timeout,
        ),
        ipvs=IPVSSettings(
            scheduler=config.ipvs.scheduler,
            exclude_cidrs=tuple(config.ipvs.exclude_cidrs or ()),
            strict_arp=config.ipvs.strict_arp,
            tcp_timeout=config.ipvs.tcp_timeout,
            tcp_fin_timeout=config.ipvs.tcp_fin_timeout,
            udp_timeout=config.ipvs.udp_timeout,
        ),
        config=MappingProxyType(config.to_json()),
    )


def node_pod_cidrs(node: Mapping | None) -> list[str]:
    spec = (node or {}).get("spec") or {}
    return list(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))


def options_for_family(settings: ProxySettings, family: int, node: Mapping | None) -> ProxyOptions:
    """What one family's rule builder needs. The local-traffic detector uses the family's
    ``clusterCIDR`` (or the Node's podCIDR, or the interface settings); localhost NodePorts exist
    only in iptables mode, for IPv4, when ``nodePortAddresses`` includes an IPv4 loopback
    address (unset does)."""
    detector = new_local_detector(settings.detect_local_mode, family, list(settings.cluster_cidrs), node_pod_cidrs(node),
                                  settings.bridge_interface, settings.interface_name_prefix)
    nodeport_addresses = NodePortAddresses(settings.nodeport_addresses, family, node_ips_from_node(node))
    localhost_nodeports = (settings.localhost_nodeports and settings.mode == IPTABLES and family == IPV4
                           and nodeport_addresses.contains_ipv4_loopback)
    return ProxyOptions(
        family=family,
        node_name=settings.hostname,
        masquerade_all=settings.masquerade_all,
        masquerade_bit=settings.masquerade_bit,
        local_detector=detector,
        localhost_nodeports=localhost_nodeports,
        prefer_same_node=settings.feature_enabled("PreferSameTrafficDistribution"),
    )
