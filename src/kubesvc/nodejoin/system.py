"""``kubesvc join``: this machine as a node of a cluster, and ``kubesvc leave``.

The join does what ``kubesvc up`` does for its own machine's node side, with credentials it
earns instead of a CA it holds (k3s's ``k3s agent --server --token``; kubeadm's ``join``):

1. discover and pin the cluster CA with the bootstrap token (``discovery.py``);
2. get ``system:node:<name>``'s client certificate through a CertificateSigningRequest
   (``tlsbootstrap.py``); a data dir that already holds a valid one skips 1-2, as a restarted
   kubelet does, so the token may expire after the first join; then, as the node,
   ``system:kube-proxy``'s client certificate (k3s's agents get ``client-kube-proxy.crt`` from
   the supervisor; here a CSR csrapproving approves for a node);
3. make sure the Node exists and wait for the Pod CIDR the cluster's node-ipam-controller
   assigns (``spec.podCIDRs``; ``--pod-cidr`` instead for a cluster that assigns none);
4. run ``kubesvc agent`` (the zone label, node IP, assigned Pod CIDR) with the node's
   kubeconfig, and ``kubesvc proxy`` and ``kubesvc lb-announcer`` (this node's ARP/NDP answers
   for LoadBalancer addresses, MetalLB's speaker) with kube-proxy's, as k3s runs its agents'
   kube-proxy and as ``up`` runs them (``cmd/supervisor.py``): the announcer's Leases live in
   ``kubesvc-lb``, which NodeRestriction refuses a node's own identity. Each certificate is
   renewed before it expires (client-go's certificate manager) and its files replaced; the
   components take the new one in place (``client/certrotation.py``, ``serving/dynamiccert.py``),
   as the kubelet and kube-proxy do: no restart, so the agent's Pods keep running.

What it makes outside its data dir is recorded in ``<data-dir>/up.json`` exactly as ``up``
records it, so stopping it (Ctrl-C) and ``kubesvc leave`` (which also stops a running join)
undo it with ``up``'s own cleanup: the agent stops the Pods (their endpoints drain: they go not
ready) and reports its Node NotReady, the proxy's rules and the Pod network are removed.
``leave`` then removes the credentials, logs and state under the data dir. The Node object stays
(NotReady) for an administrator's ``kubectl delete node``, as after ``kubeadm reset``: a node's
own credentials may not delete it. A join stopped after its Node was deleted (``kubectl delete
node``, then Ctrl-C) removes its credentials, logs and state too: the machine is no node any more.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kubesvc.cluster.join import JoinFailed
from kubesvc.cmd.supervisor import LOG_DIR, ComponentFailed, Supervisor
from kubesvc.nodejoin import discovery, tlsbootstrap
from kubesvc.up import (AGENT_DIR, BRIDGE, PROXY_LINE, READY_TIMEOUT, STOP_GRACE, AGENT_SHUTDOWN_GRACE, _state_path, _write_state,
                        all_or_none, ensure_service_routes, kubesvc_argv, netns_record, remove_service_routes, teardown_pod_network)
from kubesvc.util.aio import cancel_and_wait

CERTIFICATE_TIMEOUT = 120.0
POD_CIDR_TIMEOUT = 60.0
SERVING_APPROVAL_TIMEOUT = 24 * 3600.0  # csrcleaner deletes a request pending longer


@dataclass
class JoinOptions:
    server: str
    token: str
    data_dir: Path
    node_name: str
    node_ips: list[str]
    zone: str = ""
    pod_cidrs: list[str] = field(default_factory=list)  # empty: the cluster's
    service_cidrs: list[str] = field(default_factory=lambda: ["10.96.0.0/12"])
    proxy_mode: str = ""
    kubelet_port: int = 10250
    ca_cert_hashes: tuple[str, ...] = ()
    cluster_dns: str | None = None  # the DNS Service's IP (default: the 10th of the Service range, as up's)
    cluster_domain: str = "cluster.local"
    resolv_conf: str = "/etc/resolv.conf"
    agent_args: list[str] = field(default_factory=list)  # more agent flags (--pod-network ...), passed as given
    proxy_args: list[str] = field(default_factory=list)


class JoinSystem:
    def __init__(self, options: JoinOptions, verbosity: int = 0, supervisor: Supervisor | None = None):
        from kubesvc import up
        from kubesvc.kernel import host

        self.options = options
        self.data_dir = options.data_dir
        self.paths = tlsbootstrap.Paths(self.data_dir)
        self.verbosity = ["-v", str(verbosity)] if verbosity else []
        self.supervisor = supervisor or Supervisor(self.data_dir / LOG_DIR, label="kubesvc join")
        self.state: dict = {"pid": os.getpid(), "pid_started": host.process_identity(os.getpid()), "netns": netns_record(),
                            "agent_state_dir": str(self.data_dir / AGENT_DIR / "network"), "service_routes": [],
                            "join": {"server": options.server, "node": options.node_name}}
        self.made: list[Path] = []
        self.pod_cidrs: list[str] = []
        self._rotation: asyncio.Task | None = None
        self._proxy_rotation: asyncio.Task | None = None
        self._serving: asyncio.Task | None = None
        self._up = up

    # ---- credentials and the Node ---------------------------------------------------------------

    async def credentials(self) -> None:
        options = self.options
        if not tlsbootstrap.usable(self.paths, options.node_name, datetime.now(timezone.utc)):
            found = await discovery.discover(options.server, options.token, options.ca_cert_hashes)
            async with tlsbootstrap.bootstrap_client(options.server, found.ca_pem, options.token) as client:
                key, cert = await tlsbootstrap.request_certificate(client, options.node_name, timeout=CERTIFICATE_TIMEOUT,
                                                                   server=options.server, token_id=found.token_id)
            self.made += tlsbootstrap.write_credentials(self.paths, options.server, found.ca_pem, key, cert, options.node_name)
        await self.kube_proxy_credentials()

    async def kube_proxy_credentials(self) -> None:
        """``system:kube-proxy``'s certificate, asked for with the node's own credential."""
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import RestClient

        proxy = tlsbootstrap.kube_proxy_identity(self.paths)
        if tlsbootstrap.identity_usable(self.paths, proxy, datetime.now(timezone.utc)):
            return
        try:
            async with RestClient(load_kubeconfig(self.paths.kubeconfig), user_agent="kubesvc-join", field_manager="kubesvc-join") as client:
                key, cert = await tlsbootstrap.request_certificate(client, self.options.node_name, timeout=CERTIFICATE_TIMEOUT,
                                                                   server=self.options.server, identity=proxy)
        except JoinFailed as err:  # e.g. a cluster initialised before kubesvc granted nodes this request: an admin approves it
            raise JoinFailed(f"kube-proxy's client certificate (for the proxy and the LoadBalancer announcer): {err}") from None
        self.made += tlsbootstrap.write_identity(self.paths, proxy, self.options.server, self.paths.ca.read_bytes(), key, cert)

    async def node_pod_cidrs(self) -> list[str]:
        """Make sure the Node exists; the Pod CIDRs it has or gets from the cluster."""
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import ClientError, RestClient, is_already_exists, is_not_found

        name = self.options.node_name
        path = f"/api/v1/nodes/{name}"
        async with RestClient(load_kubeconfig(self.paths.kubeconfig), user_agent="kubesvc-join", field_manager="kubesvc-join") as client:
            try:
                try:
                    node = await client.get(path)
                except ClientError as err:
                    if not is_not_found(err):
                        raise
                    labels = {"topology.kubernetes.io/zone": self.options.zone} if self.options.zone else {}
                    spec = {"podCIDR": self.options.pod_cidrs[0], "podCIDRs": self.options.pod_cidrs} if self.options.pod_cidrs else {}
                    try:
                        node = await client.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                                     "metadata": {"name": name, "labels": labels}, "spec": spec})
                    except ClientError as exc:
                        if not is_already_exists(exc):
                            raise
                        node = await client.get(path)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + POD_CIDR_TIMEOUT
                while not ((node.get("spec") or {}).get("podCIDRs")):
                    if self.options.pod_cidrs:
                        return self.options.pod_cidrs  # an existing Node without ranges: the agent sets them
                    if loop.time() > deadline:
                        raise JoinFailed(f"the cluster gave node {name} no Pod CIDR within {POD_CIDR_TIMEOUT:g}s (its controller-manager "
                                         "allocates them with --allocate-node-cidrs, as kubesvc up --cluster-init runs it): or pass --pod-cidr")
                    await asyncio.sleep(0.5)
                    node = await client.get(path)
            except ClientError as err:
                raise JoinFailed(f"node {name} cannot register with {self.options.server}: {err}") from None
        cidrs = list(node["spec"]["podCIDRs"])
        if self.options.pod_cidrs and cidrs != self.options.pod_cidrs:
            raise JoinFailed(f"node {name} already has Pod CIDRs {','.join(cidrs)}, not --pod-cidr {','.join(self.options.pod_cidrs)}")
        return cidrs

    # ---- components ---------------------------------------------------------------------------------

    def agent_argv(self) -> list[str]:
        o = self.options
        return kubesvc_argv(
            "agent", "--kubeconfig", self.paths.kubeconfig, "--node-name", o.node_name, "--pod-cidr", ",".join(self.pod_cidrs),
            "--node-ip", ",".join(o.node_ips), *(["--zone", o.zone] if o.zone else []), "--data-dir", self.data_dir / AGENT_DIR,
            "--bridge", BRIDGE, "--port", o.kubelet_port, "--client-ca-file", self.paths.ca, *self.serving_flags(),
            "--shutdown-grace-period", AGENT_SHUTDOWN_GRACE, "--cluster-dns", self.cluster_dns(), "--cluster-domain", o.cluster_domain,
            "--resolv-conf", o.resolv_conf, *o.agent_args, *self.verbosity)

    def serving_flags(self) -> list:
        """The agent's serving certificate once the cluster issued one; until then the agent
        serves a self-signed one (which the apiserver does not trust: no logs or exec) and takes
        the issued pair from ``pki/kubelet-server.{crt,key}`` as soon as it is written (the
        kubelet's ``--rotate-server-certificates`` with its ``--cert-dir``)."""
        if not tlsbootstrap.serving_usable(self.paths, self.options.node_ips, datetime.now(timezone.utc)):
            return ["--rotate-server-certificates", "--cert-dir", self.paths.serving_cert.parent]
        return ["--tls-cert-file", self.paths.serving_cert, "--tls-private-key-file", self.paths.serving_key]

    async def keep_serving_certificate(self, *, rand=random.random, now=None, retry_delays=tlsbootstrap.retry_delays) -> None:
        """The kubelet's serving certificate manager (``--rotate-server-certificates``): ask for
        the serving certificate when there is no usable one, then again at each rotation
        deadline (70-90 % of its lifetime, as for the client certificates); each request waits
        for an administrator's approval while the agent keeps serving the current one, and
        takes the new one in place.

        One request is waited for, not one a minute: a new one is filed only once that one can
        no longer be signed (denied, failed, deleted, or the server refused it), after
        client-go's back-off (``retry_delays``: 2, 4, 8, 16 s, then every 32 s). Upstream's
        manager also gives up on an unanswered request after 15 minutes and files another;
        here the wait lasts until csrcleaner would delete it (``SERVING_APPROVAL_TIMEOUT``), since
        only an administrator approves kubelet-serving requests and a new one every quarter
        hour would only lengthen their list."""
        now = now or (lambda: datetime.now(timezone.utc))
        while True:
            if tlsbootstrap.serving_usable(self.paths, self.options.node_ips, now()):
                cert = tlsbootstrap.certificate_at(self.paths.serving_cert)
                deadline = tlsbootstrap.next_rotation_deadline(cert.not_valid_before_utc, cert.not_valid_after_utc, rand())
                await asyncio.sleep(max(0.0, (deadline - now()).total_seconds()))
            delays = retry_delays(rand)
            while not await self.serving_certificate():
                await asyncio.sleep(next(delays))

    async def serving_certificate(self) -> bool:
        """The kubelet's serving certificate bootstrap (``serverTLSBootstrap``): a
        ``kubernetes.io/kubelet-serving`` CSR as the node, waited for until an administrator
        approves it (``kubectl certificate approve``; no controller does, as upstream) and
        csrsigning signs it; the running agent serves it from its next connection on. Whether
        one was issued."""
        import logging

        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import ClientError, RestClient

        options = self.options
        try:
            async with RestClient(load_kubeconfig(self.paths.kubeconfig), user_agent="kubesvc-join", field_manager="kubesvc-join") as client:
                key, cert = await tlsbootstrap.request_certificate(client, options.node_name, timeout=SERVING_APPROVAL_TIMEOUT,
                                                                   server=options.server, serving_for=(options.node_ips, [options.node_name]),
                                                                   interval=5.0, on_created=lambda name: self.supervisor.say(
                                                                       "the agent's serving certificate (kubectl logs and exec reach it "
                                                                       f"with it) waits for approval: kubectl certificate approve {name}"))
        except (JoinFailed, ClientError) as err:
            logging.getLogger("kubesvc.nodejoin").warning("no serving certificate for the agent: %s", err)
            return False
        from kubesvc.serving import pki

        pki.private_dir(self.paths.serving_key.parent)
        pki.write_private(self.paths.serving_key, key)  # the key first: the agent takes the pair once both match
        pki.write_private(self.paths.serving_cert, cert)
        self.supervisor.say("the agent's serving certificate was issued: the agent serves it from its next connection on")
        return True

    def cluster_dns(self) -> str:
        from kubesvc.dns.addon import cluster_dns_ip

        return self.options.cluster_dns or cluster_dns_ip(self.options.service_cidrs[0])

    def proxy_argv(self) -> list[str]:
        o = self.options
        return kubesvc_argv(
            "proxy", "--kubeconfig", self.paths.proxy_kubeconfig, "--hostname-override", o.node_name, "--cluster-cidr", ",".join(self.pod_cidrs),
            "--bind-address", o.node_ips[0], *(["--proxy-mode", o.proxy_mode] if o.proxy_mode else []), *o.proxy_args, *self.verbosity)

    def lb_announcer_argv(self) -> list[str]:
        """As ``up --loadbalancer-pool`` runs it; answering on the interface holding the node IP.
        In a cluster without pools it answers for nothing."""
        o = self.options
        return kubesvc_argv("lb-announcer", "--kubeconfig", self.paths.proxy_kubeconfig, "--node-name", o.node_name,
                            "--node-ip", o.node_ips[0], *self.verbosity)

    async def start_components(self) -> None:
        async def agent_then_routes() -> None:
            await self.supervisor.start("agent", self.agent_argv(), ready_timeout=READY_TIMEOUT)
            try:
                ensure_service_routes(self.options.service_cidrs, BRIDGE, self.state["service_routes"])
            finally:
                _write_state(self.data_dir, self.state)

        async def the_proxy() -> None:
            line = await self.supervisor.start("proxy", self.proxy_argv(), ready_timeout=READY_TIMEOUT)
            self.state["proxy_mode"] = match.group(1) if (match := PROXY_LINE.search(line)) else ""
            _write_state(self.data_dir, self.state)

        await all_or_none([agent_then_routes(), the_proxy()])
        await self.supervisor.start("lb-announcer", self.lb_announcer_argv(), ready_timeout=READY_TIMEOUT)

    def renewed(self, whose: str):
        """What a rotation does once the new files are in place: say so (the components watch
        their files and take the new pair themselves; nothing is restarted)."""

        async def say() -> None:
            self.supervisor.say(f"{whose} client certificate was renewed: its components use it from their next connection on")

        return say

    async def start(self) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_state(self.data_dir, self.state)
        try:
            await self.credentials()
            self.pod_cidrs = await self.node_pod_cidrs()
        except BaseException:
            tlsbootstrap.remove(self.made)  # a failed join leaves no credential behind
            raise
        self.state["pod_cidrs"] = self.pod_cidrs
        _write_state(self.data_dir, self.state)
        await self.start_components()
        self._rotation = asyncio.create_task(tlsbootstrap.rotate_forever(self.paths, self.options.server, self.options.node_name,
                                                                         self.renewed("the node's")))
        self._proxy_rotation = asyncio.create_task(tlsbootstrap.rotate_forever(
            self.paths, self.options.server, self.options.node_name, self.renewed("kube-proxy's"),
            identity=tlsbootstrap.kube_proxy_identity(self.paths)))
        self._serving = asyncio.create_task(self.keep_serving_certificate())

    async def node_deleted(self) -> bool:
        """Whether the cluster no longer has this Node (an administrator's ``kubectl delete
        node``); False when that cannot be known (the server is away)."""
        from kubesvc.client.kubeconfig import load_kubeconfig
        from kubesvc.client.rest import ClientError, RestClient, is_not_found

        try:
            async with RestClient(load_kubeconfig(self.paths.kubeconfig), user_agent="kubesvc-join", timeout=10.0) as client:
                await client.get(f"/api/v1/nodes/{self.options.node_name}")
        except ClientError as err:
            return is_not_found(err)
        except (OSError, ValueError, TimeoutError):
            return False
        return False

    async def stop(self) -> list[str]:
        from kubesvc.proxy.server import cleanup_leftovers

        await cancel_and_wait([t for t in [self._rotation, self._proxy_rotation, self._serving] if t is not None])
        errors: list[str] = []
        await self.supervisor.stop(["lb-announcer", "proxy", "agent"], STOP_GRACE)
        await self.supervisor.close()
        for name, work in (("proxy rules", lambda: cleanup_leftovers()), ("pod network", lambda: teardown_pod_network(Path(self.state["agent_state_dir"]))),
                           ("routes", lambda: remove_service_routes(self.state.get("service_routes") or []))):
            try:
                errors.extend(await asyncio.to_thread(work) or [])
            except Exception as err:  # noqa: BLE001 - keep cleaning; report at the end
                errors.append(f"{name}: {err}")
        if not errors:
            _state_path(self.data_dir).unlink(missing_ok=True)
        return errors


async def run_join(options: JoinOptions, verbosity: int, announce, stop: asyncio.Event) -> list[str]:
    """As ``up.run_up``: start, serve until ``stop``, stop and clean (also after a failed start)."""
    system = JoinSystem(options, verbosity)
    starting = asyncio.create_task(system.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            announce(system)
            await stopping
    finally:
        await cancel_and_wait([starting, stopping])
        errors = await system.stop()
        if not errors and system.pod_cidrs and await system.node_deleted():
            remove_node_files(options.data_dir)  # kubectl delete node, then stop: the machine is no node any more
        if not system.pod_cidrs and not tlsbootstrap.usable(system.paths, options.node_name, datetime.now(timezone.utc)):
            remove_if_empty(options.data_dir)
    return errors


LEFT_BEHIND = ("kubeconfig", "kube-proxy.kubeconfig", "pki", LOG_DIR, AGENT_DIR)


def leave(data_dir: Path) -> list[str]:
    """``kubesvc leave``: stop a running join of ``data_dir`` (or clean after a crashed one)
    with ``up``'s ``down``, then remove its credentials, logs and agent state."""
    from kubesvc.up import down

    errors = down(data_dir)
    if errors:
        return errors
    remove_node_files(data_dir)
    return []


def remove_node_files(data_dir: Path) -> None:
    """The credentials, logs and agent state a join keeps under ``data_dir`` (and the
    directory, when nothing else is in it)."""
    for name in LEFT_BEHIND:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()
    remove_if_empty(data_dir)


def remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass
