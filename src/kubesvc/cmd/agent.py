"""``kubesvc agent``: the node agent's command line, with kubelet's flag names where kubelet has
the flag (``--kubeconfig``, ``--hostname-override`` spelled ``--node-name`` as the issue asks,
``--node-ip``, ``--pod-cidr``, ``--address``, ``--port``, ``--tls-cert-file``,
``--tls-private-key-file``, ``--client-ca-file``). Bad flags or a failed start print one
line and exit non-zero; SIGINT/SIGTERM stop every Pod and remove every namespace and link the
agent made.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from pathlib import Path

import click

from kubesvc.cmd import flags
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals

log = logging.getLogger("kubesvc.agent")


def _start_failures() -> tuple[type[Exception], ...]:
    """What a failed start raises that deserves one line, not a traceback."""
    from kubesvc.agent.node import PodCIDRMismatch
    from kubesvc.agent.podnet import PodNetworkError
    from kubesvc.client.rest import ClientError
    from kubesvc.kernel.exec import CommandFailed
    from kubesvc.podnetwork.controller import PodNetworkSetupError

    return (PodCIDRMismatch, PodNetworkError, ClientError, CommandFailed, PodNetworkSetupError)


START_FAILURES = _start_failures()


def detect_node_ip(pod_cidrs: list[str]) -> str | None:
    """kubelet's default node IP: the first global IPv4 address of the machine outside the Pod range."""
    from kubesvc.kernel.netlink import local_addresses

    pods = [ipaddress.ip_network(c) for c in pod_cidrs]
    for text in local_addresses(4):
        ip = ipaddress.ip_address(text)
        if ip.is_loopback or ip.is_link_local or any(ip in net for net in pods):
            continue
        return text
    return None


@click.command("agent")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), required=True, help="Path to a kubeconfig file for the API server.")
@click.option("--node-name", default=None, help="The Node's name (default: the hostname, lower-cased).")
@click.option("--pod-cidr", required=True, callback=flags.checked(flags.parse_pod_cidrs),
              help="The node's Pod address range (one CIDR, or an IPv4 and an IPv6 one, comma-separated).")
@click.option("--node-ip", default=None, callback=flags.checked(flags.parse_node_ips),
              help="The node's IP (or an IPv4,IPv6 pair); default: the first global IPv4 address.")
@click.option("--zone", default="", help="The topology.kubernetes.io/zone label of the Node.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("/var/lib/kubesvc-agent"), show_default=True,
              help="IP allocations, network state and container logs.")
@click.option("--address", default="0.0.0.0", show_default=True, help="The address the log server (kubelet API) listens on.")
@click.option("--port", type=click.IntRange(0, 65535), default=10250, show_default=True, help="The log server's port (0 picks a free one).")
@click.option("--bridge", default="cbr0", show_default=True, help="The node bridge the Pods' veths join.")
@click.option("--netns-prefix", default="kubesvc-", show_default=True, help="Prefix of the Pods' network namespace names.")
@click.option("--tls-cert-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The log server's certificate (default: a self-signed one in --cert-dir, which the apiserver does not trust); "
                   "a renewed one in the file is served from the next connection on.")
@click.option("--tls-private-key-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="The key of --tls-cert-file.")
@click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the self-signed serving pair is made and, with --rotate-server-certificates, where the issued one is "
                   "(default: <data-dir>/pki).")
@click.option("--rotate-server-certificates", is_flag=True, default=False,
              help="Serve <cert-dir>/kubelet-server.crt and .key, issued and renewed by kubesvc join (the kubelet's "
                   "serverTLSBootstrap): a self-signed pair until they are there, each new pair in place.")
