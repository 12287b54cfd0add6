"""``kubesvc controller-manager``: kube-controller-manager's command line (upstream
``cmd/kube-controller-manager/app/options``), with the pod-scheduler's kubeconfig beside it.

Range checks keep kube-controller-manager's messages; bad leader-election timing is a usage
error; a lost leader Lease ends the process non-zero, as upstream's ``klog.Fatalf``.
"""

from __future__ import annotations

import asyncio
import gc
import sys

import click

from kubesvc.cmd import flags
from kubesvc.util.process import install_uvloop, setup_logging, stop_on_signals


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


# The feature gates the controllers read, with upstream 1.34's defaults.
CONTROLLER_MANAGER_FEATURE_GATES = {"PreferSameTrafficDistribution": True, "ServiceTrafficDistribution": True, "TopologyAwareHints": True,
                                    "JobManagedBy": True,
                                    "AllAlpha": False, "AllBeta": False}


@click.command("controller-manager")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), required=True, help="Path to a kubeconfig file for the API server.")
@click.option("--scheduler-kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="The pod-scheduler's own kubeconfig (kube-scheduler's --kubeconfig; default: --kubeconfig).")
@click.option("--controllers", default="*", show_default=True, callback=_controllers,
              help="Controllers to enable: '*' for all, 'foo' to enable, '-foo' to disable "
                   "(endpointslice-controller, endpointslice-mirroring-controller, endpoints-controller, garbage-collector-controller, "
                   "pod-scheduler, serviceaccount-controller, root-ca-certificate-publisher-controller, "
                   "certificatesigningrequest-{approving,signing,cleaner}-controller (csrapproving, csrsigning, csrcleaner), "
                   "node-ipam-controller (nodeipam), deployment-controller, daemonset-controller, job-controller, "
                   "ttl-after-finished-controller, pod-garbage-collector-controller (podgc)).")
@click.option("--concurrent-service-endpoint-syncs", type=int, default=5, show_default=True, callback=flags.bounded(1, 50),
              help="Services synced concurrently by the EndpointSlice controller.")
@click.option("--concurrent-endpoint-syncs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Services synced concurrently by the Endpoints controller.")
@click.option("--mirroring-concurrent-service-endpoint-syncs", type=int, default=5, show_default=True, callback=flags.bounded(1, 50))
@click.option("--concurrent-gc-syncs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--concurrent-deployment-syncs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Deployments synced concurrently.")
@click.option("--concurrent-daemonset-syncs", type=click.IntRange(min=1), default=2, show_default=True,
              help="DaemonSets synced concurrently.")
@click.option("--concurrent-job-syncs", type=click.IntRange(min=1), default=5, show_default=True, help="Jobs synced concurrently.")
@click.option("--concurrent-ttl-after-finished-syncs", type=click.IntRange(min=1), default=5, show_default=True,
              help="Finished Jobs checked for ttlSecondsAfterFinished concurrently.")
@click.option("--terminated-pod-gc-threshold", type=int, default=12500, show_default=True,
              help="Number of terminated pods that can exist before the terminated pod garbage collector starts deleting "
                   "terminated pods. If <= 0, the terminated pod garbage collector is disabled.")
@click.option("--max-endpoints-per-slice", type=int, default=100, show_default=True, callback=flags.bounded(1, 1000))
@click.option("--endpointslice-updates-batch-period", default="0s", show_default=True, callback=flags.duration,
              help="Batches Pod changes into one EndpointSlice sync per Service within this period.")
@click.option("--endpoint-updates-batch-period", default="0s", show_default=True, callback=flags.duration,
              help="Batches Pod changes into one Endpoints sync per Service within this period.")
@click.option("--mirroring-max-endpoints-per-subset", type=int, default=1000, show_default=True, callback=flags.bounded(1, 1000))
@click.option("--mirroring-endpointslice-updates-batch-period", default="0s", show_default=True, callback=flags.duration)
@click.option("--enable-garbage-collector", type=flags.GO_BOOL, is_flag=False, flag_value=True, default=True, show_default=True)
@click.option("--leader-elect", type=flags.GO_BOOL, is_flag=False, flag_value=True, default=True, show_default=True,
              help="Run controllers only while holding the leader Lease.")
@click.option("--leader-elect-lease-duration", default="15s", show_default=True, callback=flags.duration)
@click.option("--leader-elect-renew-deadline", default="10s", show_default=True, callback=flags.duration)
@click.option("--leader-elect-retry-period", default="2s", show_default=True, callback=flags.duration)
@click.option("--leader-elect-resource-name", default="kube-controller-manager", show_default=True)
@click.option("--leader-elect-resource-namespace", default="kube-system", show_default=True)
@click.option("--bind-address", default="0.0.0.0", show_default=True)
@click.option("--secure-port", type=click.IntRange(0, 65535), default=10257, show_default=True, help="HTTPS port for /healthz and /metrics; 0 disables.")
@click.option("--root-ca-file", default=None, callback=lambda ctx, param, value: _root_ca_file(value),
              help="CA bundle published as kube-root-ca.crt in every namespace (default: the CA of --kubeconfig).")
