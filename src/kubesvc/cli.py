"""The ``kubesvc`` command: one binary, one subcommand per component (as kube-apiserver,
kube-controller-manager and kube-proxy are separate binaries upstream), plus ``up``.

Flags keep upstream names. Bad flags or a failed start print one line and exit non-zero.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubesvc.apiserver.allocator.ranges import PortRange, check_service_cidr_flag
from kubesvc.util.duration import parse_duration
from kubesvc.util.process import command_kubeconfig, install_uvloop, setup_logging, stop_on_signals

if TYPE_CHECKING:  # the apiserver's modules load only for the commands that run it
    from kubesvc.apiserver.server import APIServer, ServerConfig

# Feature gates this server knows, with upstream's defaults for 1.32/1.33.
KNOWN_FEATURE_GATES = {
    "ServiceIPStaticSubrange": True,
    "ServiceNodePortStaticSubrange": True,
    "MultiCIDRServiceAllocator": True,
    "DisableAllocatorDualWrite": False,
    "ServiceTrafficDistribution": True,
    "TopologyAwareHints": True,
    "AllAlpha": False,
    "AllBeta": False,
}


def parse_feature_gates(text: str, known: dict[str, bool] = KNOWN_FEATURE_GATES) -> dict[str, bool]:
    """``--feature-gates`` as component-base parses it, with its error messages."""
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"missing bool value for {name}")
        if name not in known:
            raise click.BadParameter(f"unrecognized feature gate: {name}")
        if value.lower() not in ("true", "false"):
            raise click.BadParameter(f"invalid value of {name}={value}, err: strconv.ParseBool: parsing {value!r}: invalid syntax")
        gates[name] = value.lower() == "true"
    return gates


def _feature_gates(ctx, param, value: str) -> dict[str, bool]:
    return parse_feature_gates(value or "")


def _cidrs(ctx, param, value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not 1 <= len(parts) <= 2:
        raise click.BadParameter("specify one CIDR, or two of different IP families")
    families = set()
    for i, part in enumerate(parts):
        try:
            families.add(ipaddress.ip_network(part, strict=True).version)
        except ValueError as exc:
            raise click.BadParameter(f"{part}: {exc}") from None
        problem = check_service_cidr_flag(part, flag="--service-cluster-ip-range" + ("[1]" if i else ""))
        if problem:
            raise click.BadParameter(problem)
    if len(families) != len(parts):
        raise click.BadParameter("the two CIDRs must be of different IP families")
    return value


def _ip_address(ctx, param, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a valid IP address") from None
    if address.is_unspecified:
        raise click.BadParameter(f"{value!r} is not a usable address to advertise")
    return str(address)


def _port_range(ctx, param, value: str) -> str:
    try:
        port_range = PortRange.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if port_range.base < 1:
        raise click.BadParameter(f"{value!r} is not a port range within 1-65535")
    return value


async def _serve_until_signalled(server: APIServer, announce) -> None:
    await server.start()
    announce(server)
    try:
        await stop_on_signals().wait()
    finally:
        await server.stop()


def _run_apiserver(config: "ServerConfig", announce) -> None:
    from kubesvc.apiserver.server import APIServer

    install_uvloop()
    try:
        asyncio.run(_serve_until_signalled(APIServer(config), announce))
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {config.bind_address}:{config.secure_port}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _authorization_modes(ctx, param, value: str) -> list[str]:
    try:
        from kubesvc.apiserver.auth.modes import parse_modes

        return parse_modes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def apiserver_options(default_data_dir: str | None):
    def decorate(fn):
        options = [
            click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=default_data_dir, required=default_data_dir is None,
                         help="Directory for the SQLite store, credentials and the kubeconfig."),
            click.option("--storage-backend", type=click.Choice(["sqlite", "memory"]), default="sqlite", show_default=True),
            click.option("--bind-address", default="127.0.0.1", show_default=True),
            click.option("--secure-port", type=click.IntRange(0, 65535), default=6443, show_default=True, help="0 picks a free port."),
            click.option("--service-cluster-ip-range", default="10.96.0.0/12", show_default=True, callback=_cidrs),
            click.option("--service-node-port-range", default="30000-32767", show_default=True, callback=_port_range),
            click.option("--feature-gates", default="", callback=_feature_gates, help="Comma-separated Name=true|false pairs."),
            click.option("--etcd-compaction-interval", "compaction_interval", type=click.FloatRange(min=0.1), default=300.0, show_default=True,
                         help="Seconds between compactions."),
            click.option("--compaction-retain-revisions", type=click.IntRange(min=1), default=10000, show_default=True,
                         help="Revisions of history kept for watches and consistent lists."),
            click.option("--repair-services-interval", type=click.FloatRange(min=0.1), default=180.0, show_default=True,
                         help="Seconds between passes of the ClusterIP and NodePort repair loops (upstream's RepairServicesInterval)."),
            click.option("--advertise-address", default=None, callback=_ip_address,
                         help="The IP the apiserver advertises to the cluster (default: --bind-address, or the host's address when that is 0.0.0.0)."),
            click.option("--client-ca-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                         help="CA bundle that verifies client certificates (default: the generated cluster CA)."),
            click.option("--kubelet-client-certificate", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                         help="Client certificate the apiserver presents to node agents (default: generated, CN kube-apiserver-kubelet-client)."),
            click.option("--kubelet-client-key", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                         help="Key of --kubelet-client-certificate."),
            click.option("--kubelet-certificate-authority", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                         help="CA bundle that verifies node agents' serving certificates (default: the generated cluster CA)."),
            click.option("--authorization-mode", "authorization_modes", default="Node,RBAC", show_default=True, callback=_authorization_modes,
                         help="Ordered list of authorization plug-ins: Node, RBAC, AlwaysAllow, AlwaysDeny."),
            click.option("--endpoint-reconciler-type", type=click.Choice(["lease", "none"]), default="lease", show_default=True,
                         help="How the kubernetes Service's endpoints follow the apiservers: lease (each apiserver's address, renewed every 10 s) or none."),
            click.option("--enable-admission-plugins", default="", help="Admission plugins to run besides the default ones (NamespaceLifecycle, ServiceAccount)."),
            click.option("--disable-admission-plugins", default="",
                         help="Default admission plugins not to run (ServiceAccount, for an apiserver without a controller-manager)."),
            *_connection_flags(),
            *_authentication_flags(),
            click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity."),
        ]
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _connection_flags() -> list:
    """kube-apiserver's in-flight limits, and its http.Server's timeouts (apiserver/limits.py,
    apiserver/connections.py; upstream has no flags for the timeouts)."""
    from kubesvc.apiserver import connections, limits

    def duration(ctx, param, value: str) -> float:
        return _duration(ctx, param, value)

    return [
        click.option("--max-requests-inflight", type=click.IntRange(min=0), default=limits.DEFAULT_MAX_REQUESTS_INFLIGHT, show_default=True,
                     help="Most non-mutating requests (get, list) served at once; more get 429. Watches and logs do not count. 0: no limit."),
        click.option("--max-mutating-requests-inflight", type=click.IntRange(min=0), default=limits.DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
                     show_default=True, help="Most mutating requests served at once; more get 429. 0: no limit."),
        click.option("--read-header-timeout", default=f"{connections.DEFAULT_READ_HEADER_TIMEOUT:g}s", show_default=True, callback=duration,
                     help="Time a client has for the TLS handshake and for each request's headers; slower connections are closed."),
        click.option("--idle-connection-timeout", default=f"{connections.DEFAULT_IDLE_TIMEOUT:g}s", show_default=True, callback=duration,
                     help="Time a keep-alive connection may wait for its next request before it is closed."),
    ]


def _authentication_flags() -> list:
    """kube-apiserver's authentication flags (auth/options.py)."""
    existing = click.Path(dir_okay=False, exists=True, path_type=Path)
    on_off = dict(type=click.BOOL, is_flag=False, flag_value=True, show_default=True)
    return [
        click.option("--anonymous-auth", default=True, **on_off, help="Requests with no credential are system:anonymous (else 401)."),
        click.option("--token-auth-file", type=existing, default=None, help="Static tokens: CSV token,user,uid[,\"group1,group2\"]."),
        click.option("--enable-bootstrap-token-auth", default=False, **on_off,
                     help="Bootstrap tokens: Secrets of type bootstrap.kubernetes.io/token in kube-system."),
        click.option("--service-account-issuer", "service_account_issuers", multiple=True,
                     help="Issuer of ServiceAccount tokens (repeatable; the first signs). Default: https://kubernetes.default.svc.cluster.local."),
        click.option("--service-account-key-file", "service_account_key_files", type=existing, multiple=True,
                     help="PEM public (or private) keys that verify ServiceAccount tokens (repeatable). Default: the signing key."),
        click.option("--service-account-signing-key-file", type=existing, default=None,
                     help="PEM private key that signs ServiceAccount tokens. Default: <data-dir>/pki/sa.key, made once."),
        click.option("--api-audiences", multiple=True, help="The API's audiences (comma list, repeatable). Default: the issuers."),
        click.option("--service-account-lookup", default=True, **on_off, help="Check legacy tokens against their Secret and ServiceAccount."),
        click.option("--service-account-max-token-expiration", default="0s", callback=lambda ctx, param, value: _duration(ctx, param, value),
                     help="Longest TokenRequest lifetime granted (1h or more; 0: no cap)."),
        click.option("--service-account-extend-token-expiration", default=True, **on_off,
                     help="Pod-bound 3607 s tokens (projected volumes) live a year with a warnafter claim."),
        click.option("--service-account-jwks-uri", default="", help="jwks_uri of the OIDC discovery document (https)."),
    ]


