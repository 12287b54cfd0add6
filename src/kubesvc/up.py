"""``kubesvc up`` and ``kubesvc down``: the whole system on this machine.

``up`` starts the apiserver (SQLite under ``--data-dir``), waits for its ``/readyz``, then
starts together the controller-manager (with the scheduler), the agent (this machine is the
node: a Pod bridge, Pods in namespaces) and the proxy (nftables where ``nft`` works, else
iptables). Each is a process of its own, the ``kubesvc <component>`` command with the flags
``up`` derives, supervised by ``up`` (``cmd/supervisor.py``: readiness, logs under
``<data-dir>/logs``, restart with back-off when one dies), so the system runs on every core as
upstream's separate binaries (or k3s's goroutines) do. Each talks to the apiserver over its
API as it would across machines, with its own client certificate and kubeconfig under
``<data-dir>/cred`` (``system:kube-controller-manager`` for its informers,
``system:kube-scheduler`` for the pod-scheduler, ``system:node:<name>`` for the agent,
``system:kube-proxy``); each controller is its kube-system ServiceAccount with TokenRequest
tokens, as upstream's ``--use-service-account-credentials``; none uses the admin's. The agent
serves logs over HTTPS with a serving certificate from the cluster CA. The machine is
programmed as a node, so ClusterIPs answer from the host itself. When the host has no route
that covers the Service range (a namespace with no uplink, as the tests use), the range is
routed onto the Pod bridge so that a connection to a ClusterIP gets past routing to the
proxy's DNAT; with a default route nothing is added.

**Several server machines** (k3s's embedded etcd): ``up --cluster-init`` first starts an etcd
member under ``<data-dir>/etcd`` (``cluster/``: peer and client TLS from an etcd CA under
``<data-dir>/pki/etcd``) and runs the apiserver on it (``--storage-backend etcd3`` against the
local member, bootstrap tokens on), then publishes what joining servers read
(``cluster/join.py``). ``up --server https://<first>:6443 --token <token>`` on another machine
fetches the cluster's certificate authorities with the token, joins etcd as a learner promoted
once in sync, and runs its own apiserver on its own member. In both the controller-manager is
leader-elected (one of them works at a time) and the member stops last. A machine whose
member has data restarts as it was, without the token.

What ``up`` makes outside the data directory (namespaces, links, kernel rules, that route) is
recorded in ``<data-dir>/up.json`` (mode 0600), with the network namespace ``up`` runs in (the
device and inode of its nsfs file, ``kernel.netns.identify``, and its name under /run/netns if
it has one).
Ctrl-C (SIGINT or SIGTERM to ``up``) stops the components (SIGTERM; the apiserver last) and
removes all of it, whatever a component left; ``kubesvc down --data-dir`` removes it after a
crash (stopping a ``up`` still running first). The components die with ``up`` (a ``kill -9``
of ``up`` leaves what one process would: the Pods' processes and the kernel state). Links, routes and kernel rules belong to a
network namespace, so ``down`` run in another one would find none of them and could delete
what is not ours there (a bridge, a route, the host's kube-proxy tables): it refuses, with one
line naming both namespaces, and cleans nothing. The API objects stay in the store: the next
``up`` runs the same Pods again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from kubesvc.cmd.supervisor import LOG_DIR, ComponentFailed, Supervisor, describe_exit
from kubesvc.kernel import host, links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel import process as kprocess
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.links import DelRoute, Route
from kubesvc.kernel.netlink import NetlinkFailed
from kubesvc.util.aio import cancel_and_wait

log = logging.getLogger("kubesvc.up")

STATE_FILE = "up.json"
AGENT_DIR = "agent"
BRIDGE = "cbr0"  # the agent's Pod bridge


@dataclass
class UpOptions:
    node_name: str
    pod_cidrs: list[str]
    service_cidrs: list[str]
    node_ips: list[str] | None = None
    proxy_mode: str = ""
    kubelet_port: int = 10250
    cluster_init: bool = False  # this machine starts an etcd cluster (k3s's --cluster-init)
    server: str | None = None  # or joins the one of this server machine (k3s's --server) ...
    token: str | None = None  # ... with this bootstrap token
    cluster_domain: str = "cluster.local"  # the cluster DNS add-on's zone and the Pods' search domains
    cluster_dns: str | None = None  # the DNS Service's IP (default: the 10th of the Service range, 10.96.0.10)
    resolv_conf: str = "/etc/resolv.conf"  # what Pods' resolv.conf (and the DNS add-on's upstreams) start from
    cluster_cidr: str = "10.244.0.0/16"  # clustered: the node-ipam-controller cuts every node's Pod range from it
    pod_network: str = "none"  # the agent's --pod-network (routes | vxlan: Pods reach other nodes' Pods; none: one machine)
    loadbalancer_pool: list[dict] | None = None  # --loadbalancer-pool: the blocks of the "default" LoadBalancerIPPool

    @property
    def clustered(self) -> bool:
        """On etcd, with an etcd member of its own (else: SQLite)."""
        return self.cluster_init or bool(self.server)

    def dns_ip(self) -> str:
        from kubesvc.dns.addon import cluster_dns_ip

        return self.cluster_dns or cluster_dns_ip(self.service_cidrs[0])

    def addresses(self) -> list[str]:
        """The node's addresses: the given or detected ones, else (no uplink) its Pod gateway."""
        return list(self.node_ips or []) or [str(ipaddress.ip_network(self.pod_cidrs[0]).network_address + 1)]


