"""Flag parsing every ``kubesvc`` command shares, with upstream's messages.

- ``--feature-gates``: ``Name=true|false`` pairs, as component-base's ``featuregate.Set``
  parses them (each binary knows its own gates: kube-apiserver's here, kube-proxy's in
  ``proxy.config.PROXY_FEATURE_GATES``).
- Durations in Go's ``time.ParseDuration`` syntax (``1m30s``, ``250ms``).
- CIDR and IP pairs: one, or one of each family (``--service-cluster-ip-range``, ``--pod-cidr``,
  ``--node-ip``).
- ``--kubeconfig``: loaded once; a bad file is one line and a non-zero exit.
- Bool flags (:data:`GO_BOOL`): ``strconv.ParseBool``, as pflag; ``--flag`` alone is true.

Each callback turns a bad value into ``click.BadParameter`` (one line, exit code 2); nothing
here runs a component.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

import click

from kubesvc.util import golang, ipnet
from kubesvc.util.golang import parse_duration

# Feature gates kube-apiserver knows here, with upstream's defaults for 1.32/1.33.
KNOWN_FEATURE_GATES = {
    "ServiceIPStaticSubrange": True,
    "ServiceNodePortStaticSubrange": True,
    "MultiCIDRServiceAllocator": True,
    "DisableAllocatorDualWrite": False,
    "ServiceTrafficDistribution": True,
    "TopologyAwareHints": True,
    "PreferSameTrafficDistribution": True,  # 1.34 beta, on: Services' PreferSameZone/PreferSameNode, EndpointSlices' forNodes hints
    "AllAlpha": False,
    "AllBeta": False,
}


def parse_feature_gates(text: str, known: Mapping[str, bool] = KNOWN_FEATURE_GATES) -> dict[str, bool]:
    """``--feature-gates`` as component-base parses it, with its error messages."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"missing bool value for {name}")
        if name not in known:
            raise click.BadParameter(f"unrecognized feature gate: {name}")
        try:
            gates[name] = golang.parse_bool(value)
        except ValueError as err:
            raise click.BadParameter(f"invalid value of {name}={value}, err: {err}") from None
    return gates


def feature_gates(known: Mapping[str, bool] = KNOWN_FEATURE_GATES, *, optional: bool = False):
    """A ``--feature-gates`` callback over ``known`` (``optional``: an absent flag stays None)."""

    def callback(ctx, param, value: str | None) -> dict[str, bool] | None:
        if value is None and optional:
            return None
        return parse_feature_gates(value or "", known)

    return callback


def duration(ctx, param, value: str) -> float:
    """A Go duration flag that must not be negative, in seconds."""
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds < 0:
        raise click.BadParameter(f"{value} must not be negative")
    return seconds


def bounded(low: int, high: int):
    """kube-controller-manager's range checks, with its messages."""

    def check(ctx, param, value: int) -> int:
        name = param.name.replace("_", "-")
        if value < low:
            raise click.BadParameter(f"{name} must not be less than {low}, but got {value}")
        if value > high:
            raise click.BadParameter(f"{name} must not be more than {high}, but got {value}")
        return value

    return check


def checked(parser: Callable[[str], object]):
    """A callback from a parser that raises ValueError (None passes through)."""

    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return parser(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


# A Go duration flag with no default (None when absent; the component validates the value).
optional_duration = checked(parse_duration)


def comma_list(ctx, param, value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


class GoBool(click.ParamType):
    """A bool flag's value as pflag reads it, ``strconv.ParseBool``: ``1 t T TRUE true True``
    and their false forms; ``yes``/``on`` (which ``click.BOOL`` takes) are refused."""

    name = "boolean"

    def convert(self, value, param, ctx) -> bool:
        if isinstance(value, bool):
            return value
        try:
            return golang.parse_bool(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


GO_BOOL = GoBool()


def bool_option(*names: str, help: str):
    """``--flag`` or ``--flag=true|false``, None when absent (a config file may set it)."""
    return click.option(*names, type=GO_BOOL, is_flag=False, flag_value=True, default=None, help=help)


def service_cidrs(ctx, param, value: str) -> str:
    """``--service-cluster-ip-range``: one CIDR, or two of different families, each within the
    size kube-apiserver accepts."""
    from kubesvc.apiserver.allocator.ranges import check_service_cidr_flag

    try:
        networks = ipnet.parse_cidr_pair(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    for i, network in enumerate(networks):
        problem = check_service_cidr_flag(str(network), flag="--service-cluster-ip-range" + ("[1]" if i else ""))
        if problem:
            raise click.BadParameter(problem)
    return value


def parse_pod_cidrs(value: str) -> list[str]:
    """One CIDR, or two of different families (kubelet's ``--pod-cidr`` takes one; dual-stack
    nodes get ``podCIDRs`` from the node IPAM controller upstream)."""
    networks = ipnet.parse_cidr_pair(value)
    for net in networks:
        if net.num_addresses < 4:
            raise ValueError(f"{net} is too small for Pods (it needs a gateway and at least one Pod address)")
    return [str(n) for n in networks]


def parse_node_ips(value: str) -> list[str]:
    """``--node-ip``: nothing, one IP, or two of different families (ParseIPSloppy's text)."""
    if not value.replace(",", "").strip():
        return []
    try:
        return [str(ip) for ip in ipnet.parse_ip_pair(value)]
    except ValueError as exc:
        raise ValueError(f"invalid --node-ip {value!r}: {exc}") from None


def advertise_address(ctx, param, value: str | None) -> str | None:
    """An IP other hosts can reach: not unspecified."""
    if value is None:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a valid IP address") from None
    if address.is_unspecified:
        raise click.BadParameter(f"{value!r} is not a usable address to advertise")
    return str(address)


def port_range(ctx, param, value: str) -> str:
    """``--service-node-port-range``: ``base-max`` (or ``base+size``) within 1-65535."""
    from kubesvc.apiserver.allocator.ranges import PortRange

    try:
        parsed = PortRange.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if parsed.base < 1:
        raise click.BadParameter(f"{value!r} is not a port range within 1-65535")
    return value


def load_kubeconfig(path: str):
    """A command's ``--kubeconfig``, loaded; a bad file is one line and a non-zero exit."""
    from kubesvc.client.kubeconfig import ConfigError, load_kubeconfig as load

    try:
        return load(path)
    except (ConfigError, OSError) as exc:
        raise click.ClickException(f"invalid kubeconfig: {exc}") from None
