"""Fixtures for kernel tests: a real ``kubesvc apiserver`` and EndpointSlice controller on the
host's loopback, a cluster of network namespaces (tests/support/netns.py) whose nodes each run
``kubesvc proxy``, and per test an API namespace of its own with helpers that create Pods both
in the kernel (a namespace serving TCP/UDP) and in the API (bound, with an IP, Ready or not).

One environment per test module and proxy mode (``kernel_env``, parametrized over the
module's ``MODES``, default nftables and iptables): modules choose their proxy flags
(``PROXY_FLAGS``) and node count (``NODE_COUNT``). Everything a test makes is removed after it, pass or fail; everything the module
made, after the module. The control plane under them (``kernel_control_plane``: the apiserver
and the EndpointSlice controller, started the same way for every module) is one per test
process, started when the first module needs it: each module's namespaces, nodes, proxies, API
namespaces and objects are its own and go with it, so a module sees no other's, and the two
processes' start and stop are paid once instead of once per module and mode. Every module here is marked ``kernel``: missing prerequisites (root,
nft, iptables, ip) fail its tests (tests/conftest.py), kernel tests are never skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
from pathlib import Path

import pytest

from kubesvc.client.rest import ENDPOINTSLICES, NODES, PODS, SERVICES, ApiError, RestClient
from tests.support.apiserver import running_kernel_control_plane
from tests.support.cluster import api_client, create_pod, new_namespace, set_pod_status
from tests.kernel.helpers import register_node
from tests.support.netns import Cluster, Netns, Node, Pod, ProxyProcess
from tests.support.slowdown import scaled
from tests.support.up import Machine

# tests/kernel/vm/ needs a kernel with IPVS: scripts/vm-ipvs.sh boots one and sets this
# (tests/kernel/test_proxy_ipvs_vm.py); elsewhere those tests are not even collected.
collect_ignore = [] if os.environ.get("KUBESVC_IPVS_TESTS") == "1" else ["vm"]

MODES = ["nftables", "iptables"]
DEFAULT_PROXY_FLAGS = ("--iptables-min-sync-period=1s", "--iptables-sync-period=10s", "--v=2")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"


def api_port(server) -> int:
    return int(re.search(r":(\d+)/?$", server.url).group(1))


class KernelEnv:
    """One module's world for one proxy mode: apiserver, controller-manager, namespaces, proxies."""

    def __init__(self, mode: str, server, cluster: Cluster, log_dir: Path, flags: tuple[str, ...]):
        self.mode = mode
        self.server = server
        self.cluster = cluster
        self.log_dir = log_dir
        self.flags = tuple(flags)
        self.proxies: dict[str, ProxyProcess] = {}

    @property
    def nodes(self) -> list[Node]:
        return self.cluster.nodes

    def proxy(self, node: Node) -> ProxyProcess:
        if node.name not in self.proxies:
            self.proxies[node.name] = ProxyProcess(node, self.server.kubeconfig, self.mode, self.log_dir / f"proxy-{node.name}.log", *self.flags)
        return self.proxies[node.name]

    def ensure_proxies(self, nodes: list[Node] | None = None) -> None:
        """Every node's proxy running and synced (started the first time, restarted if a test
        left it dead)."""
        starting = [proxy for proxy in map(self.proxy, nodes or self.nodes) if not proxy.alive]
        for proxy in starting:  # all start at once; their first syncs overlap
            proxy.start(wait=False)
        for proxy in starting:
            proxy.wait_ready()

    def diagnostics(self, rules: bool = True) -> str:
        parts = []
        for name, proxy in self.proxies.items():
            parts.append(f"--- proxy {name} ({'running' if proxy.alive else 'not running'}) log tail ---\n{proxy.log(3000)}")
        if rules:
            for node in self.nodes:
                dump = node.ns.run("nft", "list", "ruleset", check=False).stdout if self.mode == "nftables" else node.ns.run(
                    "iptables-save", check=False).stdout
                parts.append(f"--- {self.mode} rules in {node.name} (head) ---\n{dump[:4000]}")
        return "\n".join(parts)


async def _register_nodes(server, nodes: list[Node]) -> None:
    async with api_client(server) as client:
        for node in nodes:
            await register_node(client, node)


async def _delete_nodes(server, names: list[str]) -> None:
    async with api_client(server) as client:
        for name in names:
            with contextlib.suppress(ApiError):
                await client.resource(NODES).delete(name)


def pytest_generate_tests(metafunc):
    """Every test using ``kernel_env`` runs once per mode in its module's ``MODES`` (default
    both), the environment built once per module and mode; ``@pytest.mark.modes(...)`` narrows
    one test to some of them (what the other modes' own modules already prove)."""
    if "kernel_env" in metafunc.fixturenames:
        modes = list(getattr(metafunc.module, "MODES", MODES))
        marker = metafunc.definition.get_closest_marker("modes")
        if marker is not None:
            modes = [mode for mode in modes if mode in marker.args]
        metafunc.parametrize("kernel_env", modes, indirect=True, scope="module")


