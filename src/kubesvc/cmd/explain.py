"""``kubesvc explain svc/NAME``: why a Service does not answer (``kubesvc.explain``), each cause
one line with its fix; a healthy Service is said to be healthy.

Run on a node (or anywhere the API and the nodes' proxy health ports are reachable) with a
kubeconfig that may read Services, Pods, EndpointSlices, Events and Nodes: ``--kubeconfig``,
else ``$KUBECONFIG``, else ``<data-dir>/kubeconfig`` (the admin kubeconfig ``kubesvc up``
writes). The exit code is 0 when the analysis ran, whatever it found; 1 when it could not run
(no such Service, the API unreachable).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import click

SERVICE_PREFIXES = ("svc/", "service/", "services/")


def service_name(ref: str) -> str:
    for prefix in SERVICE_PREFIXES:
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    else:
        if "/" in ref:
            raise click.BadParameter(f"{ref!r}: only Services can be explained (svc/NAME)")
    if not ref:
        raise click.BadParameter("a Service name is needed: svc/NAME")
    return ref


@click.command("explain")
@click.argument("ref", metavar="svc/NAME")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The kubeconfig to read the cluster with (default: $KUBECONFIG, else <data-dir>/kubeconfig).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True,
              help="The data directory of this machine's kubesvc up (for its admin kubeconfig).")
@click.option("--node", default=None, help="The node asking (traffic policies are per node; default: this machine's Node).")
@click.option("--cluster-domain", default="cluster.local", show_default=True)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--timeout", type=float, default=2.0, show_default=True, help="Seconds to wait for each node's proxy and for DNS.")
def explain_command(ref: str, namespace: str, kubeconfig: Path | None, data_dir: Path, node: str | None, cluster_domain: str,
                    output: str, timeout: float) -> None:
    """Why a Service does not answer: selector, readiness, targetPort, EndpointSlices, traffic policies, proxies, DNS."""
    from kubesvc.client.kubeconfig import ConfigError, load_kubeconfig
    from kubesvc.client.rest import ApiError, ConnectionFailed, RestClient
    from kubesvc.explain.findings import as_json, explain
    from kubesvc.explain.gather import ServiceNotFound, gather

    name = service_name(ref)
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else data_dir / "kubeconfig")
    try:
        config = load_kubeconfig(path)
    except (ConfigError, OSError) as err:
        raise click.ClickException(f"cannot load kubeconfig {path}: {err}") from None

    async def run():
        async with RestClient(config, user_agent="kubesvc-explain") as client:
            return await gather(client, namespace, name, node=node, cluster_domain=cluster_domain, timeout=timeout)

    try:
        snapshot = asyncio.run(run())
    except ServiceNotFound as err:
        raise click.ClickException(str(err)) from None
    except ApiError as err:
        raise click.ClickException(f"the API refused a read: {err}") from None
    except (ConnectionFailed, OSError) as err:
        raise click.ClickException(f"cannot reach the API: {err}") from None
    findings = explain(snapshot)
    if output == "json":
        click.echo(json.dumps({"service": f"{namespace}/{name}", "node": snapshot.node, "findings": as_json(findings)}, indent=2))
        return
    click.echo(f"svc/{name} in namespace {namespace}" + (f", asked from node {snapshot.node}" if snapshot.node else "") + ":")
    for finding in findings:
        click.echo("  " + finding.line())
