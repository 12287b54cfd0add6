"""``kubesvc dns``: the cluster DNS server (``kubesvc.dns``), run as the kube-dns add-on.

Flags follow CoreDNS's Corefile where it has one (``kubernetes <zone>``, ``ttl``, ``pods``,
``forward . /etc/resolv.conf``, ``health :8080``, ``ready :8181``, ``prometheus :9153``).
Without ``--kubeconfig`` the server uses the in-cluster configuration as client-go's
``rest.InClusterConfig`` does: the API at ``KUBERNETES_SERVICE_HOST``:``KUBERNETES_SERVICE_PORT``,
the Pod's ServiceAccount token and CA from ``/var/run/secrets/kubernetes.io/serviceaccount``;
the token file is re-read when it changes (the kubelet rotates it).

The first line on stdout, once it listens, is ``kubesvc dns serving <zone> on <address>:<port>``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import click

from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals

log = logging.getLogger("kubesvc.dns")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class FileTokenSource:
    """The bearer token from a file, re-read when its modification time changes."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: float | None = None
        self._token = ""

    async def token(self) -> str:
        from kubesvc.client.rest import ClientError

        try:
            stamp = self.path.stat().st_mtime
            if stamp != self._stamp:
                self._token, self._stamp = self.path.read_text().strip(), stamp
        except OSError as exc:
            raise ClientError(f"cannot read the ServiceAccount token {self.path}: {exc.strerror}") from None
        return self._token

    def reset(self, token: str) -> None:
        self._stamp = None


def in_cluster_config(env=os.environ, directory: Path = SERVICE_ACCOUNT_DIR):
    """client-go's InClusterConfig: (ClientConfig, token source); one-line error otherwise."""
    from kubesvc.client.kubeconfig import ClientConfig

    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise click.ClickException("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"
                                   " (or give --kubeconfig)")
    try:
        ca = (directory / "ca.crt").read_bytes()
    except OSError as exc:
        raise click.ClickException(f"unable to load in-cluster configuration: {directory / 'ca.crt'}: {exc.strerror}") from None
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return ClientConfig(server=server, ca_pem=ca), FileTokenSource(directory / "token")


def check_names(cluster_domain: str, self_addresses) -> None:
    """The cluster domain a DNS-1123 subdomain (kubeadm's ``networking.dnsDomain`` rule; a
    trailing dot allowed) and each ``--self-address`` an IP, else click's usage error."""
    import ipaddress

    from kubesvc.api.validation_meta import is_dns1123_subdomain

    domain = cluster_domain[:-1] if cluster_domain.endswith(".") else cluster_domain
    problems = is_dns1123_subdomain(domain) if domain else ["must not be empty"]
    if problems:
        raise click.BadParameter(f"{cluster_domain!r}: {'; '.join(problems)}", param_hint="'--cluster-domain'")
    for address in self_addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise click.BadParameter(f"{address!r} is not an IP address", param_hint="'--self-address'") from None


@click.command()
@click.option("--cluster-domain", default="cluster.local", show_default=True, help="The cluster's DNS domain (CoreDNS's kubernetes zone).")
@click.option("--kubeconfig", default=None, help="Kubeconfig file; without it, the in-cluster configuration.")
@click.option("--dns-address", "dns_addresses", multiple=True, default=["0.0.0.0"], show_default=True,
              help="Address to serve DNS on (repeatable).")