@pytest.fixture(scope="session")
def kernel_control_plane(tmp_path_factory):
    """The apiserver and the EndpointSlice controller (processes on the host's loopback) every
    kernel module's ``kernel_env`` of this test process works against; stopped at the end."""
    with running_kernel_control_plane(tmp_path_factory.mktemp("kernel-control-plane")) as server:
        yield server


@pytest.fixture(scope="module")
def kernel_env(request, kernel_control_plane, tmp_path_factory):
    """The module's namespaces (nodes registered as Nodes of the shared control plane) and a
    proxy per node (started on first use by ``kt``), for one mode; the Nodes are deleted after."""
    mode = request.param
    module = request.module.__name__.rsplit(".", 1)[-1]
    log_dir = tmp_path_factory.mktemp(f"{module}-{mode}")
    nodes = getattr(request.module, "NODE_COUNT", 2)
    flags = getattr(request.module, "PROXY_FLAGS", DEFAULT_PROXY_FLAGS)
    server = kernel_control_plane
    cluster = Cluster(nodes=nodes, log_dir=log_dir)
    env = KernelEnv(mode, server, cluster, log_dir, flags)
    try:
        cluster.build()
        cluster.start_relays(api_port(server))
        asyncio.run(_register_nodes(server, cluster.nodes))
        yield env
    finally:
        for proxy in env.proxies.values():
            proxy.kill()
        node_names = [n.name for n in cluster.nodes]
        cluster.close()
        with contextlib.suppress(Exception):
            asyncio.run(_delete_nodes(server, node_names))


