"""``kubesvc up``: every component on this machine, each a process of its own (the orchestration
is ``kubesvc.up``, the supervision ``kubesvc.cmd.supervisor``).

It takes the apiserver's flags (``--data-dir`` defaults to ``.kubesvc``) and the node's. A data
directory that still holds the state of an ``up`` that did not clean up is refused, naming
``kubesvc down``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from typing import TYPE_CHECKING

import click

from kubesvc.cmd import flags
from kubesvc.cmd.apiserver import apiserver_options, server_config
from kubesvc.cmd.supervisor import ComponentFailed
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals

if TYPE_CHECKING:
    from kubesvc.apiserver.server import ServerConfig


class RawArgsCommand(click.Command):
    """A command that keeps the arguments it was given, as given (``up`` hands its apiserver
    flags to ``kubesvc apiserver`` unchanged)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["kubesvc.raw_args"] = list(args)
        return super().parse_args(ctx, args)


@click.command("up", cls=RawArgsCommand)
@apiserver_options(default_data_dir=".kubesvc")
@click.option("--node-name", default=None, help="This machine's Node name (default: the hostname, lower-cased).")
@click.option("--pod-cidr", default="10.244.0.0/24", show_default=True, help="The Pod address range of this node.")
@click.option("--node-ip", default=None, help="This node's IP (default: the first global IPv4 address, else the Pod gateway).")
@click.option("--proxy-mode", type=click.Choice(["nftables", "iptables"]), default=None,
              help="The proxy's mode (default: nftables where available, else iptables).")
@click.option("--kubelet-port", type=click.IntRange(0, 65535), default=10250, show_default=True,
              help="The agent's log server port (kubectl logs); 0 picks a free one.")
@click.option("--cluster-domain", default="cluster.local", show_default=True,
              help="The cluster's DNS domain: the DNS add-on's zone, Pods' search domains (k3s's flag).")
@click.option("--cluster-dns", default=None, help="The cluster DNS Service's IP (default: the tenth address of the Service range).")
@click.option("--resolv-conf", default="/etc/resolv.conf", show_default=True,
              help="The resolver configuration Pods' DNS starts from; the DNS add-on forwards to its nameservers (k3s's flag).")
@click.option("--cluster-cidr", default="10.244.0.0/16", show_default=True,
              help="With --cluster-init/--server: the Pod range of the whole cluster, from which the controller-manager gives every "
                   "node joining with kubesvc join its own (k3s's flag).")
@click.option("--pod-network", type=click.Choice(["none", "routes", "vxlan"]), default="none", show_default=True,
              help="How this node's Pods reach other nodes' Pods (kubesvc agent --pod-network): direct routes (one L2 segment, "
                   "flannel host-gw), VXLAN (across routers, flannel vxlan), or none (one machine). Pod traffic leaving --cluster-cidr "
                   "is masqueraded.")
@click.option("--loadbalancer-pool", default=None, metavar="FIRST-LAST[,CIDR...]",
              help="Addresses on this LAN for LoadBalancer Services: a LoadBalancerIPPool named default (k3s's ServiceLB, "
                   "MetalLB's L2 mode).")
@click.option("--cluster-init", is_flag=True, default=False,
              help="Start a cluster of several server machines: an etcd member of this machine, the apiserver on it (k3s's flag).")
@click.option("--server", "join_server", default=None, metavar="URL",
              help="Join the cluster of this server machine (https://<first>:6443) as another server, with --token.")
@click.option("--token", default=None, envvar="KUBESVC_TOKEN", help="The bootstrap token to join with (kubesvc token create on a server; "
              "or $KUBESVC_TOKEN, kept out of the process list).")