@click.option("--use-service-account-credentials", type=flags.GO_BOOL, is_flag=False, flag_value=True, default=False, show_default=True,
              help="Run each controller as its own kube-system ServiceAccount (TokenRequest tokens, renewed), "
                   "not with the credentials of --kubeconfig.")
@click.option("--cluster-signing-cert-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM CA certificate the csrsigning controller issues Kubernetes-signer certificates with.")
@click.option("--cluster-signing-key-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM private key of --cluster-signing-cert-file.")
@click.option("--cluster-signing-duration", default="8760h0m0s", show_default=True, callback=flags.duration,
              help="The longest lifetime of a signed certificate (a CSR's spec.expirationSeconds may ask for less).")
@click.option("--allocate-node-cidrs", type=flags.GO_BOOL, is_flag=False, flag_value=True, default=False, show_default=True,
              help="Allocate every Node's spec.podCIDRs from --cluster-cidr (node-ipam-controller, range allocator).")
@click.option("--cluster-cidr", default="", help="CIDR range of Pods in the cluster; IPv4 and IPv6 comma-separated for dual-stack.")
@click.option("--node-cidr-mask-size", type=click.IntRange(0, 128), default=0, help="Mask size of a node's range (single-stack).")
@click.option("--node-cidr-mask-size-ipv4", type=click.IntRange(0, 32), default=0, help="Mask size of a node's IPv4 range (default 24).")
@click.option("--node-cidr-mask-size-ipv6", type=click.IntRange(0, 128), default=0, help="Mask size of a node's IPv6 range (default 64).")
@click.option("--feature-gates", default="", callback=flags.feature_gates(CONTROLLER_MANAGER_FEATURE_GATES),
              help="Comma-separated Name=true|false pairs (PreferSameTrafficDistribution: the EndpointSlice controller's "
                   "PreferSameZone/PreferSameNode hints; on by default, 1.34. JobManagedBy: the Job controller leaves Jobs whose "
                   "spec.managedBy names another controller alone; beta, on by default, 1.32).")
@click.option("-v", "--v", "verbosity", type=int, default=0, help="Log verbosity.")
def controller_manager_command(kubeconfig: str, scheduler_kubeconfig: str | None, use_service_account_credentials: bool, verbosity: int,
                               **options) -> None:
    """Run the EndpointSlice, mirroring, Endpoints and garbage-collector controllers."""
    setup_logging(verbosity)
    from kubesvc.client.leaderelection import validate_timing
    from kubesvc.controllers.manager import ManagerConfig

    try:
        validate_timing(options["leader_elect_lease_duration"], options["leader_elect_renew_deadline"], options["leader_elect_retry_period"])
    except ValueError as exc:
        raise click.UsageError(f"invalid leader election flags: {exc}") from None
    if bool(options["cluster_signing_cert_file"]) != bool(options["cluster_signing_key_file"]):
        raise click.UsageError("--cluster-signing-cert-file and --cluster-signing-key-file must be given together")
    if options["allocate_node_cidrs"]:
        from kubesvc.controllers.nodeipam.cidrset import CIDRSet, node_mask_sizes, parse_cluster_cidrs

        try:
            cidrs = parse_cluster_cidrs(options["cluster_cidr"])
            masks = node_mask_sizes(cidrs, options["node_cidr_mask_size"], options["node_cidr_mask_size_ipv4"], options["node_cidr_mask_size_ipv6"])
            for cidr, mask in zip(cidrs, masks):
                CIDRSet(cidr, mask)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    client_config = flags.load_kubeconfig(kubeconfig)
    scheduler_config = flags.load_kubeconfig(scheduler_kubeconfig) if scheduler_kubeconfig else client_config
    config = ManagerConfig(**options)
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


async def _freeze_once_synced(manager) -> None:
    """What the process holds once its caches first synced (modules, controllers, the first
    listing) lives as long as it does: moved out of the cyclic collector's sight, as the
    apiserver does after its start, so a full collection walks only what came after. It came
    in the middle of a burst (a Deployment's Pods: their objects are what makes the heap grow by
    the quarter that triggers one) and held the event loop for 84-98 ms of CPU at 82-84k objects,
    52k of them from the start; frozen, 23-38 ms at 26-32k (bench/e2e.py --deployment 100): the
    scheduler's bindings, and every controller, waited that long."""
    await manager.caches_synced.wait()
    gc.freeze()


async def _run_until_stopped(manager) -> None:
    """Run the manager until SIGINT/SIGTERM; a lost lease ends it with an error."""
    from kubesvc.client.leaderelection import LeadershipLost
    from kubesvc.controllers.manager import ControllerClientFailed, LeaderElectionLost

    stop = stop_on_signals()
    running = asyncio.create_task(manager.run())
    freezing = asyncio.create_task(_freeze_once_synced(manager))
    click.echo("kubesvc controller-manager running")  # kubesvc up waits for this line
    sys.stdout.flush()
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    freezing.cancel()
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
