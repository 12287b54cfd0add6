"""``kubesvc trace SRC DST[:PORT][/tcp|udp|sctp]``: where a new connection goes on this node and
why (``kubesvc.proxy.trace``), read from the kernel's live state, not from the API's intent: the
nftables ``kube-proxy`` tables, ``iptables-save``, in IPVS mode also ``ipset save`` and the IPVS
table (netlink), in userspace mode the portals its proxy publishes (the listener each portal
redirects to, its endpoints, the next one, ClientIP sessions). IPVS mode's rules name no Service:
with an API, the Service is the one whose address and port the destination is.

SRC: an IP, a Pod ``ns/name``, ``node`` (a connection this node starts: the output hook) or
``external`` (a client outside the cluster). DST: ``IP:PORT`` (a ClusterIP, ``<node IP>:<NodePort>``,
an external or LoadBalancer IP) or a Service ``ns/name[:port]`` (its ClusterIP; the port by number
or name, else its first). Pods and Services are read from the API with ``--kubeconfig`` (else
``$KUBECONFIG``, else ``<data-dir>/kubeconfig``), as ``kubesvc explain`` does; with an API the
walk also names each endpoint's Pod, node and EndpointSlice and says why the Service's other
endpoints are not candidates. Without one, only the kernel's own names are used. Run it on the
node (it needs to read nftables: root). Exit 0 when the trace ran, whatever the verdict; 1 when
it could not run.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
from pathlib import Path

import click

PROTOCOLS = ("tcp", "udp", "sctp")


def parse_destination(dst: str) -> tuple[str, str | None, str]:
    """``DST[/proto]`` → (address or ``ns/name``, port or None, protocol)."""
    protocol = "tcp"
    head, sep, tail = dst.rpartition("/")
    if sep and tail.lower() in PROTOCOLS:
        dst, protocol = head, tail.lower()
    if dst.startswith("["):  # [v6]:port
        host, _, port = dst[1:].partition("]")
        return host, port.lstrip(":") or None, protocol
    if dst.count(":") > 1:  # a bare IPv6 address: the port is required in [v6]:port form
        return dst, None, protocol
    host, _, port = dst.partition(":")
    return host, port or None, protocol


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def service_port(service: dict, port: str | None, protocol: str) -> int:
    ports = (service.get("spec") or {}).get("ports") or []
    for p in ports:
        if port is None or str(p.get("port")) == port or p.get("name") == port:
            if port is not None or (p.get("protocol") or "TCP").lower() == protocol:
                return int(p["port"])
    name = (service.get("metadata") or {}).get("name")
    raise click.ClickException(f"service {name!r} has no port {port!r}" if port else f"service {name!r} has no {protocol} port")


@click.command("trace")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST[:PORT][/tcp|udp|sctp]")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The kubeconfig to read Pods, Services and EndpointSlices with (default: $KUBECONFIG, else <data-dir>/kubeconfig).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True)
@click.option("--node", default=None, help="This node's name (traffic policies and hints are per node; default: from the API).")
@click.option("--mode", type=click.Choice(["auto", "nftables", "iptables", "ipvs", "userspace"]), default="auto", show_default=True,
              help="The proxy mode whose rules to walk (auto: our nftables table if there, else IPVS mode's KUBE-IPVS-FILTER, "
                   "else iptables' KUBE-SERVICES, else userspace's KUBE-PORTALS-CONTAINER).")
@click.option("--netns", default=None, help="Read the rules of this named network namespace (ip netns) instead of this one's.")
@click.option("--probe", "probe_from", default=None, metavar="NETNS",
              help="Also send one real connection from this named network namespace (\"node\": the node's own), SRC being "
                   "its address, and show the kernel's own trace of it beside the walk: nft monitor trace (nftables mode), "
                   "a raw-table TRACE rule read with xtables-monitor --trace (iptables and userspace modes, iptables-nft).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def trace_command(src: str, dst: str, kubeconfig: Path | None, data_dir: Path, node: str | None, mode: str, netns: str | None,
                  probe_from: str | None, output: str) -> None:
    """Where a new connection from SRC to DST goes on this node, and why."""
    from kubesvc.proxy.trace import live

    host, port, protocol = parse_destination(dst)
    if is_ip(host) and port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise click.BadParameter(f"{dst!r}: the port must be a number from 1 to 65535 (a protocol after it: /tcp, /udp or /sctp)",
                                 param_hint="DST")
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else data_dir / "kubeconfig")
    needs_api = "/" in src or not is_ip(host)
    if src not in ("node", "external") and "/" not in src and not is_ip(src):
        raise click.BadParameter(f"{src!r}: an IP, a Pod ns/name, node or external", param_hint="SRC")
    if not needs_api and port is None:
        raise click.BadParameter(f"{dst!r}: a port is needed (IP:PORT)", param_hint="DST")
    use_api = needs_api or kubeconfig is not None or path.exists()

    async def run() -> dict:
        state = await live.read_node(netns=netns)
        rep = finish(state, host, int(port), live.Objects()) if not use_api else await with_api(state)
        if probe_from:
            if rep["mode"] not in ("nftables", "iptables", "userspace"):
                raise click.ClickException(f"--probe traces nftables, iptables and userspace modes; this node's rules are {rep['mode']}")
            args = dict(netns=netns, from_netns=netns if probe_from == "node" else probe_from, source=rep["source"]["ip"],
                        dest=rep["destination"]["ip"], port=rep["destination"]["port"], protocol=protocol)
            if rep["mode"] == "nftables":
                from kubesvc.kernel.nftrace import probe
                rep["probe"] = live.compare_probe(rep, await probe(**args))
            else:
                from kubesvc.kernel.xtrace import ProbeUnsupported, probe
                try:
                    rep["probe"] = live.compare_probe_iptables(rep, await probe(**args))
                except ProbeUnsupported as err:
                    raise click.ClickException(str(err)) from None
        return rep

    def finish(state, dest: str, number: int, objs) -> dict:
        fam = live.family_of(dest)
        if src == "external":
            source = live.EXTERNAL[fam]
        elif src == "node":
            own = [a for a in state.addresses if live.family_of(a) == fam and not ipaddress.ip_address(a).is_loopback]
            source = own[0] if own else ("127.0.0.1" if fam == 4 else "::1")
        else:
            source = objs.source_ip or src
        return live.report(state, source, dest, number, protocol, from_node=src == "node", objs=objs,
                           mode=None if mode == "auto" else mode)

    async def with_api(state) -> dict:
        from kubesvc.client.kubeconfig import ConfigError, load_kubeconfig
        from kubesvc.client.rest import RestClient
        from kubesvc.explain.gather import SERVICE_NAME_LABEL, asking_node

        try:
            config = load_kubeconfig(path)
        except (ConfigError, OSError) as err:
            raise click.ClickException(f"cannot load kubeconfig {path}: {err}") from None
        async with RestClient(config, user_agent="kubesvc-trace") as client:
            objs = live.Objects()
            nodes = (await client.list("/api/v1/nodes")).get("items") or []
            objs.node = asking_node(node, nodes)
            for n in nodes:
                if (n.get("metadata") or {}).get("name") == objs.node:
                    objs.node_labels = (n.get("metadata") or {}).get("labels") or {}
            dest, number = host, int(port) if port else None
            if not is_ip(host):
                ns, _, name = host.partition("/")
                service = await client.get(f"/api/v1/namespaces/{ns}/services/{name}")
                dest = (service.get("spec") or {}).get("clusterIP")
                if not dest or dest == "None":
                    raise click.ClickException(f"service {host} has no ClusterIP to trace")
                number = service_port(service, port, protocol)
            if "/" in src:
                ns, _, name = src.partition("/")
                pod = await client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
                ips = [p.get("ip") for p in (pod.get("status") or {}).get("podIPs") or []] or [(pod.get("status") or {}).get("podIP")]
                fam = live.family_of(dest)
                same = [ip for ip in ips if ip and live.family_of(ip) == fam]
                if not same:
                    raise click.ClickException(f"pod {src} has no IPv{fam} address yet")
                objs.source_ip, objs.source_pod = same[0], src
            first = finish(state, dest, number, objs)
            if first["service"] is None and first["mode"] == "ipvs":
                objs.service_port = await owner_of(client, dest, number, protocol, state.addresses)
                first = finish(state, dest, number, objs) if objs.service_port else first
            if first["service"]:
                sp = first["service"]
                objs.service = await client.get(f"/api/v1/namespaces/{sp['namespace']}/services/{sp['name']}")
                objs.slices = (await client.list(f"/apis/discovery.k8s.io/v1/namespaces/{sp['namespace']}/endpointslices",
                                                 {"labelSelector": f"{SERVICE_NAME_LABEL}={sp['name']}"})).get("items") or []
                return finish(state, dest, number, objs)
            return first

    async def owner_of(client, dest: str, number: int, protocol: str, node_addresses: list[str]) -> dict | None:
        from kubesvc.proxy.trace.objects import service_port_owning
        services = (await client.list("/api/v1/services")).get("items") or []
        return service_port_owning(services, dest, number, protocol, node_addresses)

    from kubesvc.client.rest import ApiError, ConnectionFailed
    from kubesvc.kernel.exec import CommandFailed
    try:
        rep = asyncio.run(run())
    except ApiError as err:
        raise click.ClickException(f"the API refused a read: {err}") from None
    except (ConnectionFailed, OSError) as err:
        raise click.ClickException(f"cannot reach the API: {err}") from None
    except CommandFailed as err:
        raise click.ClickException(f"cannot read the node's rules: {err}") from None
    if output == "json":
        click.echo(json.dumps(rep, indent=2))
    else:
        click.echo("\n".join(live.text(rep)))