def _authentication_options(anonymous_auth=True, token_auth_file=None, enable_bootstrap_token_auth=False, service_account_issuers=(),
                            service_account_key_files=(), service_account_signing_key_file=None, api_audiences=(),
                            service_account_lookup=True, service_account_max_token_expiration=0.0,
                            service_account_extend_token_expiration=True, service_account_jwks_uri=""):
    from kubesvc.apiserver.auth.options import AuthenticationOptions, validate

    options = AuthenticationOptions(
        anonymous_auth=anonymous_auth,
        token_auth_file=token_auth_file and token_auth_file.resolve(),
        enable_bootstrap_token_auth=enable_bootstrap_token_auth,
        service_account_issuers=tuple(service_account_issuers),
        service_account_key_files=tuple(path.resolve() for path in service_account_key_files),
        service_account_signing_key_file=service_account_signing_key_file and service_account_signing_key_file.resolve(),
        api_audiences=tuple(a.strip() for value in api_audiences for a in value.split(",") if a.strip()),
        service_account_lookup=service_account_lookup,
        service_account_max_token_expiration=int(service_account_max_token_expiration),
        service_account_extend_token_expiration=service_account_extend_token_expiration,
        service_account_jwks_uri=service_account_jwks_uri,
    )
    problems = validate(options)
    if problems:
        raise click.BadParameter(problems[0])
    return options