@click.option("--dns-port", type=click.IntRange(0, 65535), default=53, show_default=True, help="UDP and TCP port (0: any free port).")
@click.option("--http-address", default="0.0.0.0", show_default=True, help="Address of /health, /ready and /metrics.")
@click.option("--health-port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="/health (CoreDNS's health :8080).")
@click.option("--ready-port", type=click.IntRange(0, 65535), default=8181, show_default=True, help="/ready (CoreDNS's ready :8181).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9153, show_default=True, help="/metrics (CoreDNS's prometheus :9153).")
@click.option("--upstream", "upstreams", multiple=True, help="Resolver for names outside the cluster (IP[:port], repeatable); "
              "default: the nameservers of --resolv-conf.")
@click.option("--resolv-conf", default="/etc/resolv.conf", show_default=True, help="Where the upstream resolvers are read from.")
@click.option("--ttl", type=click.IntRange(0, 3600), default=5, show_default=True, help="TTL of cluster records.")
@click.option("--pods", type=click.Choice(["insecure", "verified", "disabled"]), default="insecure", show_default=True,
              help="<a-b-c-d>.<ns>.pod.<zone> records, as CoreDNS's 'pods' option: insecure (k3s's and kubeadm's Corefile) answers "
                   "any address, verified only a Pod's own (watches Pods: needs list/watch pods), disabled none.")
@click.option("--self-address", "self_addresses", multiple=True, envvar="POD_IP",
              help="This server's own IP (default: $POD_IP): the zone's NS names the Service whose endpoint it is, as CoreDNS's.")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def dns_command(cluster_domain, kubeconfig, dns_addresses, dns_port, http_address, health_port, ready_port, metrics_port,
                upstreams, resolv_conf, ttl, pods, self_addresses, verbosity) -> None:
    """Run the cluster DNS server (CoreDNS's kubernetes, forward and cache plugins)."""
    from kubesvc.cmd import flags
    from kubesvc.dns.answer import Settings
    from kubesvc.dns.forward import BadUpstream, Forwarder, nameservers

    setup_logging(verbosity)
    check_names(cluster_domain, self_addresses)
    if kubeconfig:
        client_config, token_source = flags.load_kubeconfig(kubeconfig), None
    else:
        client_config, token_source = in_cluster_config()
    if not upstreams:
        try:
            upstreams = nameservers(Path(resolv_conf).read_text())
        except OSError as exc:
            log.warning("no upstream resolvers: cannot read %s: %s", resolv_conf, exc.strerror)
            upstreams = []
    try:
        forwarder = Forwarder.to(list(upstreams))
    except BadUpstream as exc:
        raise click.ClickException(str(exc)) from None
    own = [*self_addresses, *(a for a in dns_addresses if a not in ("0.0.0.0", "::"))]
    settings = Settings.for_domain(cluster_domain, ttl=ttl, pods=pods, self_addresses=tuple(dict.fromkeys(own)))
    install_uvloop()
    try:
        asyncio.run(_run(client_config, token_source, settings, forwarder, list(dns_addresses), dns_port, http_address,
                         {"health": health_port, "ready": ready_port, "metrics": metrics_port}))
    except OSError as exc:
        raise click.ClickException(f"cannot serve DNS: {exc.strerror or exc}") from None


def all_synced(informers):
    """Whether every informer has synced (CoreDNS's ``HasSynced``), asked on every query that
    could be NXDOMAIN; once true it stays true (an informer's first list is stored once), so
    it is looked up only until then."""
    done = False

    def synced() -> bool:
        nonlocal done
        done = done or all(informer.has_synced() for informer in informers)
        return done

    return synced


async def _run(client_config, token_source, settings, forwarder, dns_addresses, dns_port, http_address, http_ports) -> None:
    from aiohttp import web

    from kubesvc.client.rest import RestClient
    from kubesvc.dns.metrics import DNSMetrics
    from kubesvc.dns.records import ClusterRecords
    from kubesvc.dns.answer import PODS_VERIFIED
    from kubesvc.dns.server import Resolver, http_app, start_dns, watch_cluster
    from kubesvc.util.aio import cancel_and_wait

    stop = stop_on_signals()
    records = ClusterRecords()
    async with RestClient(client_config, user_agent="kubesvc-dns", token_source=token_source) as client:
        informers = watch_cluster(client, records, pods=settings.pods == PODS_VERIFIED)
        resolver = Resolver(records, settings, forwarder, metrics=DNSMetrics(f"dns://:{dns_port}"),
                            synced=all_synced(informers))
        tasks = [asyncio.create_task(informer.run()) for informer in informers]
        listeners = []
        runner = web.AppRunner(http_app(resolver), access_log=None)
        await runner.setup()
        try:
            port = dns_port
            for address in dns_addresses:
                udp, tcp = await start_dns(resolver, address, port)
                port = tcp.sockets[0].getsockname()[1]
                listeners.append((udp, tcp))
            for http_port in sorted(set(p for p in http_ports.values() if p)):
                await web.TCPSite(runner, http_address, http_port).start()
            # CoreDNS waits up to 5 s (startup_timeout) for its informers, then serves anyway
            await asyncio.wait([asyncio.create_task(i.wait_for_sync()) for i in informers], timeout=5.0)
            click.echo(f"kubesvc dns serving {settings.zone.to_text()} on {dns_addresses[0]}:{port}")
            sys.stdout.flush()
            log.info("upstream resolvers: %s", ", ".join(u.address for u in forwarder.upstreams) or "none")
            await stop.wait()
        finally:
            for udp, tcp in listeners:
                udp.close()
                tcp.close()
            for informer in informers:
                informer.stop()
            await cancel_and_wait(tasks)
            await runner.cleanup()
