"""``kubesvc up`` and ``kubesvc down``: the whole system on this machine, in one process.

``up`` starts, in order: the apiserver (SQLite under ``--data-dir``), the controller-manager,
the agent (this machine is the node: a Pod bridge, Pods in namespaces) and the proxy
(nftables where ``nft`` works, else iptables), each talking to the apiserver over its API as
they would across machines, each with its own client certificate and kubeconfig under
``<data-dir>/cred`` (``system:kube-controller-manager`` for its informers,
``system:kube-scheduler`` for the pod-scheduler, ``system:node:<name>`` for the agent,
``system:kube-proxy``); each controller is its kube-system ServiceAccount with TokenRequest
tokens, as upstream's ``--use-service-account-credentials``; none uses the admin's. The agent
serves logs over HTTPS with a serving certificate from the cluster CA. The machine is
programmed as a node, so ClusterIPs answer from the host itself. When the host has no route
that covers the Service range (a namespace with no uplink, as the tests use), the range is
routed onto the Pod bridge so that a connection to a ClusterIP gets past routing to the
proxy's DNAT; with a default route nothing is added.

What ``up`` makes outside the data directory (namespaces, links, kernel rules, that route) is
recorded in ``<data-dir>/up.json`` (mode 0600), with the network namespace ``up`` runs in (the
device and inode of its nsfs file, ``kernel.netns.identify``, and its name under /run/netns if
it has one).
Ctrl-C stops the components and removes all of it; ``kubesvc down --data-dir`` removes it after
a crash (stopping a ``up`` still running first). Links, routes and kernel rules belong to a
network namespace, so ``down`` run in another one would find none of them and could delete
what is not ours there (a bridge, a route, the host's kube-proxy tables): it refuses, with one
line naming both namespaces, and cleans nothing. The API objects stay in the store: the next
``up`` runs the same Pods again.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from kubesvc.kernel import host, links
from kubesvc.kernel import netns as knetns
from kubesvc.kernel import process as kprocess
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.links import DelRoute, Route
from kubesvc.kernel.netlink import NetlinkFailed

log = logging.getLogger("kubesvc.up")

STATE_FILE = "up.json"
AGENT_DIR = "agent"


@dataclass
class UpOptions:
    node_name: str
    pod_cidrs: list[str]
    service_cidrs: list[str]
    node_ips: list[str] | None = None
    proxy_mode: str = ""
    kubelet_port: int = 10250

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


class System:
    """The controller-manager, agent and proxy of ``kubesvc up``, around a running apiserver."""

    def __init__(self, server, options: UpOptions):
        self.server = server
        self.options = options
        self.data_dir: Path = server.config.data_dir
        self.clients: list = []
        self.agent = None
        self.proxy = None
        self.controller_manager: asyncio.Task | None = None
        self.client_builder = None  # the controllers' clients (ServiceAccount tokens)
        self.state: dict = {"pid": os.getpid(), "pid_started": host.process_identity(os.getpid()), "netns": netns_record(),
                            "agent_state_dir": str(self.data_dir / AGENT_DIR / "network"), "service_routes": []}

    async def _client(self, client_config, field_manager: str, user_agent: str, rate_limiter=None):
        from kubesvc.client.rest import RestClient

        client = RestClient(client_config, field_manager=field_manager, user_agent=user_agent, rate_limiter=rate_limiter)
        self.clients.append(client)
        return client

    async def start(self) -> None:
        from kubesvc.agent.agent import Agent, AgentConfig
        from kubesvc.serving import pki
        from kubesvc.client.flowcontrol import rate_limiter
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.controllers.clientbuilder import ServiceAccountClientBuilder
        from kubesvc.controllers.manager import SCHEDULER, ControllerManager, ManagerConfig
        from kubesvc.proxy.config import ProxyFlags, complete, resolve
        from kubesvc.proxy.server import ProxyServer

        options = self.options
        kubeconfigs = self.server.component_kubeconfigs  # each component its own identity; none is the admin
        _write_state(self.data_dir, self.state)  # before anything is made: down must find it after a crash
        cm_client = await self._client(load_kubeconfig(kubeconfigs["controller-manager"]), "kube-controller-manager", "kubesvc-controller-manager")
        scheduler_client = await self._client(load_kubeconfig(kubeconfigs["scheduler"]), "default-scheduler", "kubesvc-scheduler")
        self.client_builder = ServiceAccountClientBuilder(cm_client)  # upstream's --use-service-account-credentials
        self.controller_manager = asyncio.create_task(
            ControllerManager(cm_client, ManagerConfig(leader_elect=False, secure_port=0), client_builder=self.client_builder,
                              controller_clients={SCHEDULER: scheduler_client}).run())

        agent_config = AgentConfig(node_name=options.node_name, pod_cidrs=options.pod_cidrs, node_ips=options.addresses(),
                                   data_dir=self.data_dir / AGENT_DIR, kubelet_port=options.kubelet_port, shutdown_grace=2.0)
        ca = pki.cluster_ca(self.data_dir)
        serving = ca.node_serving(options.node_name, agent_config.node_ips)
        agent_config.tls_cert_file, agent_config.tls_private_key_file, agent_config.client_ca_file = serving.cert, serving.key, ca.cert_path
        node_kubeconfig = pki.write_node_kubeconfig(self.data_dir, self.server.url, options.node_name)
        self.agent = Agent(await self._client(load_kubeconfig(node_kubeconfig), "kubelet", "kubesvc-agent"), agent_config)
        await self.agent.start()
        try:
            ensure_service_routes(options.service_cidrs, agent_config.bridge, self.state["service_routes"])
        finally:
            _write_state(self.data_dir, self.state)

        flags = ProxyFlags(kubeconfig=str(kubeconfigs["proxy"]), hostname_override=options.node_name,
                           proxy_mode=options.proxy_mode or None, cluster_cidr=",".join(options.pod_cidrs),
                           bind_address=agent_config.node_ips[0])
        settings = resolve(complete(flags))
        self.state["proxy_mode"] = settings.mode
        _write_state(self.data_dir, self.state)
        proxy_client = await self._client(load_kubeconfig(kubeconfigs["proxy"]), "kube-proxy", "kubesvc-proxy",
                                          rate_limiter(settings.client_qps, settings.client_burst))  # clientConnection qps/burst
        self.proxy = ProxyServer(proxy_client, settings)
        await self.proxy.start()

    async def stop(self) -> list[str]:
        """Stop everything and remove what ``up`` made; returns what could not be removed. Each
        step runs even if an earlier one failed."""
        from kubesvc.proxy.server import cleanup_leftovers

        errors: list[str] = []

        async def step(name: str, coro) -> None:
            try:
                errors.extend(await coro or [])
            except Exception as err:  # noqa: BLE001 - keep cleaning; report at the end
                errors.append(f"{name}: {err}")

        if self.proxy is not None:
            await step("proxy", self.proxy.stop())
        await step("proxy rules", asyncio.to_thread(cleanup_leftovers))
        if self.agent is not None:
            await step("agent", self.agent.stop())
        if self.controller_manager is not None:
            self.controller_manager.cancel()
            await asyncio.gather(self.controller_manager, return_exceptions=True)
        await step("routes", asyncio.to_thread(remove_service_routes, self.state.get("service_routes") or []))
        if self.client_builder is not None:
            await step("controller clients", self.client_builder.close())
        for client in self.clients:
            await step("client", client.close())
        if not errors:
            _state_path(self.data_dir).unlink(missing_ok=True)
        return errors


async def run_up(server, options: UpOptions, announce, stop: asyncio.Event) -> list[str]:
    """Serve until ``stop`` (or a component dies); returns cleanup errors."""
    await server.start()
    system = System(server, options)
    try:
        await system.start()
        announce(server, system)
        waiters = {asyncio.create_task(stop.wait())}
        if system.controller_manager is not None:
            waiters.add(system.controller_manager)
        done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            if task is not system.controller_manager:
                task.cancel()
        if system.controller_manager in done:
            system.controller_manager.result()  # a controller-manager that died takes the system down
    finally:
        errors = await system.stop()
        await server.stop()
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


def down(data_dir: Path, *, wait: float = 30.0) -> list[str]:
    """Undo a ``kubesvc up`` of ``data_dir``: stop it if it still runs, then remove every
    namespace, link, rule and route it recorded. Returns errors (empty: clean). Raises
    :class:`DownRefused`, touching nothing, when run in another network namespace than ``up``."""
    from kubesvc.agent import podnet
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
        try:
            errors += podnet.teardown_sync(Path(state_dir))
        except (CommandFailed, OSError) as err:
            errors.append(str(err))
    errors += remove_service_routes(state.get("service_routes") or [])
    if not errors:
        _state_path(data_dir).unlink(missing_ok=True)
    return errors