def _config(data_dir, storage_backend, bind_address, secure_port, service_cluster_ip_range, service_node_port_range, feature_gates,
            compaction_interval, compaction_retain_revisions, repair_services_interval, advertise_address=None, client_ca_file=None,
            kubelet_client_certificate=None, kubelet_client_key=None, kubelet_certificate_authority=None,
            authorization_modes=("Node", "RBAC"), enable_admission_plugins="", disable_admission_plugins="", endpoint_reconciler_type="lease",
            max_requests_inflight=400, max_mutating_requests_inflight=200, read_header_timeout=32.0, idle_connection_timeout=90.0,
            **authentication) -> ServerConfig:
    from kubesvc.apiserver.admission.plugins import resolve_admission_plugins
    from kubesvc.apiserver.server import ServerConfig

    if (kubelet_client_certificate is None) != (kubelet_client_key is None):
        raise click.BadParameter("--kubelet-client-certificate and --kubelet-client-key go together")
    admission_plugins, problems = resolve_admission_plugins(enable_admission_plugins, disable_admission_plugins)
    if problems:
        raise click.BadParameter(", ".join(problems))
    return ServerConfig(
        data_dir=data_dir.resolve(),
        storage_backend=storage_backend,
        bind_address=bind_address,
        secure_port=secure_port,
        service_cluster_ip_range=service_cluster_ip_range,
        service_node_port_range=service_node_port_range,
        feature_gates=feature_gates,
        compaction_interval=compaction_interval,
        compaction_retain_revisions=compaction_retain_revisions,
        repair_services_interval=repair_services_interval,
        advertise_address=advertise_address,
        client_ca_file=client_ca_file and client_ca_file.resolve(),
        kubelet_client_certificate=kubelet_client_certificate and kubelet_client_certificate.resolve(),
        kubelet_client_key=kubelet_client_key and kubelet_client_key.resolve(),
        kubelet_certificate_authority=kubelet_certificate_authority and kubelet_certificate_authority.resolve(),
        authorization_modes=tuple(authorization_modes),
        admission_plugins=admission_plugins,
        endpoint_reconciler_type=endpoint_reconciler_type,
        max_requests_inflight=max_requests_inflight,
        max_mutating_requests_inflight=max_mutating_requests_inflight,
        read_header_timeout=read_header_timeout,
        idle_connection_timeout=idle_connection_timeout,
        authentication=_authentication_options(**authentication),
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kubesvc")
def main() -> None:
    """kubesvc: Kubernetes Service networking (apiserver, controllers, node proxy)."""


@main.command()
@apiserver_options(default_data_dir=None)
def apiserver(verbosity: int, **flags) -> None:
    """Run the Kubernetes-compatible API server."""
    setup_logging(verbosity)

    def announce(server: APIServer) -> None:
        click.echo(f"kubesvc apiserver listening on {server.url}; kubeconfig: {server.kubeconfig}", err=False)
        sys.stdout.flush()

    _run_apiserver(_config(**flags), announce)


@main.command()
@apiserver_options(default_data_dir=".kubesvc")
@click.option("--node-name", default=None, help="This machine's Node name (default: the hostname, lower-cased).")
@click.option("--pod-cidr", default="10.244.0.0/24", show_default=True, help="The Pod address range of this node.")
@click.option("--node-ip", default=None, help="This node's IP (default: the first global IPv4 address, else the Pod gateway).")
@click.option("--proxy-mode", type=click.Choice(["nftables", "iptables"]), default=None,
              help="The proxy's mode (default: nftables where available, else iptables).")
@click.option("--kubelet-port", type=click.IntRange(0, 65535), default=10250, show_default=True,
              help="The agent's log server port (kubectl logs); 0 picks a free one.")
def up(verbosity: int, node_name: str | None, pod_cidr: str, node_ip: str | None, proxy_mode: str | None, kubelet_port: int, **flags) -> None:
    """Run the whole system on this machine: apiserver (SQLite), controller-manager, node agent and proxy.
    Ctrl-C stops it and removes every namespace, link and kernel rule it made."""
    setup_logging(verbosity)
    from kubesvc.agent.command import detect_node_ip, parse_node_ips, parse_pod_cidrs
    from kubesvc.agent.node import default_node_name
    from kubesvc.up import UpOptions, read_state, serve_pods

    try:
        pod_cidrs = parse_pod_cidrs(pod_cidr)
        node_ips = parse_node_ips(node_ip) if node_ip else [ip for ip in [detect_node_ip(pod_cidrs)] if ip]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    config = _config(**flags)
    previous = read_state(config.data_dir)
    if previous is not None:
        raise click.ClickException(f"{config.data_dir} holds the state of a kubesvc up (pid {previous.get('pid')}) that did not clean up; "
                                   f"run: kubesvc down --data-dir {flags['data_dir']}")
    options = UpOptions(node_name=node_name or default_node_name(), pod_cidrs=pod_cidrs,
                        service_cidrs=[c.strip() for c in config.service_cluster_ip_range.split(",") if c.strip()],
                        node_ips=node_ips, proxy_mode=proxy_mode or "", kubelet_port=kubelet_port)
    serve_pods(config, options, bind_address_given=click.get_current_context().get_parameter_source("bind_address") != click.core.ParameterSource.DEFAULT)

    def announce(server: APIServer, system) -> None:
        click.echo(f"kubesvc is up at {server.url}; kubeconfig: {server.kubeconfig}")
        click.echo(f"  node {options.node_name}: Pods in {','.join(pod_cidrs)}, proxy in {system.proxy.settings.mode} mode")
        click.echo(f"  try: export KUBECONFIG={server.kubeconfig}; kubectl get nodes    (Ctrl-C stops and cleans up)")
        sys.stdout.flush()

    from kubesvc.agent.command import START_FAILURES

    install_uvloop()
    try:
        errors = asyncio.run(_up(config, options, announce))
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc.strerror or exc}") from None
    except START_FAILURES as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if errors:
        raise click.ClickException("cleanup failed (run kubesvc down to retry): " + "; ".join(errors))