class KernelTest:
    """A test's handle on the cluster: kernel Pods that are also API Pods, Services, slices,
    probes, and waiting for the data plane to show something."""

    def __init__(self, env: KernelEnv, client: RestClient, namespace: str):
        self.env = env
        self.client = client
        self.namespace = namespace
        self.pods: list[Pod] = []
        self.client_pods: list[Pod] = []

    # -- topology

    @property
    def mode(self) -> str:
        return self.env.mode

    @property
    def cluster(self) -> Cluster:
        return self.env.cluster

    @property
    def nodes(self) -> list[Node]:
        return self.env.nodes

    @property
    def external(self):
        """The external client namespace (routes service/LB/external IPs via node 1)."""
        return self.env.cluster.client

    def proxy(self, node: Node) -> ProxyProcess:
        return self.env.proxy(node)

    # -- Pods

    async def pod(self, node: Node, name: str, labels: dict | None = None, *, ready: bool = True, tcp=(8080,), udp=(8080,), echo=(),
                  register: bool = True, container_ports: list[dict] | None = None) -> Pod:
        """A serving Pod namespace on ``node`` and (``register``) its API Pod: bound to the
        node, Running with the namespace's IP, Ready or not."""
        pod = await asyncio.to_thread(self.cluster.add_pod, node, name, tcp=tcp, udp=udp, echo=echo)
        self.pods.append(pod)
        if register:
            pod.api = await create_pod(self.client, self.namespace, name, labels or {}, pod.ip, node=node.name, ready=ready,
                                       container_ports=container_ports)
        return pod

    async def client_pod(self, node: Node, name: str, *, serve: bool = True) -> Pod:
        """A Pod namespace to send from (serves too unless not ``serve``, but is in no Service)."""
        pod = await asyncio.to_thread(self.cluster.add_pod, node, name, serve=serve)
        self.client_pods.append(pod)
        return pod

    async def set_ready(self, pod: Pod, ready: bool) -> None:
        current = await self.client.resource(PODS).get(pod.name, self.namespace)
        pod.api = await set_pod_status(self.client, current, ready=ready)

    async def delete_pod(self, pod: Pod, *, keep_running: bool = False) -> None:
        """The API Pod deleted at once (grace 0); its namespace removed unless ``keep_running``
        (a process the API no longer knows about, still answering)."""
        with contextlib.suppress(ApiError):
            await self.client.resource(PODS).delete(pod.name, self.namespace, grace_period_seconds=0)
        if not keep_running:
            await asyncio.to_thread(self.cluster.remove_pod, pod)
            if pod in self.pods:
                self.pods.remove(pod)

    # -- Services and slices

    async def service(self, name: str, selector: dict | None, *, ports: list[dict] | None = None, **spec) -> dict:
        body = {"metadata": {"name": name, "namespace": self.namespace},
                "spec": {"ports": ports or [{"name": "tcp", "port": 80, "targetPort": 8080, "protocol": "TCP"}], **spec}}
        if selector is not None:
            body["spec"]["selector"] = selector
        return await self.client.resource(SERVICES).create(body)

    async def set_load_balancer_ip(self, service: dict, *ips: str) -> dict:
        """status.loadBalancer.ingress through the status subresource, as a cloud controller does."""
        current = await self.client.resource(SERVICES).get(service["metadata"]["name"], self.namespace)
        current = copy.deepcopy(current)
        current.setdefault("status", {})["loadBalancer"] = {"ingress": [{"ip": ip} for ip in ips]}
        return await self.client.resource(SERVICES).update_status(current)

    async def delete_service(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            await self.client.resource(SERVICES).delete(name, self.namespace)

    @staticmethod
    def endpoint(pod: Pod, *, ready: bool = True, serving: bool | None = None, terminating: bool = False) -> dict:
        return {"addresses": [pod.ip], "nodeName": pod.node.name,
                "conditions": {"ready": ready, "serving": ready if serving is None else serving, "terminating": terminating},
                "targetRef": {"kind": "Pod", "namespace": "", "name": pod.name}}

    async def endpoint_slice(self, service: str, name: str, endpoints: list[dict], ports: list[dict] | None = None) -> dict:
        """An EndpointSlice of our own (for a selectorless Service), as a custom controller writes."""
        body = {"metadata": {"name": name, "namespace": self.namespace,
                             "labels": {SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: "kernel-test"}},
                "addressType": "IPv4", "endpoints": endpoints,
                "ports": ports if ports is not None else [{"name": "tcp", "port": 8080, "protocol": "TCP"}]}
        for ep in endpoints:
            ep.get("targetRef", {})["namespace"] = self.namespace
        return await self.client.resource(ENDPOINTSLICES).create(body)

    async def delete_slice(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            await self.client.resource(ENDPOINTSLICES).delete(name, self.namespace)

    # -- traffic

    async def probe(self, where, proto: str, host: str, port: int, count: int = 1, **options) -> dict:
        """tests.support.probe inside ``where`` (a Node, Pod, client or Netns)."""
        return await asyncio.to_thread(self.cluster.probe, where, proto, host, port, count, **options)

    async def until(self, where, proto: str, host: str, port: int, count: int, check, *, what: str, wait: float = 25,
                    **options) -> dict:
        """Probe again and again (``options`` go to the probe: ``timeout`` per attempt, ``bind``...)
        until ``check(result)`` holds, for at most ``wait`` seconds; the last result. On timeout
        an AssertionError with that result, the proxies' logs and rules."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + scaled(wait)
        while True:
            result = await self.probe(where, proto, host, port, count, **options)
            if check(result):
                return result
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {wait}s waiting for {what} ({proto} {host}:{port} from "
                                     f"{getattr(where, 'name', where)}); last probe: {result}\n{self.env.diagnostics()}")
            await asyncio.sleep(0.2)

    # -- teardown

    async def cleanup(self) -> None:
        for resource in (SERVICES, ENDPOINTSLICES, PODS):
            with contextlib.suppress(ApiError):
                items = (await self.client.resource(resource).list(self.namespace))["items"]
                semaphore = asyncio.Semaphore(32)

                async def delete(name: str) -> None:
                    async with semaphore:
                        await self._delete(resource, name)

                await asyncio.gather(*(delete(item["metadata"]["name"]) for item in items))
        for pod in self.pods + self.client_pods:
            await asyncio.to_thread(self.cluster.remove_pod, pod)
        self.pods.clear()
        self.client_pods.clear()

    async def _delete(self, resource, name: str) -> None:
        with contextlib.suppress(ApiError):
            if resource is PODS:
                await self.client.resource(resource).delete(name, self.namespace, grace_period_seconds=0)
            else:
                await self.client.resource(resource).delete(name, self.namespace)


@pytest.fixture
async def kt(kernel_env):
    """This test's KernelTest: the module's cluster with running proxies and an API namespace
    of the test's own; what the test made is deleted after it."""
    await asyncio.to_thread(kernel_env.ensure_proxies)
    async with api_client(kernel_env.server) as client:
        namespace = await new_namespace(client, "k")
        test = KernelTest(kernel_env, client, namespace)
        try:
            yield test
        finally:
            await test.cleanup()


# ---- one ``kubesvc up`` for SHARED_UP_MODULES (tests/support/up.py) ------------------------------

_shared_machine: Machine | None = None


@pytest.fixture(scope="module")
def shared_up(tmp_path_factory):
    """The ``kubesvc up`` machine the modules of SHARED_UP_MODULES share (started by the first
    of them to run); each module's Pods are deleted after it. It is torn down after the last
    test that uses it (``pytest_runtest_teardown`` below): they run one after the other, on one
    worker (tests/conftest.py's scheduler)."""
    global _shared_machine
    if _shared_machine is None:
        machine = Machine(Netns.create("shared"), tmp_path_factory.mktemp("shared-up"))
        try:
            machine.up()
        except BaseException:
            machine.teardown()
            raise
        _shared_machine = machine
    machine = _shared_machine
    yield machine
    if machine.process is not None and machine.process.poll() is None:
        machine.delete_pods()


def _stop_shared_machine() -> None:
    global _shared_machine
    machine, _shared_machine = _shared_machine, None
    if machine is not None:
        machine.teardown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test using the shared machine (its module's fixtures already finalized):
    tear the machine down rather than leave it running through the rest of the session."""
    yield
    if _shared_machine is not None and "shared_up" in item.fixturenames and (nextitem is None or "shared_up" not in nextitem.fixturenames):
        _stop_shared_machine()


def pytest_sessionfinish(session, exitstatus):
    _stop_shared_machine()  # interrupted or failed runs leave nothing behind either