def serve_pods(config, options: UpOptions, *, bind_address_given: bool) -> None:
    """The apiserver as Pods need it under ``up``: advertised at the node's first address (the
    ``kubernetes`` Service's endpoint, 10.96.0.1:443 DNATs there) and, unless ``--bind-address``
    says otherwise, listening on every address as k3s's server does."""
    if config.advertise_address is None:
        config.advertise_address = options.addresses()[0]
    if not bind_address_given:
        config.bind_address = "::" if ":" in config.advertise_address else "0.0.0.0"


def _state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def _write_state(data_dir: Path, state: dict) -> None:
    path = _state_path(data_dir)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)  # a tmp file left by an older version keeps its mode otherwise
        out.write(json.dumps(state, indent=2))
    os.replace(tmp, path)


def read_state(data_dir: Path) -> dict | None:
    try:
        return json.loads(_state_path(data_dir).read_text())
    except (OSError, ValueError):
        return None


# -- the Service range route -------------------------------------------------------------------


def ensure_service_routes(service_cidrs: list[str], bridge: str, added: list[str]) -> None:
    """Route each Service range that nothing routes yet onto ``bridge``, appending each to
    ``added`` as soon as it exists (so a failure half-way still records the first)."""
    for cidr in service_cidrs:
        first = str(ipaddress.ip_network(cidr).network_address + 1)
        if not links.routable(first):
            links.apply([Route(cidr, bridge, replace=False)])
            added.append(cidr)


def remove_service_routes(cidrs: list[str]) -> list[str]:
    """Delete each route; one already gone (ESRCH) is no error."""
    errors = []
    for cidr in cidrs:
        try:
            links.apply([DelRoute(cidr)])
        except NetlinkFailed as err:
            if err.returncode != errno.ESRCH:
                errors.append(str(err))
    return errors


# -- up ------------------------------------------------------------------------------------------