async def _up(config: ServerConfig, options, announce) -> list[str]:
    from kubesvc.apiserver.server import APIServer
    from kubesvc.up import run_up

    return await run_up(APIServer(config), options, announce, stop_on_signals())


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True,
              help="The data directory of the kubesvc up to undo.")
def down(data_dir: Path) -> None:
    """Remove every namespace, link, kernel rule and route a kubesvc up made (after a crash, or to stop one)."""
    setup_logging(0)
    from kubesvc.up import down as undo

    errors = undo(data_dir.resolve())
    if errors:
        raise click.ClickException("cleanup failed: " + "; ".join(errors))
    click.echo(f"kubesvc down: nothing of {data_dir} left running")


def _duration(ctx, param, value: str) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds < 0:
        raise click.BadParameter(f"{value} must not be negative")
    return seconds


def _bounded(low: int, high: int):
    """kube-controller-manager's range checks, with its messages."""

    def check(ctx, param, value: int) -> int:
        name = param.name.replace("_", "-")
        if value < low:
            raise click.BadParameter(f"{name} must not be less than {low}, but got {value}")
        if value > high:
            raise click.BadParameter(f"{name} must not be more than {high}, but got {value}")
        return value

    return check


def _root_ca_file(path: str | None) -> str | None:
    from kubesvc.controllers.rootcacert.publisher import read_root_ca

    if path is not None:
        try:
            read_root_ca(path)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return path


