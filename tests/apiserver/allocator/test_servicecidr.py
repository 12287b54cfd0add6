"""The ServiceCIDR controllers, in-process: the default ``kubernetes`` ServiceCIDR follows the
flags, every ServiceCIDR gets its finalizer and Ready, and a deletion waits until no ClusterIP
would be left outside every ServiceCIDR (and the grace period has passed)."""

from __future__ import annotations

import asyncio

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator.servicecidr import (
    FINALIZER,
    ServiceCIDRController,
    can_delete,
    plan_default,
    plan_service_cidr,
)
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock

TERMINATING_MESSAGE = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"


class Cluster:
    @classmethod
    async def open(cls, *args, **kwargs):
        """Construct and set up (the control plane is built with awaits)."""
        self = cls.__new__(cls)
        await self._setup(*args, **kwargs)
        return self

    async def _setup(self, cidrs: list[str], controller_cidrs: list[str] | None = None):
        self.clock = FakeClock()
        self.registry, self.allocators = await build_control_plane(MemoryBackend(), self.clock, cidrs)
        # the controller the apiserver runs (woken by ServiceCIDR writes and IP releases);
        # a second one only to see what a different flag configuration does
        self.controller = self.allocators.service_cidr_controller
        if controller_cidrs is not None:
            self.controller = ServiceCIDRController(self.registry, self.clock, controller_cidrs)
        self.cidrs = self.registry.store("networking.k8s.io", "servicecidrs")
        self.services = self.registry.store("", "services")

    async def cidr(self, name: str) -> dict:
        return await self.cidrs.get(None, name)

    async def add_cidr(self, name: str, *cidrs: str) -> dict:
        return await self.cidrs.create(None, {"metadata": {"name": name}, "spec": {"cidrs": list(cidrs)}}, field_manager="test")

    async def service(self, name: str, cluster_ip: str = "") -> dict:
        spec: dict = {"ports": [{"port": 80}]}
        if cluster_ip:
            spec["clusterIP"] = cluster_ip
        return await self.services.create("default", {"metadata": {"name": name}, "spec": spec}, field_manager="test")

    async def events(self) -> list[dict]:
        items, _ = await self.registry.store("", "events").list("default", ListOptions())
        return items

    async def ip_addresses(self) -> set[str]:
        items, _ = await self.registry.store("networking.k8s.io", "ipaddresses").list(None, ListOptions())
        return {ip["metadata"]["name"] for ip in items}


def ready(obj: dict) -> dict | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)


async def gone(cluster: Cluster, name: str) -> bool:
    try:
        await cluster.cidr(name)
    except StatusError as exc:
        return exc.code == 404
    return False


# ---- the default ServiceCIDR -------------------------------------------------------------------

async def test_default_service_cidr_mirrors_flags_and_is_ready():
    cluster = await Cluster.open(["10.96.0.0/28"])
    startup = await cluster.cidr("kubernetes")
    assert startup["spec"]["cidrs"] == ["10.96.0.0/28"]
    # the startup pass (ensure_default_service_cidr) already marks it Ready
    assert ready(startup)["status"] == "True" and ready(startup)["message"] == "Kubernetes default Service CIDR is ready"

    cluster.clock.advance(5)
    assert await cluster.controller.sync() is None
    default = await cluster.cidr("kubernetes")
    condition = ready(default)
    assert default["spec"]["cidrs"] == ["10.96.0.0/28"]
    assert default["metadata"]["finalizers"] == [FINALIZER]
    # the general controller's message wins, as in a real cluster; status did not transition
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "", "Kubernetes Service CIDR is ready")
    assert condition["lastTransitionTime"] == ready(startup)["lastTransitionTime"]
    managers = {(m["manager"], m.get("subresource", "")) for m in default["metadata"]["managedFields"]}
    assert ("kubernetes-service-cidr-controller", "") in managers
    assert ("service-cidr-controller", "status") in managers

    # a second pass writes nothing
    rv = default["metadata"]["resourceVersion"]
    await cluster.controller.sync()
    assert (await cluster.cidr("kubernetes"))["metadata"]["resourceVersion"] == rv
    assert await cluster.events() == []


async def test_default_service_cidr_is_recreated_with_flag_cidrs_canonicalised():
    cluster = await Cluster.open(["10.96.0.0/28"], controller_cidrs=["10.96.0.0/28"])
    await cluster.controller.sync()
    await cluster.cidrs.guaranteed_update(None, "kubernetes", lambda o: {**o, "metadata": {**o["metadata"], "finalizers": []}}, field_manager="test")
    await cluster.cidrs.delete(None, "kubernetes", {})
    assert await gone(cluster, "kubernetes")
    _, restarted = await build_control_plane(cluster.registry.backend, cluster.clock, ["10.96.0.5/28"])  # an apiserver restart
    await restarted.service_cidr_controller.sync()
    recreated = await cluster.cidr("kubernetes")
    assert recreated["spec"]["cidrs"] == ["10.96.0.0/28"]
    assert ready(recreated)["status"] == "True" and recreated["metadata"]["finalizers"] == [FINALIZER]


