"""``kubesvc apiserver``: kube-apiserver's command line (upstream ``cmd/kube-apiserver/app/options``).

Flags keep upstream's names and defaults. ``apiserver_options`` is shared with ``kubesvc up``,
which runs the same server (with ``--data-dir`` defaulted). The apiserver's own modules load
only when a command runs it, so the node commands start without them.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kubesvc.cmd import flags
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals

if TYPE_CHECKING:  # the apiserver's modules load only for the commands that run it
    from kubesvc.apiserver.server import APIServer, ServerConfig


async def _serve_until_signalled(server: APIServer, announce) -> None:
    await server.start()
    # What start() built (modules, schemas, policy, the loaded watch cache) lives as long as the
    # process: out of the collector's sight, so a full collection, which stops every request,
    # walks only what came after (at 10k Services half as long: 44 ms instead of 97 ms of CPU)
    gc.freeze()
    announce(server)
    try:
        await stop_on_signals().wait()
    finally:
        await server.stop()


def _run_apiserver(config: ServerConfig, announce) -> None:
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
            click.option("--storage-backend", type=click.Choice(["sqlite", "etcd3", "memory"]), default="sqlite", show_default=True,
                         help="sqlite: <data-dir>/state.db, for one apiserver; etcd3: the etcd cluster at --etcd-servers, which several apiservers share."),
            *_etcd_flags(),
            click.option("--bind-address", default="127.0.0.1", show_default=True),
            click.option("--secure-port", type=click.IntRange(0, 65535), default=6443, show_default=True, help="0 picks a free port."),
            click.option("--service-cluster-ip-range", default="10.96.0.0/12", show_default=True, callback=flags.service_cidrs),
            click.option("--service-node-port-range", default="30000-32767", show_default=True, callback=flags.port_range),
            click.option("--feature-gates", default="", callback=flags.feature_gates(), help="Comma-separated Name=true|false pairs."),
            click.option("--etcd-compaction-interval", "compaction_interval", default="5m0s", show_default=True, callback=_interval,
                         help="The interval of compaction requests (a duration, or seconds). If 0, the compaction request from apiserver is disabled."),
            click.option("--compaction-retain-revisions", type=click.IntRange(min=1), default=10000, show_default=True,
                         help="Revisions of history kept for watches and consistent lists."),
            click.option("--watch-cache", type=flags.GO_BOOL, is_flag=False, flag_value=True, default=True, show_default=True,
                         help="Serve lists and watches from the in-memory watch cache (false: from storage, each object decoded per request)."),
            click.option("--repair-services-interval", type=click.FloatRange(min=0.1), default=180.0, show_default=True,
                         help="Seconds between passes of the ClusterIP and NodePort repair loops (upstream's RepairServicesInterval)."),
            click.option("--advertise-address", default=None, callback=flags.advertise_address,
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


def _interval(ctx, param, value: str) -> float:
    """A Go duration (kube-apiserver's ``5m0s``) or a plain number of seconds."""
    try:
        seconds = float(value)
    except ValueError:
        return flags.duration(ctx, param, value)
    if seconds < 0:
        raise click.BadParameter(f"{value} must not be negative")
    return seconds


def _etcd_flags() -> list:
    """kube-apiserver's etcd flags (``k8s.io/apiserver/pkg/server/options/etcd.go``), for
    ``--storage-backend etcd3`` (storage/etcd)."""
    existing = click.Path(dir_okay=False, exists=True, path_type=Path)
    return [
        click.option("--etcd-servers", default="", help="List of etcd servers to connect with (scheme://ip:port), comma separated."),
        click.option("--etcd-cafile", type=existing, default=None, help="SSL Certificate Authority file used to secure etcd communication."),
        click.option("--etcd-certfile", type=existing, default=None, help="SSL certification file used to secure etcd communication."),
        click.option("--etcd-keyfile", type=existing, default=None, help="SSL key file used to secure etcd communication."),
        click.option("--etcd-prefix", default="/registry", show_default=True, help="The prefix to prepend to all resource paths in etcd."),
    ]


def etcd_config(etcd_servers: str, etcd_cafile, etcd_certfile, etcd_keyfile, etcd_prefix: str, compaction_interval: float):
    """The etcd backend's configuration from the --etcd-* flags (``click.BadParameter`` with
    kube-apiserver's words when they do not fit together)."""
    from kubesvc.storage.etcd import EtcdConfig

    servers = tuple(server.strip() for server in etcd_servers.split(",") if server.strip())
    if not servers:
        raise click.BadParameter("--etcd-servers must be specified")
    if (etcd_certfile is None) != (etcd_keyfile is None):
        raise click.BadParameter("--etcd-certfile and --etcd-keyfile go together")
    resolved = [path and str(path.resolve()) for path in (etcd_cafile, etcd_certfile, etcd_keyfile)]
    return EtcdConfig(servers, *resolved, prefix=etcd_prefix, compaction_interval=compaction_interval)


def _connection_flags() -> list:
    """kube-apiserver's in-flight limits, and its http.Server's timeouts (apiserver/limits.py,
    apiserver/connections.py; upstream has no flags for the timeouts)."""
    from kubesvc.apiserver import connections, limits

    return [
        click.option("--max-requests-inflight", type=click.IntRange(min=0), default=limits.DEFAULT_MAX_REQUESTS_INFLIGHT, show_default=True,
                     help="Most non-mutating requests (get, list) served at once; more get 429. Watches and logs do not count. 0: no limit."),
        click.option("--max-mutating-requests-inflight", type=click.IntRange(min=0), default=limits.DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
                     show_default=True, help="Most mutating requests served at once; more get 429. 0: no limit."),
        click.option("--read-header-timeout", default=f"{connections.DEFAULT_READ_HEADER_TIMEOUT:g}s", show_default=True, callback=flags.duration,
                     help="Time a client has for the TLS handshake and for each request's headers; slower connections are closed."),
        click.option("--idle-connection-timeout", default=f"{connections.DEFAULT_IDLE_TIMEOUT:g}s", show_default=True, callback=flags.duration,
                     help="Time a keep-alive connection may wait for its next request before it is closed."),
    ]


def _authentication_flags() -> list:
    """kube-apiserver's authentication flags (auth/options.py)."""
    existing = click.Path(dir_okay=False, exists=True, path_type=Path)
    on_off = dict(type=flags.GO_BOOL, is_flag=False, flag_value=True, show_default=True)
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
        click.option("--service-account-max-token-expiration", default="0s", callback=flags.duration,
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


def server_config(data_dir, storage_backend, bind_address, secure_port, service_cluster_ip_range, service_node_port_range, feature_gates,
                  compaction_interval, compaction_retain_revisions, repair_services_interval, watch_cache=True, advertise_address=None, client_ca_file=None,
                  kubelet_client_certificate=None, kubelet_client_key=None, kubelet_certificate_authority=None,
                  authorization_modes=("Node", "RBAC"), enable_admission_plugins="", disable_admission_plugins="", endpoint_reconciler_type="lease",
                  max_requests_inflight=400, max_mutating_requests_inflight=200, read_header_timeout=32.0, idle_connection_timeout=90.0,
                  etcd_servers="", etcd_cafile=None, etcd_certfile=None, etcd_keyfile=None, etcd_prefix="/registry",
                  **authentication) -> ServerConfig:
    """The ``ServerConfig`` of ``apiserver_options``' flags (cross-flag checks as ``click.BadParameter``)."""
    from kubesvc.apiserver.admission.plugins import resolve_admission_plugins
    from kubesvc.apiserver.server import ServerConfig

    if (kubelet_client_certificate is None) != (kubelet_client_key is None):
        raise click.BadParameter("--kubelet-client-certificate and --kubelet-client-key go together")
    admission_plugins, problems = resolve_admission_plugins(enable_admission_plugins, disable_admission_plugins)
    if problems:
        raise click.BadParameter(", ".join(problems))
    etcd = etcd_config(etcd_servers, etcd_cafile, etcd_certfile, etcd_keyfile, etcd_prefix, compaction_interval) \
        if storage_backend == "etcd3" else None
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
        watch_cache=watch_cache,
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
        path_handlers=(service_map_paths(),),  # /ui/: the Service map (kubesvc.ui.routes)
        **({"etcd": etcd} if etcd else {}),
    )


def service_map_paths():
    from kubesvc.ui.routes import path_handler

    return path_handler()


@click.command("apiserver")
@apiserver_options(default_data_dir=None)
def apiserver_command(verbosity: int, **options) -> None:
    """Run the Kubernetes-compatible API server."""
    setup_logging(verbosity)

    def announce(server: APIServer) -> None:
        click.echo(f"kubesvc apiserver listening on {server.url}; kubeconfig: {server.kubeconfig}", err=False)
        sys.stdout.flush()

    _run_apiserver(server_config(**options), announce)