def _controllers(ctx, param, value: str) -> set[str]:
    from kubesvc.controllers.manager import enabled_controllers

    try:
        return enabled_controllers(value.split(","))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command("controller-manager")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), required=True, help="Path to a kubeconfig file for the API server.")
@click.option("--scheduler-kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="The pod-scheduler's own kubeconfig (kube-scheduler's --kubeconfig; default: --kubeconfig).")
@click.option("--controllers", default="*", show_default=True, callback=_controllers,
              help="Controllers to enable: '*' for all, 'foo' to enable, '-foo' to disable "
                   "(endpointslice-controller, endpointslice-mirroring-controller, endpoints-controller, garbage-collector-controller, "
                   "pod-scheduler, serviceaccount-controller, root-ca-certificate-publisher-controller).")
@click.option("--concurrent-service-endpoint-syncs", type=int, default=5, show_default=True, callback=_bounded(1, 50),
              help="Services synced concurrently by the EndpointSlice controller.")
@click.option("--concurrent-endpoint-syncs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Services synced concurrently by the Endpoints controller.")
@click.option("--mirroring-concurrent-service-endpoint-syncs", type=int, default=5, show_default=True, callback=_bounded(1, 50))
@click.option("--concurrent-gc-syncs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--max-endpoints-per-slice", type=int, default=100, show_default=True, callback=_bounded(1, 1000))
@click.option("--endpointslice-updates-batch-period", default="0s", show_default=True, callback=_duration,
              help="Batches Pod changes into one EndpointSlice sync per Service within this period.")
@click.option("--endpoint-updates-batch-period", default="0s", show_default=True, callback=_duration,
              help="Batches Pod changes into one Endpoints sync per Service within this period.")
@click.option("--mirroring-max-endpoints-per-subset", type=int, default=1000, show_default=True, callback=_bounded(1, 1000))
@click.option("--mirroring-endpointslice-updates-batch-period", default="0s", show_default=True, callback=_duration)
@click.option("--enable-garbage-collector", type=click.BOOL, is_flag=False, flag_value=True, default=True, show_default=True)
@click.option("--leader-elect", type=click.BOOL, is_flag=False, flag_value=True, default=True, show_default=True,
              help="Run controllers only while holding the leader Lease.")