async def test_single_stack_default_is_upgraded_to_dual_stack():
    cluster = await Cluster.open(["10.96.0.0/28"], controller_cidrs=["10.96.0.0/28", "fd00::/112"])
    await cluster.controller.sync()
    default = await cluster.cidr("kubernetes")
    assert default["spec"]["cidrs"] == ["10.96.0.0/28", "fd00::/112"]
    assert ready(default)["status"] == "True"
    assert await cluster.events() == []


async def test_inconsistent_flags_are_reported_once_and_the_object_is_left_alone():
    cluster = await Cluster.open(["10.96.0.0/28"], controller_cidrs=["10.100.0.0/24"])
    before = await cluster.cidr("kubernetes")
    await cluster.controller.sync_default()
    await cluster.controller.sync_default()
    after = await cluster.cidr("kubernetes")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["cidrs"] == ["10.96.0.0/28"]
    events = await cluster.events()
    assert len(events) == 1
    event = events[0]
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "KubernetesDefaultServiceCIDRInconsistent", 1)
    assert event["message"] == "The default ServiceCIDR [10.96.0.0/28] does not match the controller flag configurations [10.100.0.0/24]"
    assert event["involvedObject"]["kind"] == "ServiceCIDR" and event["involvedObject"]["name"] == "kubernetes"
    assert event["source"] == {"component": "kubernetes-service-cidr-controller"}
    await cluster.controller.sync()
    assert len(await cluster.events()) == 1


async def test_inconsistent_dual_stack_is_not_upgraded_when_the_first_cidr_differs():
    cluster = await Cluster.open(["10.96.0.0/28"], controller_cidrs=["10.100.0.0/24", "fd00::/112"])
    await cluster.controller.sync()
    assert (await cluster.cidr("kubernetes"))["spec"]["cidrs"] == ["10.96.0.0/28"]
    [event] = await cluster.events()
    assert event["message"] == "The default ServiceCIDR [10.96.0.0/28] does not match the controller flag configurations [10.100.0.0/24 fd00::/112]"