APISERVER_LINE = re.compile(r"listening on (https://\S+); kubeconfig: (.+)$")  # the path may hold spaces
PROXY_LINE = re.compile(r"running in (\S+) mode")
READY_TIMEOUT = 120.0  # seconds a component has to announce itself (Python start-up on a loaded machine)
APISERVER_READY_TIMEOUT = 60.0  # then /readyz
STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL (the agent: its Pods' grace, then its own cleanup)
AGENT_SHUTDOWN_GRACE = "2s"  # each Pod's containers, between SIGTERM and SIGKILL, when up stops
NODE_FLAGS = ("--node-name", "--pod-cidr", "--node-ip", "--proxy-mode", "--kubelet-port",  # up's own; not the apiserver's
              "--cluster-domain", "--cluster-dns", "--resolv-conf", "--cluster-cidr", "--pod-network", "--loadbalancer-pool")
CLUSTER_FLAGS = ("--server", "--token")  # up's own too, with --cluster-init (no value)


def kubesvc_argv(command: str, *args) -> list[str]:
    """``python -m kubesvc COMMAND ARGS``, with this interpreter."""
    return [sys.executable, "-m", "kubesvc", command, *map(str, args)]


def without_flags(args: list[str], names: tuple[str, ...]) -> list[str]:
    """``args`` without the options ``names`` (each takes a value, as ``--x v`` or ``--x=v``)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in names)):
            kept.append(arg)
    return kept


def apiserver_args(up_args: list[str], config) -> list[str]:
    """``kubesvc apiserver``'s arguments: the apiserver flags ``up`` was given, as given, then
    what ``up`` derived (the absolute data directory, the bind and advertise addresses for
    Pods; the last of a repeated flag wins)."""
    kept = [arg for arg in without_flags(up_args, (*NODE_FLAGS, *CLUSTER_FLAGS, "--data-dir")) if arg != "--cluster-init"]
    return [*kept, "--data-dir", str(config.data_dir), "--bind-address", config.bind_address, "--advertise-address", config.advertise_address]


class System:
    """The processes of ``kubesvc up``: the apiserver, then the controller-manager (with the
    scheduler), the agent and the proxy, each a ``kubesvc <component>`` child of ``up``'s
    supervisor with the kubeconfig of its own identity."""

    def __init__(self, config, options: UpOptions, up_args: list[str], verbosity: int = 0, supervisor: Supervisor | None = None):
        self.config = config
        self.options = options
        self.up_args = up_args
        self.verbosity = ["-v", str(verbosity)] if verbosity else []
        self.data_dir: Path = config.data_dir
        self.supervisor = supervisor or Supervisor(self.data_dir / LOG_DIR)
        self.url = ""
        self.kubeconfig: Path | None = None
        self.proxy_mode = ""
        self.state: dict = {"pid": os.getpid(), "pid_started": host.process_identity(os.getpid()), "netns": netns_record(),
                            "agent_state_dir": str(self.data_dir / AGENT_DIR / "network"), "service_routes": []}
        self.etcd_member = None  # cluster.etcd_process.RunningMember, on etcd
        self._join_material = None  # cluster.join's fetch for up --server: asked before anything is made
        self._made_data_dir = False
        self.storage_args: list[str] = []  # the apiserver's --storage-backend etcd3 and --etcd-* flags, on etcd

    async def start(self) -> None:
        from kubesvc.serving import pki

        options, data_dir = self.options, self.data_dir
        if options.server:
            await self._fetch_join_material()  # a wrong token or server: one line, nothing made
        self._made_data_dir = not data_dir.exists()
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_state(data_dir, self.state)  # before anything is made: down must find it after a crash
        if options.clustered:
            await self.start_etcd()
        line = await self.supervisor.start("apiserver", kubesvc_argv("apiserver", *apiserver_args(self.up_args, self.config), *self.storage_args),
                                           ready_timeout=READY_TIMEOUT)
        match = APISERVER_LINE.search(line)
        if not match:
            raise ComponentFailed(f"apiserver: unexpected first line {line!r}")
        self.url, self.kubeconfig = match.group(1), Path(match.group(2))
        # a restarted apiserver keeps the address every kubeconfig names (--secure-port 0 picked it)
        self.supervisor.components["apiserver"].argv += ["--secure-port", self.url.rsplit(":", 1)[1]]
        await wait_until_ready(self.kubeconfig, APISERVER_READY_TIMEOUT)
        if options.cluster_init:
            await publish_join_material(self.kubeconfig, data_dir, f"https://{host_port(self.config.advertise_address)}:{self.url.rsplit(':', 1)[1]}")
            await publish_node_bootstrap(self.kubeconfig)  # what nodes joining with kubesvc join need (nodejoin/serverside.py)

        ca = pki.cluster_ca(data_dir)
        node_ips = options.addresses()
        serving = ca.node_serving(options.node_name, node_ips)
        controller_manager = kubesvc_argv(
            "controller-manager", "--kubeconfig", pki.kubeconfig_path(data_dir, "controller-manager"),
            "--scheduler-kubeconfig", pki.kubeconfig_path(data_dir, "scheduler"),
            f"--leader-elect={str(options.clustered).lower()}", "--secure-port=0",  # several servers: one leader
            "--use-service-account-credentials=true",  # each controller its kube-system ServiceAccount
            "--cluster-signing-cert-file", ca.cert_path, "--cluster-signing-key-file", ca.key_path,  # csrsigning: nodes' certificates
            # with machines joining as nodes (kubesvc join), each gets its Pod range from the cluster's
            *(["--allocate-node-cidrs=true", "--cluster-cidr", options.cluster_cidr] if options.clustered else []), *self.verbosity)
        agent = kubesvc_argv(
            "agent", "--kubeconfig", pki.write_node_kubeconfig(data_dir, self.url, options.node_name), "--node-name", options.node_name,
            "--pod-cidr", ",".join(options.pod_cidrs), "--node-ip", ",".join(node_ips), "--data-dir", data_dir / AGENT_DIR, "--bridge", BRIDGE,
            "--port", options.kubelet_port, "--tls-cert-file", serving.cert, "--tls-private-key-file", serving.key,
            "--client-ca-file", ca.cert_path, "--shutdown-grace-period", AGENT_SHUTDOWN_GRACE,
            "--cluster-dns", options.dns_ip(), "--cluster-domain", options.cluster_domain, "--resolv-conf", options.resolv_conf, *self.verbosity,
            # across nodes: the agent follows every Node as kube-proxy's identity may (a node's own reads only its Node)
            *(["--pod-network", options.pod_network, "--cluster-cidr", options.cluster_cidr,
               "--pod-network-kubeconfig", pki.kubeconfig_path(data_dir, "proxy")] if options.pod_network != "none" else []))
        proxy = kubesvc_argv(
            "proxy", "--kubeconfig", pki.kubeconfig_path(data_dir, "proxy"), "--hostname-override", options.node_name,
            "--cluster-cidr", options.cluster_cidr if options.pod_network != "none" else ",".join(options.pod_cidrs), "--bind-address", node_ips[0],
            *(["--proxy-mode", options.proxy_mode] if options.proxy_mode else []), *self.verbosity)

        async def agent_then_routes() -> None:
            await self.supervisor.start("agent", agent, ready_timeout=READY_TIMEOUT)
            try:
                ensure_service_routes(options.service_cidrs, BRIDGE, self.state["service_routes"])
            finally:
                _write_state(data_dir, self.state)

        async def the_proxy() -> None:
            line = await self.supervisor.start("proxy", proxy, ready_timeout=READY_TIMEOUT)
            self.proxy_mode = match.group(1) if (match := PROXY_LINE.search(line)) else ""
            self.state["proxy_mode"] = self.proxy_mode
            _write_state(data_dir, self.state)

        await all_or_none([self.supervisor.start("controller-manager", controller_manager, ready_timeout=READY_TIMEOUT),
                           agent_then_routes(), the_proxy()])
        await self.install_dns()
        if self.options.loadbalancer_pool:
            await self.install_loadbalancer_pool()
            # this node's ARP answers for the pool's addresses, as kube-proxy's identity: its Leases
            # live in kubesvc-lb, the one namespace it may write them in (announceraccess.py)
            await self.supervisor.start("lb-announcer", kubesvc_argv(
                "lb-announcer", "--kubeconfig", pki.kubeconfig_path(data_dir, "proxy"), "--node-name", options.node_name,
                "--node-ip", node_ips[0], *self.verbosity), ready_timeout=READY_TIMEOUT)

    async def install_loadbalancer_pool(self) -> None:
        """``--loadbalancer-pool``: the ``default`` LoadBalancerIPPool (controllers/loadbalancer/defaultpool.py)."""
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import ClientError, RestClient
        from kubesvc.controllers.loadbalancer import announceraccess
        from kubesvc.controllers.loadbalancer.defaultpool import ensure_default_pool

        try:
            async with RestClient(load_kubeconfig(self.kubeconfig), user_agent="kubesvc-up", field_manager="kubesvc") as client:
                await ensure_default_pool(client, self.options.loadbalancer_pool or [])
                await announceraccess.ensure(client)
        except ClientError as err:
            raise ComponentFailed(f"cannot create the default LoadBalancerIPPool: {err}") from None

    async def install_dns(self) -> None:
        """The cluster DNS add-on (``kubesvc.dns.addon``: kube-dns Service, coredns Deployment, its
        ServiceAccount and RBAC), as the admin; what exists is left as it is."""
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import ClientError, RestClient
        from kubesvc.dns import addon

        try:
            async with RestClient(load_kubeconfig(self.kubeconfig), user_agent="kubesvc-up", field_manager="kubesvc") as client:
                await addon.install(client, self.options.dns_ip(), self.options.cluster_domain, deployment=controllers_run_deployments())
        except ClientError as err:
            raise ComponentFailed(f"cannot install the cluster DNS add-on: {err}") from None

    async def start_etcd(self) -> None:
        """This machine's etcd member (``cluster.etcd_process``): a new cluster with
        ``--cluster-init``; with ``--server``, the certificate authorities fetched with the token
        (``cluster.join``), then a join. A member with data restarts as it was (no token
        needed). A failure is one line (ComponentFailed) and leaves none of the files it made."""
        from kubesvc.cluster import etcd_member, etcd_process
        from kubesvc.cluster import join as cluster_join

        options, data_dir = self.options, self.data_dir
        endpoints: list[str] = []
        made: list[Path] = []
        try:
            if self._join_material is not None:
                made = cluster_join.install(data_dir, self._join_material)
                endpoints = [cluster_join.etcd_endpoint(options.server)]
            self.etcd_member = await etcd_process.start_member(self.supervisor, data_dir, self.config.advertise_address, join=endpoints)
        except (cluster_join.JoinFailed, etcd_process.EtcdFailed) as err:
            for path in made:
                path.unlink(missing_ok=True)
            raise ComponentFailed(str(err)) from None
        ca, cert, key = etcd_member.client_tls(data_dir)
        self.storage_args = ["--storage-backend", "etcd3", "--etcd-servers", self.etcd_member.spec.local_client_url,
                             "--etcd-cafile", str(ca), "--etcd-certfile", str(cert), "--etcd-keyfile", str(key),
                             "--enable-bootstrap-token-auth=true"]  # joining servers (and nodes) present bootstrap tokens

    async def _fetch_join_material(self) -> None:
        """With ``--server`` and no etcd data yet: the cluster's certificate authorities, fetched
        with the token (``cluster.join``), before ``up`` makes anything on this machine."""
        from kubesvc.cluster import etcd_member
        from kubesvc.cluster import join as cluster_join

        if etcd_member.has_wal(self.data_dir):
            return  # a member with data restarts as it was: no token needed
        try:
            self._join_material = await cluster_join.fetch(self.options.server, self.options.token or "")
        except cluster_join.JoinFailed as err:
            raise ComponentFailed(str(err)) from None

    async def stop(self) -> list[str]:
        """Stop every component (the apiserver last: the agent reports its Node not ready) and
        remove what ``up`` made, whatever a component left behind; returns what could not be
        removed. Each step runs even if an earlier one failed. When nothing was started (a
        refused token), nothing is said and nothing is left: not even the data directory."""
        from kubesvc.proxy.server import cleanup_leftovers

        if not self.supervisor.components:
            await self.supervisor.close()
            _state_path(self.data_dir).unlink(missing_ok=True)
            if self._made_data_dir:
                with contextlib.suppress(OSError):  # only if empty: what is in it is not ours to remove
                    self.data_dir.rmdir()
            return []
        errors: list[str] = []

        async def step(name: str, coro) -> None:
            try:
                errors.extend(await coro or [])
            except Exception as err:  # noqa: BLE001 - keep cleaning; report at the end
                errors.append(f"{name}: {err}")

        codes = await self.supervisor.stop(["lb-announcer", "proxy", "agent", "controller-manager"], STOP_GRACE)
        codes |= await self.supervisor.stop(["apiserver"], STOP_GRACE)
        codes |= await self.supervisor.stop(["etcd"], STOP_GRACE)
        await self.supervisor.close()
        for name, code in codes.items():
            if code and not (name == "etcd" and code == -signal.SIGTERM):  # etcd re-raises SIGTERM once it has shut down cleanly
                log.warning("%s exited with %s on stop (its log: %s)", name, describe_exit(code), self.data_dir / LOG_DIR / f"{name}.log")
        self.supervisor.say("removing proxy rules, the Pod network and Service routes")
        await step("proxy rules", asyncio.to_thread(cleanup_leftovers))
        await step("pod network", asyncio.to_thread(teardown_pod_network, Path(self.state["agent_state_dir"])))
        await step("routes", asyncio.to_thread(remove_service_routes, self.state.get("service_routes") or []))
        self.supervisor.say("stopped; nothing left" if not errors else f"stopped; {len(errors)} thing(s) left (kubesvc down retries)")
        if not errors:
            _state_path(self.data_dir).unlink(missing_ok=True)
        return errors


def teardown_pod_network(state_dir: Path) -> list[str]:
    """Remove what a stopped (or killed) agent left of the Pod network (nothing when it cleaned
    up after itself); the errors."""
    from kubesvc.agent import podnet
    from kubesvc.podnetwork.controller import leftovers_sync

    try:
        return podnet.teardown_sync(state_dir) + leftovers_sync()  # the bridge and Pods; routes, VXLAN device, masquerading
    except (CommandFailed, OSError) as err:
        return [str(err)]


async def all_or_none(coros) -> None:
    """Run ``coros`` together; the first to fail cancels the others and its error is raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    finally:
        await cancel_and_wait([t for t in tasks if not t.done()])


def controllers_run_deployments() -> bool:
    """Whether this controller-manager makes a Deployment's Pods (else the DNS add-on is a Pod)."""
    from kubesvc.controllers.manager import KNOWN_CONTROLLERS

    return {"deployment-controller", "replicaset-controller"} <= set(KNOWN_CONTROLLERS)


def host_port(address: str) -> str:
    return f"[{address}]" if ":" in address else address


async def publish_node_bootstrap(kubeconfig: Path) -> None:
    """The RBAC bindings that let a node token bootstrap a node (``nodejoin.serverside``), as the admin."""
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import ClientError, RestClient
    from kubesvc.nodejoin.serverside import publish_node_bootstrap as publish

    try:
        async with RestClient(load_kubeconfig(kubeconfig), user_agent="kubesvc-up", field_manager="kubesvc") as client:
            await publish(client)
    except ClientError as err:
        raise ComponentFailed(f"cannot publish the node bootstrap RBAC: {err}") from None


async def publish_join_material(kubeconfig: Path, data_dir: Path, server: str) -> None:
    """What servers joining this one read (``cluster.join.publish``), as the admin."""
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import ClientError, RestClient
    from kubesvc.cluster import join as cluster_join

    try:
        async with RestClient(load_kubeconfig(kubeconfig), user_agent="kubesvc-up", field_manager="kubesvc") as client:
            await cluster_join.publish(client, data_dir, server)
    except ClientError as err:
        raise ComponentFailed(f"cannot publish the join material for other servers: {err}") from None


async def wait_until_ready(kubeconfig: Path, timeout: float) -> None:
    """Until the apiserver answers ``/readyz`` with 200 (as the admin of ``kubeconfig``)."""
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import ClientError, RestClient

    deadline = asyncio.get_running_loop().time() + timeout
    async with RestClient(load_kubeconfig(kubeconfig), user_agent="kubesvc-up") as client:
        while True:
            try:
                await client.get("/readyz")
                return
            except ClientError as err:
                if "Network is unreachable" in str(err) and "127.0.0.1" in str(err):  # will not mend itself
                    raise ComponentFailed("cannot reach the apiserver at 127.0.0.1: the loopback interface is down in "
                                          "this network namespace (ip link set lo up)") from None
                if asyncio.get_running_loop().time() > deadline:
                    raise ComponentFailed(f"apiserver not ready within {timeout:g}s: {err}") from None
            await asyncio.sleep(0.1)


async def run_up(config, options: UpOptions, up_args: list[str], verbosity: int, announce, stop: asyncio.Event) -> list[str]:
    """Start every component, serve until ``stop``, stop and clean; returns cleanup errors. A
    start that fails (or a ``stop`` during it) still stops and cleans what was started."""
    system = System(config, options, up_args, verbosity)
    began = asyncio.get_running_loop().time()
    starting = asyncio.create_task(system.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            announce(system)
            system.supervisor.say(f"ready ({asyncio.get_running_loop().time() - began:.1f}s)")
            await stopping
    finally:
        await cancel_and_wait([starting, stopping])
        errors = await system.stop()
    return errors


# -- down ----------------------------------------------------------------------------------------


class DownRefused(Exception):
    """``kubesvc down`` in a network namespace other than the one ``kubesvc up`` ran in."""


def netns_record() -> dict:
    """What ``up`` records of the network namespace it runs in."""
    here = knetns.identify()
    return {"dev": here.dev, "ino": here.ino, "name": knetns.current_name()}


def netns_refusal(recorded: dict | None, here: knetns.NetnsId, data_dir: Path) -> str | None:
    """Why ``down`` must not clean from namespace ``here`` (None: it may). An up.json without a
    record (written before there was one) is trusted."""
    if not recorded or (recorded.get("dev"), recorded.get("ino")) == (here.dev, here.ino):
        return None
    name = recorded.get("name")
    there = f"net:[{recorded.get('ino')}]" + (f" (/run/netns/{name})" if name else "")
    hint = f"nsenter --net=/run/netns/{name} kubesvc down --data-dir {data_dir}" if name else "kubesvc down there"
    return (f"refusing to clean up: the kubesvc up of {data_dir} ran in network namespace {there}, this is net:[{here.ino}]; "
            f"run {hint}")


def down(data_dir: Path, *, wait: float = 45.0) -> list[str]:
    """Undo a ``kubesvc up`` of ``data_dir``: stop it if it still runs, then remove every
    namespace, link, rule and route it recorded. Returns errors (empty: clean). Raises
    :class:`DownRefused`, touching nothing, when run in another network namespace than ``up``."""
    from kubesvc.proxy.server import cleanup_leftovers

    state = read_state(data_dir)
    if state is None:
        return []
    refusal = netns_refusal(state.get("netns"), knetns.identify(), data_dir)
    if refusal:
        raise DownRefused(refusal)
    pid = int(state.get("pid") or 0)
    same_process = bool(state.get("pid_started")) and host.process_identity(pid) == state.get("pid_started")
    if pid and pid != os.getpid() and kprocess.alive(pid) and same_process:
        kprocess.terminate(pid, wait)
        state = read_state(data_dir)
        if state is None:
            return []  # it cleaned up after itself
    errors = list(cleanup_leftovers())
    state_dir = state.get("agent_state_dir")
    if state_dir:
        errors += teardown_pod_network(Path(state_dir))
    errors += remove_service_routes(state.get("service_routes") or [])
    if not errors:
        _state_path(data_dir).unlink(missing_ok=True)
    return errors