def up_command(verbosity: int, node_name: str | None, pod_cidr: str, node_ip: str | None, proxy_mode: str | None, kubelet_port: int,
               cluster_init: bool, join_server: str | None, token: str | None, cluster_domain: str, cluster_dns: str | None,
               resolv_conf: str, cluster_cidr: str, pod_network: str, loadbalancer_pool: str | None = None, **options) -> None:
    """Run the whole system on this machine: apiserver (SQLite), controller-manager, node agent and proxy,
    each a process of its own (logs in <data-dir>/logs; one that dies is restarted).
    Ctrl-C stops it and removes every namespace, link and kernel rule it made.
    With --cluster-init (first server) or --server URL --token TOKEN (the others) the apiserver is on
    an etcd cluster, one member per server machine, and several machines share one control plane."""
    setup_logging(verbosity)
    from kubesvc.agent.node import default_node_name
    from kubesvc.agent.poddns import node_resolv_conf
    from kubesvc.cmd.agent import detect_node_ip
    from kubesvc.up import UpOptions, host_port, read_state, serve_pods

    try:
        pod_cidrs = flags.parse_pod_cidrs(pod_cidr)
        node_ips = flags.parse_node_ips(node_ip) if node_ip else [ip for ip in [detect_node_ip(pod_cidrs)] if ip]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    check_cluster_flags(cluster_init, join_server, token, options)
    if cluster_init or join_server or pod_network != "none":
        from kubesvc.controllers.nodeipam.cidrset import parse_cluster_cidrs

        try:
            parse_cluster_cidrs(cluster_cidr)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--cluster-cidr") from None
    lb_blocks = None
    if loadbalancer_pool is not None:
        from kubesvc.controllers.loadbalancer.defaultpool import parse_pool_flag

        try:
            lb_blocks = parse_pool_flag(loadbalancer_pool)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--loadbalancer-pool") from None
    if cluster_dns is not None:
        try:
            ipaddress.ip_address(cluster_dns)
        except ValueError:
            raise click.BadParameter(f"--cluster-dns: {cluster_dns!r} is not an IP address") from None
    from kubesvc.cluster.etcd_member import load_spec

    if not join_server and options.get("storage_backend") in (None, "sqlite") and load_spec(options["data_dir"]) is not None:
        cluster_init = True  # a server machine of a cluster restarts on its etcd member, flags or not (as k3s's)
    config = server_config(**options)  # every flag checked here, before anything starts
    previous = read_state(config.data_dir)
    if previous is not None:
        raise click.ClickException(f"{config.data_dir} holds the state of a kubesvc up (pid {previous.get('pid')}) that did not clean up; "
                                   f"run: kubesvc down --data-dir {options['data_dir']}")
    up_options = UpOptions(node_name=node_name or default_node_name(), pod_cidrs=pod_cidrs,
                           service_cidrs=[c.strip() for c in config.service_cluster_ip_range.split(",") if c.strip()],
                           node_ips=node_ips, proxy_mode=proxy_mode or "", kubelet_port=kubelet_port,
                           cluster_init=cluster_init, server=join_server, token=token,
                           cluster_domain=cluster_domain.strip("."), cluster_dns=cluster_dns,
                           resolv_conf=node_resolv_conf(resolv_conf) if resolv_conf == "/etc/resolv.conf" else resolv_conf,
                           cluster_cidr=cluster_cidr, pod_network=pod_network, loadbalancer_pool=lb_blocks)
    context = click.get_current_context()
    serve_pods(config, up_options, bind_address_given=context.get_parameter_source("bind_address") != click.core.ParameterSource.DEFAULT)

    def announce(system) -> None:
        click.echo(f"kubesvc is up at {system.url}; kubeconfig: {system.kubeconfig}")
        click.echo(f"  node {up_options.node_name}: Pods in {','.join(pod_cidrs)}, proxy in {system.proxy_mode} mode")
        click.echo(f"  logs: {system.data_dir / 'logs'}/<component>.log")
        if system.etcd_member is not None:
            member = system.etcd_member
            click.echo(f"  etcd member {member.spec.name} at {member.spec.client_url}; another server joins with: kubesvc token create --control-plane, "
                       f"then there: kubesvc up --server https://{host_port(config.advertise_address)}:{system.url.rsplit(':', 1)[1]} --token <token>")
            click.echo("  a node joins with what this prints: kubesvc token create --print-join-command")
        click.echo(f"  Service map: {system.url}/ui/ (sign in with a token: kubectl create token <serviceaccount>)")
        click.echo(f"  try: export KUBECONFIG={system.kubeconfig}; kubectl get nodes    (Ctrl-C stops and cleans up)")
        sys.stdout.flush()

    install_uvloop()
    try:
        errors = asyncio.run(_up(config, up_options, context.meta.get("kubesvc.raw_args", []), verbosity, announce))
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc.strerror or exc}") from None
    except ComponentFailed as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    if errors:
        raise click.ClickException("cleanup failed (run kubesvc down to retry): " + "; ".join(errors))


def check_cluster_flags(cluster_init: bool, server: str | None, token: str | None, options: dict) -> None:
    """--cluster-init and --server exclude each other; --server needs --token and an https URL;
    either puts the apiserver on etcd, so no other storage may be asked for."""
    if cluster_init and server:
        raise click.UsageError("--cluster-init starts a cluster and --server joins one: give one of them")
    if server and not token:
        raise click.UsageError("--server needs --token (print one on a server with: kubesvc token create)")
    if token and not server:
        raise click.UsageError("--token goes with --server")
    if server and not server.startswith("https://"):
        raise click.BadParameter(f"{server} is not an https:// URL of a server machine (https://<address>:6443)", param_hint="--server")
    if (cluster_init or server) and options.get("storage_backend") not in (None, "sqlite"):
        raise click.UsageError("--cluster-init and --server run the apiserver on this machine's etcd member: drop --storage-backend")


async def _up(config: ServerConfig, options, up_args: list[str], verbosity: int, announce) -> list[str]:
    from kubesvc.up import run_up

    return await run_up(config, options, up_args, verbosity, announce, stop_on_signals())