async def test_default_ready_false_is_reported_not_overwritten():
    cluster = await Cluster.open(["10.96.0.0/28"])
    condition = {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Broken", "message": "someone said so"}
    await cluster.cidrs.guaranteed_update(None, "kubernetes", lambda o: {**o, "status": {"conditions": [condition]}}, field_manager="test", subresource="status")
    await cluster.controller.sync_default()
    await cluster.controller.sync_default()
    assert ready(await cluster.cidr("kubernetes")) == condition
    [event] = await cluster.events()
    assert (event["reason"], event["message"]) == ("Broken", "Configuration matches, but someone said so")


# ---- user ServiceCIDRs -------------------------------------------------------------------------

async def test_user_service_cidr_gets_finalizer_and_ready():
    cluster = await Cluster.open(["10.96.0.0/28"])
    await cluster.add_cidr("extra", "10.97.0.0/28", "fd00:1::/112")
    await cluster.controller.sync()
    extra = await cluster.cidr("extra")
    assert extra["metadata"]["finalizers"] == [FINALIZER]
    condition = ready(extra)
    assert condition == {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z",
                         "reason": "", "message": "Kubernetes Service CIDR is ready"}


async def fill_default(cluster: Cluster) -> list[str]:
    """14 Services take all of 10.96.0.0/28 (10.96.0.1-10.96.0.14)."""
    return [(await cluster.service(f"fill-{i}"))["spec"]["clusterIP"] for i in range(14)]


async def test_new_service_cidr_serves_once_the_default_is_full_and_deletion_waits_for_its_ips():
    cluster = await Cluster.open(["10.96.0.0/28"])
    taken = await fill_default(cluster)
    assert sorted(taken, key=lambda ip: int(ip.rsplit(".", 1)[1])) == [f"10.96.0.{i}" for i in range(1, 15)]
    with pytest.raises(StatusError) as full:
        await cluster.service("nope")
    assert (full.value.code, full.value.message) == (500, "Internal error occurred: failed to allocate a serviceIP: range is full")

    await cluster.add_cidr("user", "10.97.0.0/28")
    await cluster.controller.sync()
    overflow = (await cluster.service("overflow"))["spec"]["clusterIP"]
    assert overflow.startswith("10.97.0.")

    # deleting it while a ClusterIP is in use: marked, blocked, Ready=False/Terminating
    await cluster.cidrs.delete(None, "user", {})
    assert await cluster.controller.sync() is None
    user = await cluster.cidr("user")
    assert user["metadata"]["deletionTimestamp"] and user["metadata"]["finalizers"] == [FINALIZER]
    condition = ready(user)
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Terminating", TERMINATING_MESSAGE)
    # ... and no longer serves new Services
    with pytest.raises(StatusError) as full:
        await cluster.service("after-delete")
    assert full.value.code == 500
    with pytest.raises(StatusError) as static:
        await cluster.service("static", cluster_ip="10.97.0.9")
    assert static.value.code == 422
    # the grace period does not free it while the IP is there
    cluster.clock.advance(60)
    await cluster.controller.sync()
    assert (await cluster.cidr("user"))["metadata"]["finalizers"] == [FINALIZER]

    # the Service goes; the ServiceCIDR goes after the grace period
    await cluster.services.delete("default", "overflow", {})
    assert overflow not in await cluster.ip_addresses()
    await cluster.controller.sync()
    assert await gone(cluster, "user")  # deletionTimestamp was 60 s ago: grace long over


async def test_a_service_cidr_stops_serving_as_soon_as_it_is_marked_for_deletion():
    cluster = await Cluster.open(["10.96.0.0/28"])
    await fill_default(cluster)
    await cluster.add_cidr("user", "10.97.0.0/28")
    await cluster.controller.sync()
    await cluster.cidrs.delete(None, "user", {})  # no controller pass in between
    with pytest.raises(StatusError) as full:
        await cluster.service("after-delete")
    assert full.value.code == 500


async def test_deletion_without_ips_waits_for_the_grace_period():
    cluster = await Cluster.open(["10.96.0.0/28"])
    await cluster.add_cidr("user", "10.97.0.0/28")
    await cluster.controller.sync()
    cluster.clock.advance(3)
    await cluster.cidrs.delete(None, "user", {})
    assert await cluster.controller.sync() == pytest.approx(10.0)
    assert not await gone(cluster, "user")
    assert ready(await cluster.cidr("user"))["status"] == "True"  # not blocked, just waiting
    cluster.clock.advance(9)
    assert await cluster.controller.sync() == pytest.approx(1.0)
    assert not await gone(cluster, "user")
    cluster.clock.advance(1)
    assert await cluster.controller.sync() is None
    assert await gone(cluster, "user")


async def test_contained_service_cidr_is_deletable_with_ips_in_it():
    cluster = await Cluster.open(["10.96.0.0/28"])
    await cluster.add_cidr("big", "10.97.0.0/24")
    await cluster.add_cidr("small", "10.97.0.0/28")
    await cluster.controller.sync()
    await cluster.service("web", cluster_ip="10.97.0.5")
    await cluster.cidrs.delete(None, "small", {})
    await cluster.controller.sync()
    small = await cluster.cidr("small")
    assert ready(small)["status"] == "True"  # never blocked: "big" still covers 10.97.0.5
    cluster.clock.advance(10)
    await cluster.controller.sync()
    assert await gone(cluster, "small")
    assert "10.97.0.5" in await cluster.ip_addresses()
    assert (await cluster.services.get("default", "web"))["spec"]["clusterIP"] == "10.97.0.5"


async def test_blocked_deletion_is_released_by_a_covering_service_cidr():
    cluster = await Cluster.open(["10.96.0.0/28"])
    await cluster.add_cidr("small", "10.97.0.0/28")
    await cluster.controller.sync()
    await cluster.service("web", cluster_ip="10.97.0.5")
    await cluster.cidrs.delete(None, "small", {})
    await cluster.controller.sync()
    assert ready(await cluster.cidr("small"))["reason"] == "Terminating"
    await cluster.add_cidr("big", "10.97.0.0/16")
    cluster.clock.advance(10)
    await cluster.controller.sync()
    assert await gone(cluster, "small")
    assert ready(await cluster.cidr("big"))["status"] == "True"


# ---- the loop ----------------------------------------------------------------------------------

async def test_run_reacts_to_kick_and_survives_errors():
    cluster = await Cluster.open(["10.96.0.0/28"])
    controller = cluster.controller
    calls = []
    real_sync = controller.sync

    def flaky_sync():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real_sync()

    controller.sync = flaky_sync
    task = asyncio.create_task(controller.run(interval=3600))
    try:
        for _ in range(100):
            await asyncio.sleep(0)
            if calls:
                break
        assert len(calls) == 1  # the failed first pass did not kill the loop
        await cluster.add_cidr("extra", "10.97.0.0/28")
        controller.kick()
        for _ in range(200):
            await asyncio.sleep(0.005)
            if (await cluster.cidr("extra"))["metadata"].get("finalizers"):
                break
        assert (await cluster.cidr("extra"))["metadata"]["finalizers"] == [FINALIZER]
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_running_controller_frees_a_deleted_service_cidr_once_its_last_ip_goes():
    """No manual sync or kick: the loop the apiserver runs is woken by the ServiceCIDR delete
    and by the release of its last IP, and wakes itself when the grace period ends."""
    cluster = await Cluster.open(["10.96.0.0/28"])
    await fill_default(cluster)
    await cluster.add_cidr("user", "10.97.0.0/28")
    task = asyncio.create_task(cluster.controller.run(interval=3600))
    try:
        async def finalized() -> bool:
            return (await cluster.cidr("user"))["metadata"].get("finalizers") == [FINALIZER]

        async def terminating() -> bool:
            return (ready(await cluster.cidr("user")) or {}).get("reason") == "Terminating"

        await wait_for(finalized)
        await cluster.service("overflow")
        await cluster.cidrs.delete(None, "user", {})
        await wait_for(terminating)
        await cluster.services.delete("default", "overflow", {})
        cluster.clock.advance(10)
        await wait_for(lambda: gone(cluster, "user"))
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def wait_for(condition, seconds: float = 2.0) -> None:
    """``condition()`` returns an awaitable bool (it reads the store)."""
    for _ in range(int(seconds / 0.005)):
        if await condition():
            return
        await asyncio.sleep(0.005)
    assert await condition()


# ---- the pure decisions ------------------------------------------------------------------------

def _cidr_obj(name: str, *cidrs: str, deleting: str = "", finalizers=(FINALIZER,)) -> dict:
    meta: dict = {"name": name, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {"metadata": meta, "spec": {"cidrs": list(cidrs)}}


def _ip(ip: str, family: str = "IPv4", manager: str = "ipallocator.k8s.io") -> dict:
    return {"metadata": {"name": ip, "labels": {"ipaddress.kubernetes.io/ip-family": family, "ipaddress.kubernetes.io/managed-by": manager}}}


def test_plan_default_decisions():
    now = FakeClock().now()
    assert plan_default(None, ["10.96.0.0/12"], now).create == ("10.96.0.0/12",)
    single = _cidr_obj("kubernetes", "10.96.0.0/12")
    assert plan_default(single, ["10.96.0.0/12", "fd00::/108"], now).upgrade == ("10.96.0.0/12", "fd00::/108")
    assert plan_default(single, ["10.96.0.0/12"], now).condition["message"] == "Kubernetes default Service CIDR is ready"
    deleting = _cidr_obj("kubernetes", "10.96.0.0/12", deleting="2026-01-01T00:00:00Z")
    assert plan_default(deleting, ["10.96.0.0/12"], now) == plan_default(deleting, ["10.0.0.0/24"], now)
    assert plan_default(deleting, ["10.96.0.0/12"], now).condition is None


def test_can_delete_ignores_foreign_ips_and_network_addresses():
    user = _cidr_obj("user", "10.97.0.0/28", deleting="2026-01-01T00:00:00Z")
    cidrs = [_cidr_obj("kubernetes", "10.96.0.0/28"), user]
    assert can_delete(user, cidrs, [_ip("10.96.0.3")])
    assert can_delete(user, cidrs, [_ip("10.97.0.3", manager="someone-else")])
    assert can_delete(user, cidrs, [_ip("10.97.0.0"), _ip("10.97.0.15")])  # network / broadcast
    assert not can_delete(user, cidrs, [_ip("10.97.0.3")])
    # an IP also inside another (even larger-prefix-overlapping) ServiceCIDR is not orphaned
    assert can_delete(user, [*cidrs, _cidr_obj("part", "10.97.0.0/29")], [_ip("10.97.0.3")])
    # one family covered by a parent, the other not: the uncovered family's IPs still block
    dual = _cidr_obj("dual", "10.97.0.0/28", "fd00::/112", deleting="2026-01-01T00:00:00Z")
    parent = _cidr_obj("parent", "10.97.0.0/24")
    assert not can_delete(dual, [dual, parent], [_ip("fd00::5", "IPv6")])
    assert can_delete(dual, [dual, parent, _cidr_obj("p6", "fd00::/64")], [_ip("fd00::5", "IPv6")])


def test_plan_service_cidr_without_finalizer_does_nothing_when_deleting():
    now = FakeClock().now()
    obj = _cidr_obj("user", "10.97.0.0/28", deleting="2026-01-01T00:00:00Z", finalizers=())
    plan = plan_service_cidr(obj, [obj], [], now)
    assert not (plan.add_finalizer or plan.remove_finalizer or plan.condition) and plan.wait_seconds is None