@click.option("--leader-elect-lease-duration", default="15s", show_default=True, callback=_duration)
@click.option("--leader-elect-renew-deadline", default="10s", show_default=True, callback=_duration)
@click.option("--leader-elect-retry-period", default="2s", show_default=True, callback=_duration)
@click.option("--leader-elect-resource-name", default="kube-controller-manager", show_default=True)
@click.option("--leader-elect-resource-namespace", default="kube-system", show_default=True)
@click.option("--bind-address", default="0.0.0.0", show_default=True)
@click.option("--secure-port", type=click.IntRange(0, 65535), default=10257, show_default=True, help="HTTPS port for /healthz and /metrics; 0 disables.")
@click.option("--root-ca-file", default=None, callback=lambda ctx, param, value: _root_ca_file(value),
              help="CA bundle published as kube-root-ca.crt in every namespace (default: the CA of --kubeconfig).")
@click.option("--use-service-account-credentials", type=click.BOOL, is_flag=False, flag_value=True, default=False, show_default=True,
              help="Run each controller as its own kube-system ServiceAccount (TokenRequest tokens, renewed), "
                   "not with the credentials of --kubeconfig.")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def controller_manager(kubeconfig: str, scheduler_kubeconfig: str | None, use_service_account_credentials: bool, verbosity: int, **flags) -> None:
    """Run the EndpointSlice, mirroring, Endpoints and garbage-collector controllers."""
    setup_logging(verbosity)
    from kubesvc.client.leaderelection import validate_timing
    from kubesvc.controllers.manager import ManagerConfig

    try:
        validate_timing(flags["leader_elect_lease_duration"], flags["leader_elect_renew_deadline"], flags["leader_elect_retry_period"])
    except ValueError as exc:
        raise click.UsageError(f"invalid leader election flags: {exc}") from None
    client_config = command_kubeconfig(kubeconfig)
    scheduler_config = command_kubeconfig(scheduler_kubeconfig) if scheduler_kubeconfig else client_config
    config = ManagerConfig(**flags)
    install_uvloop()
    try:
        asyncio.run(_run_controller_manager(client_config, config, scheduler_config, use_service_account_credentials))
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {config.bind_address}:{config.secure_port}: {exc.strerror or exc}") from None


async def _run_controller_manager(client_config, config, scheduler_config, use_service_account_credentials: bool) -> None:
    from kubesvc.client.rest import RestClient
    from kubesvc.controllers.clientbuilder import ServiceAccountClientBuilder, SimpleClientBuilder
    from kubesvc.controllers.manager import SCHEDULER, ControllerManager

    async with RestClient(client_config, field_manager="kube-controller-manager", user_agent="kubesvc-controller-manager") as client, \
            RestClient(scheduler_config, field_manager="default-scheduler", user_agent="kubesvc-scheduler") as scheduler_client:
        builder = ServiceAccountClientBuilder(client) if use_service_account_credentials else SimpleClientBuilder(client)
        try:
            await _run_until_stopped(ControllerManager(client, config, client_builder=builder, controller_clients={SCHEDULER: scheduler_client}))
        finally:
            await builder.close()


async def _run_until_stopped(manager) -> None:
    """Run the manager until SIGINT/SIGTERM; a lost lease ends it with an error."""
    from kubesvc.client.leaderelection import LeadershipLost
    from kubesvc.controllers.manager import ControllerClientFailed, LeaderElectionLost

    stop = stop_on_signals()
    running = asyncio.create_task(manager.run())
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running in done:
        stopping.cancel()
        try:
            running.result()
        except (LeaderElectionLost, LeadershipLost) as exc:
            raise click.ClickException(f"leaderelection lost: {exc}") from None
        except ControllerClientFailed as exc:
            raise click.ClickException(str(exc)) from None
        return
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


def _register_node_commands() -> None:
    from kubesvc.agent.command import agent_command
    from kubesvc.proxy.command import proxy_command

    main.add_command(proxy_command)
    main.add_command(agent_command)


_register_node_commands()

if __name__ == "__main__":
    main()
