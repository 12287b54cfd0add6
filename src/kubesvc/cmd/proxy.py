"""``kubesvc proxy``: kube-proxy's command line (upstream ``cmd/kube-proxy/app/options.go``).

Flags keep upstream's names and meanings; ``--config`` (a ``KubeProxyConfiguration`` file) wins
over every other flag except ``--hostname-override``, as upstream. Bad flags, a bad file or a
failed start print one line and exit non-zero. ``--cleanup`` removes every table, chain and rule
any mode of the proxy made, then exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys

import click

from kubesvc.cmd import flags
from kubesvc.kernel.exec import CommandFailed
from kubesvc.proxy.config import PROXY_FEATURE_GATES, ConfigError, ProxyFlags, check_ip_flag, check_ip_port_flag, complete, resolve
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals

log = logging.getLogger("kubesvc.proxy")


def _ip(ctx, param, value):
    if value is not None and (problem := check_ip_flag(value)):
        raise click.BadParameter(problem)
    return value


def _ip_port(ctx, param, value):
    if value is not None and (problem := check_ip_port_flag(value)):
        raise click.BadParameter(problem)
    return value


@click.command("proxy")
@click.option("--config", default="", help="The path to the configuration file (KubeProxyConfiguration).")
@click.option("--kubeconfig", default=None, help="Path to kubeconfig file with authorization information.")
@click.option("--kube-api-content-type", default=None,
              help="Content type of requests sent to apiserver (default application/vnd.kubernetes.protobuf; this client sends JSON).")
@click.option("--kube-api-qps", type=float, default=None, help="QPS to use while talking with kubernetes apiserver (default 5).")
@click.option("--kube-api-burst", type=int, default=None, help="Burst to use while talking with kubernetes apiserver (default 10).")
@click.option("--proxy-mode", default=None, help="Which proxy mode to use: 'nftables' (default where available), 'iptables', 'ipvs' or 'userspace'.")
@click.option("--hostname-override", default="", help="If non-empty, will be used as the name of the Node that kube-proxy is running on.")
@click.option("--cluster-cidr", default=None, help="The CIDR range of the pods in the cluster (for --detect-local-mode=ClusterCIDR).")
@click.option("--detect-local-mode", default=None, help="Mode to use to detect local traffic: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix.")
@click.option("--pod-bridge-interface", default=None, help="A bridge interface name (for --detect-local-mode=BridgeInterface).")
@click.option("--pod-interface-name-prefix", default=None, help="An interface name prefix (for --detect-local-mode=InterfaceNamePrefix).")
@click.option("--nodeport-addresses", default=None, callback=flags.comma_list,
              help="CIDRs or 'primary': the addresses that accept NodePort connections (nftables default: primary).")
@flags.bool_option("--masquerade-all", help="SNAT all traffic sent via Service cluster IPs.")
@click.option("--iptables-masquerade-bit", type=int, default=None, help="The bit of the fwmark space to mark packets requiring SNAT (0-31).")
@flags.bool_option("--iptables-localhost-nodeports", help="Allow NodePort connections to 127.0.0.1 (iptables mode, IPv4).")
@click.option("--iptables-sync-period", default=None, callback=flags.optional_duration, help="Retry and interference-check interval (e.g. '30s').")
@click.option("--iptables-min-sync-period", default=None, callback=flags.optional_duration, help="Minimum period between rule syncs (e.g. '1s').")
@click.option("--ipvs-sync-period", default=None, callback=flags.optional_duration)
@click.option("--ipvs-min-sync-period", default=None, callback=flags.optional_duration)
@click.option("--ipvs-scheduler", default=None)
@click.option("--ipvs-exclude-cidrs", default=None, callback=flags.comma_list)
@flags.bool_option("--ipvs-strict-arp", help="Enable strict ARP (arp_ignore=1, arp_announce=2).")
@click.option("--ipvs-tcp-timeout", default=None, callback=flags.optional_duration,
              help="The timeout for idle IPVS TCP connections, 0 to leave as-is (e.g. '5s', '1m', '2h22m').")
@click.option("--ipvs-tcpfin-timeout", default=None, callback=flags.optional_duration,
              help="The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as-is (e.g. '5s', '1m', '2h22m').")
@click.option("--ipvs-udp-timeout", default=None, callback=flags.optional_duration,
              help="The timeout for IPVS UDP packets, 0 to leave as-is (e.g. '5s', '1m', '2h22m').")
@click.option("--bind-address", default=None, callback=_ip, help="Overrides kube-proxy's idea of the primary node IP.")
@flags.bool_option("--bind-address-hard-fail", help="Treat failure to bind to a port as fatal.")
@click.option("--healthz-bind-address", default=None, callback=_ip_port, help="ip:port of the health check server (default 0.0.0.0:10256).")
@click.option("--metrics-bind-address", default=None, callback=_ip_port, help="ip:port of the metrics server (default 127.0.0.1:10249).")
@click.option("--config-sync-period", default=None, callback=flags.optional_duration, help="How often configuration from the apiserver is refreshed.")
@click.option("--feature-gates", default=None, callback=flags.feature_gates(PROXY_FEATURE_GATES, optional=True),
              help="Comma-separated Name=true|false pairs.")
@click.option("--oom-score-adj", type=int, default=None)
@click.option("--conntrack-max-per-core", type=int, default=None)
@click.option("--conntrack-min", type=int, default=None)
@click.option("--conntrack-tcp-timeout-established", default=None, callback=flags.optional_duration,
              help="Idle timeout for established TCP connections, 0 to leave as-is (default 24h0m0s).")
@click.option("--conntrack-tcp-timeout-close-wait", default=None, callback=flags.optional_duration,
              help="NAT timeout for TCP connections in the CLOSE_WAIT state (default 1h0m0s).")
@flags.bool_option("--conntrack-tcp-be-liberal", help="Enable liberal mode for tracking TCP packets (nf_conntrack_tcp_be_liberal=1).")
@click.option("--conntrack-udp-timeout", default=None, callback=flags.optional_duration,
              help="Idle timeout for UNREPLIED UDP connections, 0 to leave as-is.")
@click.option("--conntrack-udp-timeout-stream", default=None, callback=flags.optional_duration,
              help="Idle timeout for ASSURED UDP connections, 0 to leave as-is.")
@click.option("--udp-timeout", "udp_timeout", default=None, callback=flags.optional_duration,
              help="How long an idle UDP flow is kept open (userspace mode; e.g. '250ms').")
@click.option("--cleanup", is_flag=True, default=False, help="Remove every rule this proxy ever made, then exit.")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def proxy_command(cleanup: bool, verbosity: int, udp_timeout: float | None, **options) -> None:
    """Run the node proxy (kube-proxy): Service virtual IPs in the kernel."""
    setup_logging(verbosity)
    if cleanup:
        from kubesvc.proxy.server import cleanup_leftovers

        errors = cleanup_leftovers()
        if errors:
            raise click.ClickException("cleanup failed: " + "; ".join(errors))
        return
    proxy_flags = ProxyFlags(**options)
    try:
        settings = resolve(complete(proxy_flags))
    except ConfigError as err:
        raise click.ClickException(str(err)) from None
    if settings.mode not in ("nftables", "iptables", "ipvs", "userspace"):  # ipvs falls back to iptables without kernel support
        raise click.ClickException(f"proxy mode {settings.mode!r} is not available yet; use nftables or iptables")
    if udp_timeout is not None:
        if udp_timeout <= 0:
            raise click.ClickException("--udp-timeout must be greater than 0")
        settings = dataclasses.replace(settings, udp_idle_timeout=udp_timeout)
    if not settings.kubeconfig:
        raise click.ClickException("no --kubeconfig (or clientConnection.kubeconfig) given: in-cluster configuration is not supported")
    client_config = flags.load_kubeconfig(settings.kubeconfig)
    from kubesvc.proxy.startup import apply_oom_score_adj, client_connection_notes

    for level, note in client_connection_notes(settings):
        log.log(level, "%s", note)
    apply_oom_score_adj(settings.oom_score_adj)  # this process is kube-proxy's (upstream Run)
    install_uvloop()
    try:
        asyncio.run(_run(client_config, settings))
    except OSError as exc:
        raise click.ClickException(f"cannot start the proxy: {exc.strerror or exc}") from None
    except CommandFailed as exc:  # a host setting the kernel refused (proxy/startup.py)
        raise click.ClickException(f"cannot start the proxy: {exc}") from None


async def _run(client_config, settings) -> None:
    from kubesvc.client.certrotation import rotating_client_certificate
    from kubesvc.client.flowcontrol import rate_limiter
    from kubesvc.client.rest import RestClient
    from kubesvc.proxy.server import ProxyServer

    stop = stop_on_signals()
    async with RestClient(client_config, field_manager="kube-proxy", user_agent="kubesvc-proxy",
                          rate_limiter=rate_limiter(settings.client_qps, settings.client_burst)) as client, \
            rotating_client_certificate(settings.kubeconfig, client):  # a renewed certificate is taken in place
        server = ProxyServer(client, settings)
        try:
            await server.start()
            log.info("kube-proxy running in %s mode for node %s", server.settings.mode, settings.hostname)  # ipvs may have fallen back
            click.echo(f"kubesvc proxy running in {server.settings.mode} mode for node {settings.hostname}")  # kubesvc up waits for it
            sys.stdout.flush()
            await stop.wait()
        finally:
            await server.stop()
