"""The userspace mode's shell (upstream ``pkg/proxy/userspace/proxier.go``): listeners, the
load balancer, and one ``iptables-restore`` per sync.

Per sync, in the shared proxier's skeleton (``backend.Mode``):

1. ``observe``: once, whether iptables is usable; full syncs: ensure the jumps from the
   built-in chains (``iptables -C``, else ``-I``/``-A``);
2. ``plan``: the portals (pure ``rules.plan_portals``: one per Service port, two when its
   external traffic policy differs from its internal one) with their endpoints by traffic
   policy;
3. ``apply``: open a listener (random port on the wildcard address) for each new portal, close
   the listeners of portals gone (their relayed TCP connections run to their end); hand each
   portal's endpoints to the round-robin balancer (connections to surviving endpoints are
   untouched; UDP flows to removed endpoints end, so their next datagram picks a live one);
   then write every portal chain, naming the listeners' ports, in one ``iptables-restore
   --noflush`` (pure ``rules.build_restore``).

Where iptables cannot be used at all (no binary, no nat table, no privilege) the listeners
still relay: one line is logged and the kernel steps are skipped from then on. A failed
restore (or a proxy port that could not be opened) counts
``sync_proxy_rules_iptables_restore_failures_total`` and raises ``SyncFailed`` (the next sync
is full), as in iptables mode.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from kubesvc.kernel import runstate
from kubesvc.kernel.exec import CommandFailed
from kubesvc.kernel.iptables import Iptables, IptablesSync
from kubesvc.proxy.backend import KernelPlan, Mode, ProxyOptions, SyncFailed, SyncRequest
from kubesvc.proxy import proxier
from kubesvc.proxy.iptables.proxier import remove_chains
from kubesvc.proxy.iptables.rules import TABLE_FILTER, TABLE_NAT
from kubesvc.proxy.trace import userspace as trace_userspace
from kubesvc.proxy.types import FAMILY_NAMES, IPV6, ServicePortName
from kubesvc.proxy.userspace.loadbalancer import LoadBalancerRR
from kubesvc.proxy.userspace.relay import CONNECT_TIMEOUTS, UDP_IDLE_TIMEOUT, Endpoint, TcpListener, UdpListener
from kubesvc.proxy.userspace.rules import JUMPS, build_restore, cleanup_input, plan_portals

log = logging.getLogger("kubesvc.proxy.userspace")

PortalKey = tuple[ServicePortName, str]


class UserspaceBackend(Mode[None]):
    """The userspace mode for one family: listeners on ``0.0.0.0`` (or ``::``)."""

    mode = "userspace"
    failure_metric = "iptables_restore_failures"

    def __init__(self, options: ProxyOptions, *, netns: str | None = None, ipt: Iptables | None = None,
                 listen_ip: str | None = None, udp_idle_timeout: float = UDP_IDLE_TIMEOUT,
                 connect_timeouts: tuple[float, ...] = CONNECT_TIMEOUTS, program_kernel: bool = True,
                 clock: Callable[[], float] = time.monotonic, publish_state: bool = False):
        """``program_kernel`` False: relay only (no iptables at all, as when it is unusable).
        ``publish_state``: after each sync, write the portals for ``kubesvc trace``
        (``proxy/trace/userspace.py``; root-only, ``kernel/runstate.py``)."""
        super().__init__(options)
        self.ipt = ipt or Iptables(self.family, netns=netns)
        self.listen_ip = listen_ip or ("::" if self.family == IPV6 else "0.0.0.0")
        self.udp_idle_timeout = udp_idle_timeout
        self.connect_timeouts = connect_timeouts
        self.kernel_usable: bool | None = None if program_kernel else False
        self.clock = clock
        self.balancer: LoadBalancerRR[PortalKey, Endpoint] = LoadBalancerRR(clock)
        # TCP connections choose on the relay thread while syncs change the balancer here
        self.balancing = threading.Lock()
        self.listeners: dict[PortalKey, TcpListener | UdpListener] = {}
        self.state_file = runstate.state_path(trace_userspace.KIND, self.family) if publish_state else None
        self._published: dict | None = None  # what the state file holds, its times aside (rewritten only when that changes)

    def proxy_port(self, name: ServicePortName, kind: str = "internal") -> int:
        """The port the listener of ``name``'s portal ``kind`` is bound to (0: none)."""
        listener = self.listeners.get((name, kind))
        return listener.port if listener else 0

    def _chooser(self, key: PortalKey):
        balancer, lock = self.balancer, self.balancing

        def choose(client_ip: str, reset: bool, exclude: Collection[Endpoint]) -> Endpoint:
            with lock:
                return balancer.next_endpoint(key, client_ip, reset=reset, exclude=exclude)
        return choose

    async def _open(self, key: PortalKey, protocol: str) -> TcpListener | UdpListener:
        name = f"{key[0]} ({key[1]})"
        if protocol == "UDP":
            return await UdpListener(self._chooser(key), name=name, idle_timeout=self.udp_idle_timeout).start(self.listen_ip)
        return await TcpListener(self._chooser(key), name=name, timeouts=self.connect_timeouts).start(self.listen_ip)

    async def observe(self, request: SyncRequest, state: None) -> None:
        if self.kernel_usable is None:
            self.kernel_usable = await self._probe_kernel()
        if self.kernel_usable and request.full:
            for position, jump in JUMPS:
                await self.ipt.ensure_chain(jump.table, jump.dst)
                await self.ipt.ensure_rule(position, jump.table, jump.src, *jump.args)

    def plan(self, request: SyncRequest, previous: None, observed: None) -> KernelPlan[None]:
        portals = plan_portals(request, self.options)
        return KernelPlan(kernel_input=(portals, request.node_ip, request.nodeport_ips), next_state=None,
                          no_local_internal=portals.no_local_internal, no_local_external=portals.no_local_external)

    async def apply(self, plan: KernelPlan[None]) -> None:
        """Listeners and balancer first, then the portal rules naming the listeners' ports (so
        the rule counts, ``plan.written``, are known only here)."""
        portals, node_ip, nodeport_ips = plan.kernel_input
        problems: list[str] = []
        for key, portal in portals.portals.items():
            sp = portal.service_port
            endpoints = tuple((ep.ip, ep.port) for ep in portal.endpoints)
            with self.balancing:
                self.balancer.update(key, endpoints, affinity=sp.client_ip_affinity, ttl_seconds=sp.sticky_max_age_seconds)
            listener = self.listeners.get(key)
            if listener is None:
                try:
                    self.listeners[key] = listener = await self._open(key, sp.protocol)
                    log.info("Opened %s proxy port %d for %s (%s)", sp.protocol, listener.port, key[0], key[1])
                except OSError as err:
                    problems.append(f"cannot open a proxy port for {key[0]}: {err}")
                    continue
            if isinstance(listener, UdpListener):
                listener.drop_flows(set(endpoints))
        for key in [k for k in self.listeners if k not in portals.portals]:
            self.listeners.pop(key).close()
            with self.balancing:
                self.balancer.delete(key)
            log.info("Closed proxy port for %s (%s)", *key)
        with self.balancing:
            self.balancer.cleanup_stale_sessions()
        ports = {key: listener.port for key, listener in self.listeners.items()}
        data = build_restore(portals, ports, node_ip=node_ip, nodeport_ips=nodeport_ips)
        plan.written = {TABLE_FILTER: data.filter_rules, TABLE_NAT: data.nat_rules}
        if self.kernel_usable:
            await self.ipt.restore(data.text)
        self._publish(portals.portals)
        if problems:
            raise SyncFailed("; ".join(problems))

    def _publish(self, portals) -> None:
        """The state file, rewritten only when what it says changed (a portal, a listener, the
        endpoints, the balancer's position or sessions): most partial syncs change none of it,
        and a rewrite is a JSON encoding of every portal and a rename. Its times (``writtenAt``,
        each session's idle seconds, which a reader ages from ``writtenAt``) are no change."""
        if self.state_file is None:
            return
        with self.balancing:
            # the snapshot at time zero: every session's time is then its last use, which only traffic changes
            content = trace_userspace.snapshot(portals, self.listeners, self.balancer, self.family, 0.0, wall=0.0)
            if content == self._published:
                return
            state = trace_userspace.snapshot(portals, self.listeners, self.balancer, self.family, self.clock())
        try:
            runstate.write(self.state_file, state)
        except OSError as err:  # tracing is a convenience: never a reason for a sync to fail
            log.debug("Cannot publish the portals for kubesvc trace at %s: %s", self.state_file, err)
            return
        self._published = content

    async def _probe_kernel(self) -> bool:
        try:
            await self.ipt.version()
            await self.ipt.save(TABLE_NAT)
        except CommandFailed as err:
            log.warning("%s iptables unusable (%s): Service portals are not redirected, the proxy ports still relay",
                        self.family_name, err.first_error_line or err)
            return False
        return True

    async def close(self) -> None:
        """Stopping closes the listeners (TCP's on the relay thread, which stays for the next
        ones; UDP's on the event loop)."""
        for listener in self.listeners.values():
            listener.close(connections=True)
        self.listeners.clear()
        if self.state_file is not None:
            runstate.remove(self.state_file)


def cleanup_leftovers(netns: str | None = None) -> None:
    """Remove the userspace mode's jumps and chains in both families (``--cleanup``, another
    mode starting); raises one ``CleanupFailed`` listing every failure."""
    proxier.cleanup_leftovers("userspace", cleanup_family, netns)


def cleanup_family(family: int, netns: str | None = None) -> list[str]:
    ipt = IptablesSync(family, netns=netns)
    if not ipt.available():
        return []
    errors: list[str] = []
    for _, jump in JUMPS:
        try:
            ipt.delete_rule(jump.table, jump.src, *jump.args)
        except CommandFailed as err:
            errors.append(f"{FAMILY_NAMES[family]}: removing jump {jump.src} -> {jump.dst}: {err}")
    errors += [f"{FAMILY_NAMES[family]}: {error}" for error in remove_chains(ipt, cleanup_input)]
    return errors
