"""``kubesvc join https://<server>:6443 --token <token>``: this machine as a node of the cluster
of that server (``kubesvc.nodejoin.system``): the agent with the node's own certificate, the
proxy and the LoadBalancer announcer (``lb-announcer``) with kube-proxy's, as k3s's agents run
kube-proxy, until Ctrl-C, which stops it and removes what it made. A wrong or expired token, an unreachable server or a request that is not approved is one
line and a non-zero exit, with nothing left: no file, no Node, no CertificateSigningRequest
(a wrong token is refused before anything is sent but an anonymous read of cluster-info).

The agent's and proxy's own flags can be passed through with ``--agent-arg`` and
``--proxy-arg`` (repeatable), so a new agent flag needs no new join flag.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from kubesvc.cmd import flags
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals


@click.command("join")
@click.argument("server", metavar="https://<server>:6443")
@click.option("--token", required=True, envvar="KUBESVC_TOKEN",
              help="A bootstrap token of the cluster (kubesvc token create on a server; or $KUBESVC_TOKEN, kept out of the process list).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".kubesvc-node"), show_default=True,
              help="Where the node keeps its key, certificate, kubeconfig (all 0600), logs and agent state.")
@click.option("--node-name", default=None, help="This machine's Node name (default: the hostname, lower-cased).")
@click.option("--node-ip", default=None, help="This node's IP (default: the first global IPv4 address).")
@click.option("--zone", default="", help="The Node's topology.kubernetes.io/zone label.")
@click.option("--pod-cidr", default=None, help="This node's Pod range, for a cluster that assigns none (default: the one it assigns).")
@click.option("--service-cidr", default="10.96.0.0/12", show_default=True, help="The cluster's Service range (routed onto the Pod bridge when nothing routes it).")
@click.option("--cluster-domain", default="cluster.local", show_default=True, help="The cluster's DNS domain (Pods' search domains).")
@click.option("--cluster-dns", default=None, help="The cluster DNS Service's IP (default: the tenth address of --service-cidr).")
@click.option("--resolv-conf", default="/etc/resolv.conf", show_default=True, help="The resolver configuration Pods' DNS starts from.")
@click.option("--proxy-mode", type=click.Choice(["nftables", "iptables"]), default=None,
              help="The proxy's mode (default: nftables where available, else iptables).")
@click.option("--kubelet-port", type=click.IntRange(0, 65535), default=10250, show_default=True, help="The agent's log server port.")
@click.option("--discovery-token-ca-cert-hash", "ca_cert_hashes", multiple=True,
              help="Pin the cluster CA: sha256:<hex of its public key info> (kubeadm's; repeatable).")
@click.option("--pod-network", type=click.Choice(["none", "routes", "vxlan"]), default="none", show_default=True,
              help="How this node's Pods reach other nodes' Pods (kubesvc agent --pod-network): direct routes (one L2 segment), "
                   "VXLAN (across routers) or none.")
@click.option("--cluster-cidr", default="10.244.0.0/16", show_default=True,
              help="The cluster's Pod range (the server's --cluster-cidr): with --pod-network, Pod traffic leaving it is masqueraded.")
@click.option("--agent-arg", "agent_args", multiple=True, help="One more argument for kubesvc agent, as given (repeatable).")
@click.option("--proxy-arg", "proxy_args", multiple=True, help="One more argument for kubesvc proxy, as given (repeatable).")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def join_command(server: str, token: str, data_dir: Path, node_name: str | None, node_ip: str | None, zone: str, pod_cidr: str | None,
                 service_cidr: str, cluster_domain: str, cluster_dns: str | None, resolv_conf: str, proxy_mode: str | None, kubelet_port: int,
                 ca_cert_hashes: tuple[str, ...], agent_args: tuple[str, ...],
                 proxy_args: tuple[str, ...], pod_network: str, cluster_cidr: str, verbosity: int) -> None:
    """Join the cluster of SERVER as a node: certificates through CSRs, then the agent, proxy and LB announcer."""
    setup_logging(verbosity)
    from kubesvc.agent.node import default_node_name
    from kubesvc.cluster.join import JoinFailed
    from kubesvc.cmd.agent import detect_node_ip
    from kubesvc.cmd.supervisor import ComponentFailed
    from kubesvc.nodejoin.system import JoinOptions
    from kubesvc.up import read_state

    if not server.startswith("https://"):
        raise click.BadParameter(f"{server} is not an https:// URL of a server machine (https://<address>:6443)", param_hint="SERVER")
    try:
        pod_cidrs = flags.parse_pod_cidrs(pod_cidr) if pod_cidr else []
        flags.parse_pod_cidrs(cluster_cidr)
        node_ips = flags.parse_node_ips(node_ip) if node_ip else [ip for ip in [detect_node_ip(pod_cidrs or ["10.244.0.0/24"])] if ip]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if not node_ips:
        raise click.UsageError("no global address to use as the node IP: pass --node-ip")
    data_dir = data_dir.resolve()
    previous = read_state(data_dir)
    if previous is not None:
        raise click.ClickException(f"{data_dir} holds the state of a kubesvc join or up (pid {previous.get('pid')}) that did not clean up; "
                                   f"run: kubesvc leave --data-dir {data_dir}")
    options = JoinOptions(server=server.rstrip("/"), token=token, data_dir=data_dir, node_name=node_name or default_node_name(),
                          node_ips=node_ips, zone=zone, pod_cidrs=pod_cidrs,
                          service_cidrs=[c.strip() for c in service_cidr.split(",") if c.strip()], proxy_mode=proxy_mode or "",
                          kubelet_port=kubelet_port, ca_cert_hashes=tuple(ca_cert_hashes), cluster_domain=cluster_domain.strip("."),
                          cluster_dns=cluster_dns, resolv_conf=resolv_conf,
                          # the node's own identity lists the Nodes: up --cluster-init binds system:nodes to system:node-proxier
                          agent_args=[*(["--pod-network", pod_network, "--cluster-cidr", cluster_cidr] if pod_network != "none" else []),
                                      *agent_args],
                          proxy_args=list(proxy_args))

    def announce(system) -> None:
        click.echo(f"kubesvc joined {options.server} as node {options.node_name}: Pods in {','.join(system.pod_cidrs)}, "
                   f"proxy in {system.state.get('proxy_mode', '')} mode")
        click.echo(f"  credentials: {system.paths.kubeconfig} (the node), {system.paths.proxy_kubeconfig} (kube-proxy, lb-announcer); "
                   f"logs: {data_dir / 'logs'}/<component>.log    (Ctrl-C stops and cleans up)")
        sys.stdout.flush()

    install_uvloop()
    try:
        errors = asyncio.run(_join(options, verbosity, announce))
    except JoinFailed as exc:
        raise click.ClickException(f"cannot join: {exc}") from None
    except ComponentFailed as exc:
        raise click.ClickException(f"cannot join: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot join: {exc.strerror or exc}") from None
    if errors:
        raise click.ClickException("cleanup failed (run kubesvc leave to retry): " + "; ".join(errors))


async def _join(options, verbosity: int, announce) -> list[str]:
    from kubesvc.nodejoin.system import run_join

    return await run_join(options, verbosity, announce, stop_on_signals())