@click.option("--client-ca-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="CA bundle that verifies callers' client certificates (without it every caller is refused).")
@click.option("--pod-network", type=click.Choice(["none", "routes", "vxlan"]), default="none", show_default=True,
              help="How this node's Pods reach other nodes' Pods: direct routes via each node's InternalIP (one L2 segment, "
                   "flannel host-gw), a VXLAN overlay (flannel vxlan, across routers), or none (one machine).")
@click.option("--cluster-cidr", default=None, callback=flags.checked(flags.parse_pod_cidrs),
              help="The cluster's Pod range (every node's podCIDR inside it; one CIDR or one per family): Pod traffic leaving it "
                   "is masqueraded. Required with --pod-network routes|vxlan.")
@click.option("--pod-network-kubeconfig", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A kubeconfig whose identity may list and watch every Node (the node's own may read only its Node; "
                   "kube-proxy's, system:node-proxier, may): what --pod-network follows. Default: --kubeconfig.")
@click.option("--cluster-dns", default=None, callback=flags.comma_list,
              help="Comma-separated DNS server IPs of the cluster (the kubelet's clusterDNS): ClusterFirst Pods resolve through them.")
@click.option("--cluster-domain", default="", help="The cluster's DNS domain (e.g. cluster.local): Pods search it before the host's domains.")
@click.option("--resolv-conf", default="/etc/resolv.conf", show_default=True,
              help="The resolver configuration Pods' DNS configuration starts from ('': none, a local resolver).")
@click.option("--shutdown-grace-period", default="5s", show_default=True, callback=flags.duration,
              help="On SIGINT/SIGTERM, how long each Pod's containers get between SIGTERM and SIGKILL.")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def agent_command(kubeconfig: str, node_name: str | None, pod_cidr: list[str], node_ip: list[str] | None, zone: str, data_dir: Path,
                  address: str, port: int, bridge: str, netns_prefix: str, tls_cert_file: Path | None, tls_private_key_file: Path | None,
                  cert_dir: Path | None, rotate_server_certificates: bool, client_ca_file: Path | None, pod_network: str,
                  cluster_cidr: list[str] | None, pod_network_kubeconfig: str | None,
                  cluster_dns: list[str] | None, cluster_domain: str, resolv_conf: str, shutdown_grace_period: float,
                  verbosity: int) -> None:
    """Run the node agent: register the Node and run its Pods as processes in network namespaces.
    It prints one line on stdout once it runs (``kubesvc up`` waits for it)."""
    setup_logging(verbosity)
    from kubesvc.agent.agent import AgentConfig
    from kubesvc.agent.poddns import NodeDNS
    from kubesvc.agent.node import default_node_name

    if (tls_cert_file is None) != (tls_private_key_file is None):
        raise click.BadParameter("--tls-cert-file and --tls-private-key-file go together")
    if pod_network != "none" and not cluster_cidr:
        raise click.BadParameter(f"--pod-network {pod_network} needs --cluster-cidr (the range every node's podCIDR is in)")
    for ip in cluster_dns or []:
        if not _is_ip(ip):
            raise click.BadParameter(f"--cluster-dns: {ip!r} is not an IP address")
    client_config = flags.load_kubeconfig(kubeconfig)
    node_ips = node_ip or [ip for ip in [detect_node_ip(pod_cidr)] if ip]
    if not node_ips:
        raise click.ClickException("no global IPv4 address on this machine: give the node's address with --node-ip")
    config = AgentConfig(node_name=node_name or default_node_name(), pod_cidrs=pod_cidr, node_ips=node_ips, data_dir=data_dir.resolve(),
                         zone=zone, kubelet_bind_address=address, kubelet_port=port, bridge=bridge, netns_prefix=netns_prefix,
                         tls_cert_file=tls_cert_file and tls_cert_file.resolve(),
                         tls_private_key_file=tls_private_key_file and tls_private_key_file.resolve(),
                         client_ca_file=client_ca_file and client_ca_file.resolve(), shutdown_grace=shutdown_grace_period,
                         cert_dir=cert_dir and cert_dir.resolve(), rotate_server_certificates=rotate_server_certificates,
                         dns=NodeDNS(tuple(cluster_dns or ()), cluster_domain, resolv_conf))
    cross_node = None
    if pod_network != "none":
        from kubesvc.podnetwork.controller import PodNetworkConfig

        cross_node = (PodNetworkConfig(config.node_name, pod_network, list(node_ips), list(pod_cidr), list(cluster_cidr or [])),
                      flags.load_kubeconfig(pod_network_kubeconfig) if pod_network_kubeconfig else None)
    install_uvloop()
    try:
        asyncio.run(_run(client_config, config, cross_node, kubeconfig=kubeconfig, pod_network_kubeconfig=pod_network_kubeconfig))
    except OSError as exc:
        raise click.ClickException(f"cannot start the agent: {exc.strerror or exc}") from None
    except START_FAILURES as exc:
        raise click.ClickException(f"cannot start the agent: {exc}") from None


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


async def run_agent_until(client, config, stop: asyncio.Event, announce=None, pod_network=None) -> list[str]:
    """Start an agent (with ``pod_network``, a ``kubesvc.podnetwork`` controller, if given), run
    it until ``stop`` is set, stop it; returns cleanup errors."""
    from kubesvc.agent.agent import Agent

    agent = Agent(client, config, pod_network=pod_network)
    try:
        await agent.start()
        if announce is not None:
            announce(agent)
        await stop.wait()
    finally:
        errors = await agent.stop()
    return errors


def _announce(agent) -> None:
    click.echo(f"kubesvc agent running for node {agent.config.node_name}: Pods in {','.join(agent.config.pod_cidrs)}, "
               f"log server on port {agent.kubelet.port}")
    sys.stdout.flush()


async def _run(client_config, config, cross_node=None, *, kubeconfig: str, pod_network_kubeconfig: str | None = None) -> None:
    """``cross_node``: (``PodNetworkConfig``, the ClientConfig that lists the Nodes or None) for
    ``--pod-network routes|vxlan``; the agent runs the controller (k3s runs flannel in its agent).
    Each client follows its kubeconfig's client certificate (a renewal is taken in place)."""
    from contextlib import AsyncExitStack

    from kubesvc.client.certrotation import rotating_client_certificate
    from kubesvc.client.rest import RestClient

    stop = stop_on_signals()
    async with RestClient(client_config, field_manager="kubelet", user_agent="kubesvc-agent") as client, AsyncExitStack() as rotations:
        await rotations.enter_async_context(rotating_client_certificate(kubeconfig, client))
        pod_network = None
        if cross_node is not None:
            from kubesvc.podnetwork.controller import on_this_host

            network_config, watch_config = cross_node
            watch = RestClient(watch_config, field_manager="kubesvc-pod-network", user_agent="kubesvc-agent") if watch_config else None
            if watch is not None and pod_network_kubeconfig:
                await rotations.enter_async_context(rotating_client_certificate(pod_network_kubeconfig, watch))
            pod_network = on_this_host(client, network_config, watch)
        errors = await run_agent_until(client, config, stop, _announce, pod_network)
    if errors:
        raise click.ClickException("cleanup failed: " + "; ".join(errors))
