"""``kubesvc lb-announcer``: this node's L2 announcements of LoadBalancer addresses (MetalLB's
speaker in L2 mode): stands in a Lease election per address (controllers/loadbalancer/
announcer.py) and answers ARP (IPv4, kernel/arp.py) and NDP (IPv6, kernel/ndp.py) on
``--interface`` for the addresses it holds.

Run one on every node, in the node's network namespace, with a kubeconfig whose identity may
list/watch Services, EndpointSlices and LoadBalancerIPPools and write Leases in ``kubesvc-lb``:
kube-proxy's (controllers/loadbalancer/announceraccess.py creates the namespace, the Role there
and the pool reader's ClusterRole). Only addresses of a pool are ever answered for.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys

import click

from kubesvc.cmd import flags
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals


@click.command()
@click.option("--kubeconfig", required=True, help="Kubeconfig file of the announcer's identity.")
@click.option("--node-name", required=True, help="This node's name (the Lease holder identity).")
@click.option("--interface", default="", help="The LAN interface to answer ARP on (the one with the node's IP).")
@click.option("--node-ip", default="", help="Instead of --interface: answer ARP on the interface holding this address (what up passes).")
@click.option("--lease-duration", type=click.FloatRange(min=1.0), default=15.0, show_default=True,
              help="Seconds another node waits for an unchanged Lease before it takes over (a killed holder's failover time).")
@click.option("--renew-deadline", type=click.FloatRange(min=0.5), default=10.0, show_default=True)
@click.option("--retry-period", type=click.FloatRange(min=0.1), default=2.0, show_default=True)
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def lb_announcer_command(kubeconfig, node_name, interface, node_ip, lease_duration, renew_deadline, retry_period, verbosity) -> None:
    """Answer ARP for the LoadBalancer addresses this node is elected for."""
    setup_logging(verbosity)
    if not lease_duration > renew_deadline > retry_period * 1.2:
        raise click.UsageError("need --lease-duration > --renew-deadline > 1.2 x --retry-period")
    if bool(interface) == bool(node_ip):
        raise click.UsageError("give one of --interface and --node-ip")
    client_config = flags.load_kubeconfig(kubeconfig)
    from kubesvc.kernel.arp import ArpSocket
    from kubesvc.kernel.ndp import NdpSocket

    if node_ip:
        from kubesvc.kernel.links import link_info, link_names

        interface = interface_holding(node_ip, {name: link_info(name) for name in sorted(link_names())})
        if interface is None:
            raise click.ClickException(f"no interface holds --node-ip {node_ip}")

    try:
        arp = ArpSocket(interface)
    except OSError as exc:
        raise click.ClickException(f"cannot answer ARP on {interface}: {exc.strerror or exc}") from None
    try:
        ndp = NdpSocket(interface)
    except OSError as exc:
        arp.close()
        raise click.ClickException(f"cannot answer NDP on {interface}: {exc.strerror or exc}") from None
    install_uvloop()
    try:
        asyncio.run(_run(client_config, arp, ndp, node_name, (lease_duration, renew_deadline, retry_period), kubeconfig))
    finally:
        arp.close()
        ndp.close()


def interface_holding(address: str, links: dict) -> str | None:
    """The first link (by name) among ``links`` (name -> kernel.links.LinkInfo or None) with
    ``address`` among its addresses."""
    for name, info in links.items():
        if info is not None and any(ipaddress.ip_address(cidr.split("/")[0]) == ipaddress.ip_address(address) for cidr in info.addresses):
            return name
    return None


async def _run(client_config, arp, ndp, node_name: str, timing: tuple[float, float, float], kubeconfig: str) -> None:
    from kubesvc.client.certrotation import rotating_client_certificate
    from kubesvc.client.informer import Informer
    from kubesvc.client.rest import ENDPOINTSLICES, SERVICES, RestClient
    from kubesvc.controllers.loadbalancer.announcer import Announcer
    from kubesvc.controllers.loadbalancer.controller import LOADBALANCER_IP_POOLS
    from kubesvc.util.aio import cancel_and_wait

    stop = stop_on_signals()
    lease_duration, renew_deadline, retry_period = timing
    async with RestClient(client_config, user_agent="kubesvc-lb-announcer") as client, \
            rotating_client_certificate(kubeconfig, client):  # a renewed certificate is taken in place
        services, slices, pools = Informer(client, SERVICES), Informer(client, ENDPOINTSLICES), Informer(client, LOADBALANCER_IP_POOLS)
        async def announce(address: str) -> None:
            await (ndp if ":" in address else arp).announce(address)

        announcer = Announcer(client, services, slices, pools, node_name, announce=announce, lease_duration=lease_duration,
                              renew_deadline=renew_deadline, retry_period=retry_period)
        tasks = [asyncio.create_task(t) for t in (services.run(), slices.run(), pools.run(), announcer.run(),
                                                  arp.serve(lambda: announcer.holding), ndp.serve(lambda: announcer.holding))]
        await services.wait_for_sync()
        click.echo(f"kubesvc lb-announcer: node {node_name} answering ARP and NDP on {arp.ifname}")
        sys.stdout.flush()
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        await cancel_and_wait([stopped, *tasks])
        for task in done:
            if task is not stopped and not task.cancelled() and task.exception() is not None:
                raise task.exception()
