"""ClusterIP and NodePort allocation through the Service registry, in process.

Every expectation is upstream's documented behaviour as recorded in the reference
(/work/shared/reference/control-plane.md): §1.3 bands and worked examples, §1.4 IPAddress
objects, §1.5 error strings, §1.6 ``TestCreateInitIPFields`` rows, §1.7 headless /
ExternalName / type changes, §2 NodePorts and healthCheckNodePort, §4 validation messages; and
upstream's strategy.go ``dropTypeDependentFields`` (``sameNodePorts`` is a superset check).

Nothing here depends on which random IP or port is chosen: assertions are about sets that the
band rules fully determine, or use a pinned "random" start.
"""

from __future__ import annotations

import copy
import ipaddress
import json

import pytest

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.allocator import records
from kubesvc.apiserver.registry.store import ListOptions
from kubesvc.apiserver.server import build_control_plane
from kubesvc.storage.memory import MemoryBackend
from kubesvc.util.clock import FakeClock

V4_16 = "10.96.0.0/16"
V6_112 = "fd00:10:96::/112"
DUAL = [V4_16, V6_112]
FULL = "Internal error occurred: failed to allocate a serviceIP: range is full"
PORTS_FULL = "Internal error occurred: failed to allocate a nodePort: range is full"
MISMATCH = "the provided network does not match the current range"


class FixedStart:
    """A pinned stand-in for random.Random: ``randrange`` returns the band's first slot
    (``"low"``) or its last one (``"high"``)."""

    def __init__(self, where: str):
        self.where = where

    def randrange(self, low, high):
        return low if self.where == "low" else high - 1


class Cluster:
    """A control plane on the memory backend with helpers for Service writes."""

    @classmethod
    async def open(cls, *args, **kwargs):
        """Construct and set up (the control plane is built with awaits)."""
        self = cls.__new__(cls)
        await self._setup(*args, **kwargs)
        return self

    async def _setup(self, cidrs=(V4_16,), node_ports: str = "30000-32767", static_subrange: bool = True):
        self.registry, self.allocators = await build_control_plane(MemoryBackend(), FakeClock(), list(cidrs), node_ports,
                                                             static_subrange=static_subrange)
        self.services = self.registry.store("", "services")
        self.ipaddresses = self.registry.store("networking.k8s.io", "ipaddresses")
        self.backend = self.registry.backend

    def pin_random(self, where: str) -> None:
        rng = FixedStart(where)
        self.allocators.rng = rng
        for family in self.allocators.families.values():
            family.rng = rng
        self.allocators.ports.rng = rng

    # ---- writes -------------------------------------------------------------------------------
    async def create(self, name: str, spec: dict | None = None, *, dry_run: bool = False) -> dict:
        spec = {"ports": [{"port": 80}]} if spec is None else spec
        return await self.services.create("default", {"metadata": {"name": name}, "spec": copy.deepcopy(spec)},
                                    field_manager="test", dry_run=dry_run)

    async def put(self, name: str, change, *, dry_run: bool = False) -> dict:
        """PUT: GET, change the object in place, write it back whole."""
        obj = await self.services.get("default", name)
        change(obj)
        new, created = await self.services.update("default", name, obj, field_manager="test", dry_run=dry_run)
        assert not created
        return new

    async def mutate(self, name: str, change) -> dict:
        def apply(current: dict) -> dict:
            change(current)
            return current

        return await self.services.guaranteed_update("default", name, apply, field_manager="test")

    async def delete(self, name: str) -> None:
        _, deleted = await self.services.delete("default", name, {})
        assert deleted

    # ---- reads --------------------------------------------------------------------------------
    async def get(self, name: str) -> dict:
        return await self.services.get("default", name)

    async def service_names(self) -> set[str]:
        items, _ = await self.services.list("default", ListOptions())
        return {s["metadata"]["name"] for s in items}

    async def ip_addresses(self) -> dict[str, dict]:
        items, _ = await self.ipaddresses.list(None, ListOptions())
        return {o["metadata"]["name"]: o for o in items}

    async def node_port_records(self) -> dict[int, tuple[str, str] | None]:
        return {int(kv.key[len(records.NODE_PORT_PREFIX):]): records.node_port_owner(kv.value)
                for kv in (await self.backend.list(records.NODE_PORT_PREFIX)).kvs}

    async def plant_ip_address(self, ip: str, owner: str = "ghost") -> None:
        """An IPAddress written straight into storage, behind the allocator's index."""
        await self.backend.create(records.ip_address_key(ip), json.dumps(records.ip_address_object(ip, "default", owner)).encode())

    async def plant_node_port(self, port: int, owner: str = "ghost") -> None:
        await self.backend.create(records.node_port_key(port), records.node_port_record("default", owner))

    async def assert_consistent(self) -> None:
        """No IP or nodePort is held by two Services; every held value has its record, owned by
        the holder; every record owned by an existing Service is held by it."""
        items, _ = await self.services.list("default", ListOptions())
        by_ip: dict[str, str] = {}
        by_port: dict[int, str] = {}
        for svc in items:
            name, spec = svc["metadata"]["name"], svc["spec"]
            for ip in spec.get("clusterIPs") or []:
                if ip != "None":
                    assert ip not in by_ip, f"{ip} held by {by_ip[ip]} and {name}"
                    by_ip[ip] = name
            ports = {p["nodePort"] for p in spec.get("ports") or [] if p.get("nodePort")}
            if spec.get("healthCheckNodePort"):
                ports.add(spec["healthCheckNodePort"])
            for port in ports:
                assert port not in by_port, f"{port} held by {by_port[port]} and {name}"
                by_port[port] = name
        addresses = await self.ip_addresses()
        for ip, name in by_ip.items():
            assert addresses[ip]["spec"]["parentRef"]["name"] == name
        for ip, obj in addresses.items():
            owner = obj["spec"]["parentRef"]["name"]
            if owner in {s["metadata"]["name"] for s in items}:
                assert by_ip.get(ip) == owner, f"IPAddress {ip} of {owner} is not its clusterIP"
        port_records = await self.node_port_records()
        for port, name in by_port.items():
            assert port_records[port] == ("default", name)
        for port, owner in port_records.items():
            if owner and owner[1] in by_port.values():
                assert by_port.get(port) == owner[1], f"nodePort record {port} of {owner[1]} is not held by it"


def ip_int(ip: str) -> int:
    return int(ipaddress.ip_address(ip))


def ip_set(first: str, last: str) -> set[str]:
    return {str(ipaddress.ip_address(i)) for i in range(ip_int(first), ip_int(last) + 1)}


async def raises(code: int, fn, *args, **kwargs) -> StatusError:
    with pytest.raises(StatusError) as info:
        await fn(*args, **kwargs)
    assert info.value.code == code, info.value.message
    return info.value


def single(ip: str, **extra) -> dict:
    return {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"port": 80}], **extra}


def node_port_spec(*ports: dict, **extra) -> dict:
    return {"type": "NodePort", "ports": list(ports) or [{"port": 80}], **extra}


# ==== §1.3 bands: the worked examples ==========================================================


async def test_slash24_upper_band_then_lower_band_then_full():
    cluster = await Cluster.open(["10.96.0.0/24"])
    upper = {(await cluster.create(f"u{i}"))["spec"]["clusterIP"] for i in range(238)}
    assert upper == ip_set("10.96.0.17", "10.96.0.254")
    lower = {(await cluster.create(f"l{i}"))["spec"]["clusterIP"] for i in range(16)}
    assert lower == ip_set("10.96.0.1", "10.96.0.16")
    error = await raises(500, cluster.create, "full")
    assert error.message == FULL
    assert len(await cluster.ip_addresses()) == 254
    assert "full" not in await cluster.service_names()
    await cluster.assert_consistent()


@pytest.mark.parametrize("cidr", ["10.96.0.0/20", "10.96.0.0/16", "10.96.0.0/12"], ids=["slash20", "slash16", "slash12"])
async def test_static_band_ends_at_10_96_1_0(cidr):
    cluster = await Cluster.open([cidr])
    got = [(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(300)]
    assert len(set(got)) == 300
    assert all(ip_int(ip) > ip_int("10.96.1.0") for ip in got)
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(cidr) for ip in got)


async def test_kube_dns_address_is_always_free_after_many_dynamic_creates():
    cluster = await Cluster.open([V4_16])
    for i in range(500):
        await cluster.create(f"s{i}")
    dns = await cluster.create("kube-dns", single("10.96.0.10", ports=[{"name": "dns", "port": 53, "protocol": "UDP"}]))
    assert dns["spec"]["clusterIPs"] == ["10.96.0.10"]
    error = await raises(422, cluster.create, "dns2", single("10.96.0.10"))
    assert error.message == ('Service "dns2" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.10"]: '
                             "failed to allocate IP 10.96.0.10: provided IP is already allocated")
    assert (await cluster.ip_addresses())["10.96.0.10"]["spec"]["parentRef"]["name"] == "kube-dns"
    await cluster.assert_consistent()


@pytest.mark.parametrize("ip", ["10.96.0.1", "10.96.0.16", "10.96.1.0", "10.96.1.1", "10.96.255.254"],
                         ids=["network+1", "static", "last-static", "first-dynamic", "last"])
async def test_user_chosen_ip_anywhere_in_range(ip):
    cluster = await Cluster.open([V4_16])
    assert (await cluster.create("pick", single(ip)))["spec"]["clusterIP"] == ip
    assert ip in await cluster.ip_addresses()


EXPLICIT_IP_ERRORS = [
    # (id, cidrs, taken first, requested, suffix) -- §1.5
    ("already allocated", [V4_16], "10.96.5.5", "10.96.5.5", "provided IP is already allocated"),
    ("outside the range", [V4_16], None, "10.97.0.1", MISMATCH),
    ("network address", [V4_16], None, "10.96.0.0", MISMATCH),
    ("broadcast", [V4_16], None, "10.96.255.255", MISMATCH),
    ("v6 already allocated", DUAL, "fd00:10:96::7", "fd00:10:96::7", "provided IP is already allocated"),
    ("v6 outside the range", DUAL, None, "fd00:10:97::1", MISMATCH),
]


@pytest.mark.parametrize(("cidrs", "taken", "ip", "suffix"), [row[1:] for row in EXPLICIT_IP_ERRORS], ids=[row[0] for row in EXPLICIT_IP_ERRORS])
async def test_user_chosen_ip_errors(cidrs, taken, ip, suffix):
    cluster = await Cluster.open(cidrs)
    extra = {"ipFamilies": ["IPv6"]} if ":" in ip else {}
    if taken:
        await cluster.create("first", single(taken, **extra))
    before = set(await cluster.ip_addresses())
    error = await raises(422, cluster.create, "foo", single(ip, **extra))
    assert error.message == f'Service "foo" is invalid: spec.clusterIPs: Invalid value: ["{ip}"]: failed to allocate IP {ip}: {suffix}'
    assert set(await cluster.ip_addresses()) == before
    assert "foo" not in await cluster.service_names()


PINNED_STARTS = [
    # (id, static_subrange, pinned start, expected first IPs) on 10.96.0.0/24
    ("static band on, start low", True, "low", ["10.96.0.17", "10.96.0.18"]),
    ("static band off, start low", False, "low", ["10.96.0.1", "10.96.0.2"]),
    # start at the band's end: the second allocation wraps to the band's start
    ("static band on, wrap inside upper band", True, "high", ["10.96.0.254", "10.96.0.17"]),
    ("static band off, wrap to network+1", False, "high", ["10.96.0.254", "10.96.0.1"]),
]


@pytest.mark.parametrize(("static_subrange", "where", "expected"), [row[1:] for row in PINNED_STARTS], ids=[row[0] for row in PINNED_STARTS])
async def test_service_ip_static_subrange_gate(static_subrange, where, expected):
    cluster = await Cluster.open(["10.96.0.0/24"], static_subrange=static_subrange)
    cluster.pin_random(where)
    assert [(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(len(expected))] == expected


async def test_without_static_subrange_every_ip_is_dynamic():
    # ServiceIPStaticSubrange=false: all 254 addresses are handed out dynamically, and the
    # next create is full -- no address is held back for user-chosen IPs
    cluster = await Cluster.open(["10.96.0.0/24"], static_subrange=False)
    got = {(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(254)}
    assert got == ip_set("10.96.0.1", "10.96.0.254")
    assert (await raises(500, cluster.create, "full")).message == FULL


# ==== §1.4 IPAddress objects ==================================================================


@pytest.mark.parametrize(("cidrs", "spec", "family"), [
    ([V4_16], single("10.96.0.42"), "IPv4"),
    (DUAL, {"clusterIP": "fd00:10:96::42", "clusterIPs": ["fd00:10:96::42"], "ipFamilies": ["IPv6"], "ports": [{"port": 80}]}, "IPv6"),
], ids=["v4", "v6"])
async def test_ip_address_object_for_each_allocated_ip(cidrs, spec, family):
    cluster = await Cluster.open(cidrs)
    svc = await cluster.create("web", spec)
    ip = svc["spec"]["clusterIP"]
    obj = await cluster.ipaddresses.get(None, ip)
    assert obj["apiVersion"] == "networking.k8s.io/v1" and obj["kind"] == "IPAddress"
    assert obj["metadata"]["name"] == ip
    assert obj["metadata"]["labels"] == {"ipaddress.kubernetes.io/ip-family": family,
                                         "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
    assert obj["spec"]["parentRef"] == {"group": "", "resource": "services", "namespace": "default", "name": "web"}
    await cluster.delete("web")
    assert ip not in await cluster.ip_addresses()
    # released: the same IP can be taken again
    assert (await cluster.create("again", spec))["spec"]["clusterIP"] == ip


async def test_dual_stack_service_has_one_ip_address_per_family():
    cluster = await Cluster.open(DUAL)
    svc = await cluster.create("dual", {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]})
    v4, v6 = svc["spec"]["clusterIPs"]
    addresses = await cluster.ip_addresses()
    assert set(addresses) == {v4, v6}
    assert addresses[v4]["metadata"]["labels"]["ipaddress.kubernetes.io/ip-family"] == "IPv4"
    assert addresses[v6]["metadata"]["labels"]["ipaddress.kubernetes.io/ip-family"] == "IPv6"
    assert ip_int(v6) > ip_int("fd00:10:96::100")  # /112: offset 256 -> dynamic from ::101
    await cluster.delete("dual")
    assert await cluster.ip_addresses() == {}


# ==== §1.6 dual-stack: TestCreateInitIPFields ==================================================

V4, V6 = "10.96.0.5", "fd00:10:96::5"

INIT_IP_FIELDS = [
    # (id, cluster cidrs, spec fields, policy, families, clusterIPs: None=allocated, ["None"]=headless, or exact)
    ("unset/unset/unset", DUAL, {}, "SingleStack", ["IPv4"], None),
    ("families [IPv6]", DUAL, {"ipFamilies": ["IPv6"]}, "SingleStack", ["IPv6"], None),
    ("PreferDualStack", DUAL, {"ipFamilyPolicy": "PreferDualStack"}, "PreferDualStack", ["IPv4", "IPv6"], None),
    ("RequireDualStack", DUAL, {"ipFamilyPolicy": "RequireDualStack"}, "RequireDualStack", ["IPv4", "IPv6"], None),
    ("PreferDualStack families [IPv6]", DUAL, {"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6"]},
     "PreferDualStack", ["IPv6", "IPv4"], None),
    ("families [IPv4,IPv6]", DUAL, {"ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"},
     "RequireDualStack", ["IPv4", "IPv6"], None),
    ("clusterIPs [v6]", DUAL, {"clusterIP": V6, "clusterIPs": [V6]}, "SingleStack", ["IPv6"], [V6]),
    ("clusterIPs [v4,v6] RequireDualStack", DUAL, {"clusterIP": V4, "clusterIPs": [V4, V6], "ipFamilyPolicy": "RequireDualStack"},
     "RequireDualStack", ["IPv4", "IPv6"], [V4, V6]),
    ("clusterIPs [v4,v6] PreferDualStack", DUAL, {"clusterIP": V4, "clusterIPs": [V4, V6], "ipFamilyPolicy": "PreferDualStack"},
     "PreferDualStack", ["IPv4", "IPv6"], [V4, V6]),
    ("clusterIPs [v6,v4] families [IPv6]", DUAL, {"clusterIP": V6, "clusterIPs": [V6, V4], "ipFamilies": ["IPv6"],
                                                  "ipFamilyPolicy": "RequireDualStack"},
     "RequireDualStack", ["IPv6", "IPv4"], [V6, V4]),
    ("clusterIPs [v6] PreferDualStack", DUAL, {"clusterIP": V6, "clusterIPs": [V6], "ipFamilyPolicy": "PreferDualStack"},
     "PreferDualStack", ["IPv6", "IPv4"], None),
    ("headless with selector", DUAL, {"clusterIP": "None", "selector": {"app": "x"}}, "SingleStack", ["IPv4"], ["None"]),
    ("headless selector-less", DUAL, {"clusterIP": "None"}, "RequireDualStack", ["IPv4", "IPv6"], ["None"]),
    ("single-stack: unset", [V4_16], {}, "SingleStack", ["IPv4"], None),
    ("single-stack: PreferDualStack stays single", [V4_16], {"ipFamilyPolicy": "PreferDualStack"}, "PreferDualStack", ["IPv4"], None),
    ("single-stack v6: unset", [V6_112], {}, "SingleStack", ["IPv6"], None),
    ("single-stack: headless selector-less", [V4_16], {"clusterIP": "None"}, "RequireDualStack", ["IPv4", "IPv6"], ["None"]),
]


@pytest.mark.parametrize(("cidrs", "fields", "policy", "families", "cluster_ips"), [row[1:] for row in INIT_IP_FIELDS],
                         ids=[row[0] for row in INIT_IP_FIELDS])
async def test_create_init_ip_fields(cidrs, fields, policy, families, cluster_ips):
    cluster = await Cluster.open(cidrs)
    spec = {"ports": [{"port": 80}], **fields}
    svc = (await cluster.create("foo", spec))["spec"]
    assert svc["ipFamilyPolicy"] == policy
    assert svc["ipFamilies"] == families
    if cluster_ips is not None:
        assert svc["clusterIPs"] == cluster_ips
    assert svc["clusterIP"] == svc["clusterIPs"][0]
    if svc["clusterIPs"] == ["None"]:
        assert await cluster.ip_addresses() == {}
        return
    assert len(svc["clusterIPs"]) == len(families)
    for ip, family in zip(svc["clusterIPs"], families):
        assert ("IPv6" if ":" in ip else "IPv4") == family
        assert any(ipaddress.ip_address(ip) in ipaddress.ip_network(c) for c in cidrs)
    assert set(await cluster.ip_addresses()) == set(svc["clusterIPs"])


MULTIPLE_IPS = ("must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified")

INIT_IP_FIELD_ERRORS = [
    # (id, cluster cidrs, spec fields, exact message or a required fragment)
    #
    # NB: reference §1.6 rule 1 says an unset policy with two clusterIPs (or families) defaults
    # to RequireDualStack; upstream's code it cites (alloc.go@b0d609f0 initIPFamilyFields)
    # defaults an unset policy on create to SingleStack (RequireDualStack only for headless
    # selector-less) and then rejects two IPs / two families. These rows follow the code.
    ("clusterIPs [v4,v6] with policy unset", DUAL, {"clusterIP": V4, "clusterIPs": [V4, V6]},
     f'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": {MULTIPLE_IPS}'),
    ("clusterIPs [v6,v4] families [IPv6] with policy unset", DUAL, {"clusterIP": V6, "clusterIPs": [V6, V4], "ipFamilies": ["IPv6"]},
     f'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": {MULTIPLE_IPS}'),
    ("families [IPv4,IPv6] with policy unset", DUAL, {"ipFamilies": ["IPv4", "IPv6"]},
     'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": '
     "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"),
    ("RequireDualStack on a single-stack cluster", [V4_16], {"ipFamilyPolicy": "RequireDualStack"},
     'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services'),
    ("SingleStack with two clusterIPs", DUAL, {"ipFamilyPolicy": "SingleStack", "clusterIP": V4, "clusterIPs": [V4, V6]},
     'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": '
     "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"),
    ("SingleStack with two families", DUAL, {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4", "IPv6"]},
     'Service "foo" is invalid: spec.ipFamilyPolicy: Invalid value: "SingleStack": '
     "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"),
    ("clusterIPs [v4] families [IPv6,IPv4]", DUAL, {"clusterIP": V4, "clusterIPs": [V4], "ipFamilies": ["IPv6", "IPv4"],
                                                    "ipFamilyPolicy": "RequireDualStack"},
     "expected an IPv6 value as indicated by `ipFamilies[0]`"),
    ("IPv6 family on an IPv4 cluster", [V4_16], {"ipFamilies": ["IPv6"]},
     'Service "foo" is invalid: spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
    ("IPv6 clusterIP on an IPv4 cluster", [V4_16], {"clusterIP": V6, "clusterIPs": [V6]},
     f'Service "foo" is invalid: spec.clusterIPs[0]: Invalid value: ["{V6}"]: IPv6 is not configured on this cluster'),
    ("PreferDualStack IPv6 family on an IPv4 cluster", [V4_16], {"ipFamilies": ["IPv6"], "ipFamilyPolicy": "PreferDualStack"},
     'Service "foo" is invalid: spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
]


@pytest.mark.parametrize(("cidrs", "fields", "message"), [row[1:] for row in INIT_IP_FIELD_ERRORS], ids=[row[0] for row in INIT_IP_FIELD_ERRORS])
async def test_create_init_ip_fields_errors(cidrs, fields, message):
    cluster = await Cluster.open(cidrs)
    error = await raises(422, cluster.create, "foo", {"ports": [{"port": 80}], **fields})
    if message.startswith("Service "):
        assert error.message == message
    else:
        assert message in error.message
    assert await cluster.ip_addresses() == {}
    assert await cluster.service_names() == set()


async def test_dual_stack_secondary_taken_releases_the_primary():
    cluster = await Cluster.open(DUAL)
    await cluster.create("first", {"clusterIP": V6, "clusterIPs": [V6], "ipFamilies": ["IPv6"], "ports": [{"port": 80}]})
    error = await raises(422, cluster.create, "foo", {"clusterIP": V4, "clusterIPs": [V4, V6], "ipFamilyPolicy": "RequireDualStack",
                                                "ports": [{"port": 80}]})
    assert error.message == (f'Service "foo" is invalid: spec.clusterIPs: Invalid value: ["{V4}","{V6}"]: '
                             f"failed to allocate IP {V6}: provided IP is already allocated")
    assert set(await cluster.ip_addresses()) == {V6}
    assert (await cluster.create("v4", single(V4)))["spec"]["clusterIP"] == V4


async def test_upgrade_to_prefer_dual_stack_then_downgrade_releases_the_secondary():
    cluster = await Cluster.open(DUAL)
    v4 = (await cluster.create("s"))["spec"]["clusterIP"]
    upgraded = (await cluster.mutate("s", lambda o: o["spec"].update(ipFamilyPolicy="PreferDualStack")))["spec"]
    assert upgraded["ipFamilies"] == ["IPv4", "IPv6"]
    assert upgraded["clusterIPs"][0] == v4 and len(upgraded["clusterIPs"]) == 2
    v6 = upgraded["clusterIPs"][1]
    assert ipaddress.ip_address(v6) in ipaddress.ip_network(V6_112)
    assert (await cluster.ip_addresses())[v6]["spec"]["parentRef"]["name"] == "s"
    assert (await cluster.get("s"))["spec"]["clusterIPs"] == [v4, v6]

    # downgrade: a PUT with ipFamilyPolicy SingleStack, lists left as they are
    downgraded = (await cluster.put("s", lambda o: o["spec"].update(ipFamilyPolicy="SingleStack")))["spec"]
    assert downgraded["clusterIPs"] == [v4] and downgraded["ipFamilies"] == ["IPv4"]
    assert set(await cluster.ip_addresses()) == {v4}
    # the released IPv6 address is free again
    again = await cluster.create("v6", {"clusterIP": v6, "clusterIPs": [v6], "ipFamilies": ["IPv6"], "ports": [{"port": 80}]})
    assert again["spec"]["clusterIPs"] == [v6]
    await cluster.assert_consistent()


async def test_upgrade_to_require_dual_stack_with_a_chosen_secondary():
    cluster = await Cluster.open(DUAL)
    v4 = (await cluster.create("s"))["spec"]["clusterIP"]
    spec = (await cluster.put("s", lambda o: o["spec"].update(ipFamilyPolicy="RequireDualStack", clusterIPs=[v4, "fd00:10:96::99"])))["spec"]
    assert spec["clusterIPs"] == [v4, "fd00:10:96::99"] and spec["ipFamilies"] == ["IPv4", "IPv6"]
    assert "fd00:10:96::99" in await cluster.ip_addresses()


async def test_downgrade_needs_single_stack():
    cluster = await Cluster.open(DUAL)
    svc = (await cluster.create("s", {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}))["spec"]
    v4, v6 = svc["clusterIPs"]
    error = await raises(422, cluster.put, "s", lambda o: o["spec"].update(clusterIPs=[v4]))
    assert error.message == ('Service "s" is invalid: spec.ipFamilyPolicy: Invalid value: "PreferDualStack": '
                             "must be 'SingleStack' to release the secondary cluster IP")
    assert (await cluster.get("s"))["spec"]["clusterIPs"] == [v4, v6]
    assert set(await cluster.ip_addresses()) == {v4, v6}


async def test_unchanged_prefer_dual_stack_is_not_auto_upgraded_on_update():
    # created as PreferDualStack on a single-stack cluster: an unrelated update keeps it single
    cluster = await Cluster.open([V4_16])
    await cluster.create("s", {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]})
    spec = (await cluster.put("s", lambda o: o["metadata"].setdefault("labels", {}).update(a="b")))["spec"]
    assert spec["ipFamilies"] == ["IPv4"] and len(spec["clusterIPs"]) == 1


# ==== §1.7 headless, ExternalName, type changes ================================================


async def test_headless_allocates_nothing():
    cluster = await Cluster.open([V4_16])
    svc = (await cluster.create("h", {"clusterIP": "None", "selector": {"app": "x"}}))["spec"]
    assert svc["clusterIP"] == "None" and svc["clusterIPs"] == ["None"]
    assert await cluster.ip_addresses() == {}
    await cluster.delete("h")
    assert await cluster.ip_addresses() == {}


async def test_external_name_allocates_nothing():
    cluster = await Cluster.open([V4_16])
    svc = (await cluster.create("e", {"type": "ExternalName", "externalName": "db.example.com"}))["spec"]
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        assert key not in svc
    assert await cluster.ip_addresses() == {}
    assert await cluster.node_port_records() == {}


async def test_cluster_ip_to_external_name_releases_and_wipes():
    cluster = await Cluster.open(DUAL)
    ips = (await cluster.create("s", {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}))["spec"]["clusterIPs"]

    def to_external_name(obj):
        obj["spec"].update(type="ExternalName", externalName="db.example.com")

    spec = (await cluster.put("s", to_external_name))["spec"]
    for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
        assert key not in spec, key
    assert await cluster.ip_addresses() == {}
    # both addresses are free again
    again = await cluster.create("again", {"clusterIP": ips[0], "clusterIPs": ips, "ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]})
    assert again["spec"]["clusterIPs"] == ips


async def test_external_name_to_cluster_ip_allocates():
    cluster = await Cluster.open([V4_16])
    await cluster.create("e", {"type": "ExternalName", "externalName": "db.example.com"})

    def to_cluster_ip(obj):
        obj["spec"]["type"] = "ClusterIP"
        obj["spec"].pop("externalName")
        obj["spec"]["ports"] = [{"port": 80}]

    spec = (await cluster.put("e", to_cluster_ip))["spec"]
    assert spec["ipFamilyPolicy"] == "SingleStack" and spec["ipFamilies"] == ["IPv4"]
    assert ip_int(spec["clusterIP"]) > ip_int("10.96.1.0")
    assert (await cluster.ip_addresses())[spec["clusterIP"]]["spec"]["parentRef"]["name"] == "e"


async def test_node_port_to_external_name_releases_ip_and_node_ports():
    cluster = await Cluster.open([V4_16])
    svc = (await cluster.create("n", node_port_spec({"port": 80, "nodePort": 30080})))["spec"]
    spec = (await cluster.put("n", lambda o: o["spec"].update(type="ExternalName", externalName="x.example.com")))["spec"]
    assert "clusterIP" not in spec and all("nodePort" not in p for p in spec["ports"])
    assert "externalTrafficPolicy" not in spec
    assert svc["clusterIP"] not in await cluster.ip_addresses()
    assert await cluster.node_port_records() == {}


async def test_cluster_ip_is_immutable():
    cluster = await Cluster.open([V4_16])
    ip = (await cluster.create("s", single("10.96.7.7")))["spec"]["clusterIP"]
    error = await raises(422, cluster.put, "s", lambda o: o["spec"].update(clusterIP="10.96.0.50", clusterIPs=["10.96.0.50"]))
    assert error.message == 'Service "s" is invalid: spec.clusterIPs[0]: Invalid value: ["10.96.0.50"]: may not change once set'
    assert (await cluster.get("s"))["spec"]["clusterIPs"] == [ip]
    assert set(await cluster.ip_addresses()) == {ip}
    # the IP it tried to move to was not taken
    assert (await cluster.create("other", single("10.96.0.50")))["spec"]["clusterIP"] == "10.96.0.50"


async def test_put_without_cluster_ip_keeps_the_allocated_one():
    # patchAllocatedValues: a PUT that omits server-allocated values keeps them
    cluster = await Cluster.open([V4_16])
    ip = (await cluster.create("s"))["spec"]["clusterIP"]

    def omit(obj):
        obj["spec"].pop("clusterIP")
        obj["spec"].pop("clusterIPs")

    assert (await cluster.put("s", omit))["spec"]["clusterIPs"] == [ip]
    assert set(await cluster.ip_addresses()) == {ip}


# ==== §2 NodePorts ==============================================================================


async def test_default_range_dynamic_node_ports_are_above_the_static_band():
    cluster = await Cluster.open([V4_16])
    ports = [(await cluster.create(f"n{i}", node_port_spec()))["spec"]["ports"][0]["nodePort"] for i in range(60)]
    assert len(set(ports)) == 60
    assert all(30086 <= p <= 32767 for p in ports)
    assert set(await cluster.node_port_records()) == set(ports)


async def test_small_node_port_range_upper_band_then_lower_then_full():
    # 30000-30063: size 64, offset min(max(16, 64/32), 128) = 16
    cluster = await Cluster.open([V4_16], node_ports="30000-30063")
    upper = {(await cluster.create(f"u{i}", node_port_spec()))["spec"]["ports"][0]["nodePort"] for i in range(48)}
    assert upper == set(range(30016, 30064))
    lower = {(await cluster.create(f"l{i}", node_port_spec()))["spec"]["ports"][0]["nodePort"] for i in range(16)}
    assert lower == set(range(30000, 30016))
    before = set(await cluster.ip_addresses())
    error = await raises(500, cluster.create, "full", node_port_spec())
    assert error.message == PORTS_FULL
    # the clusterIP taken before the nodePort step failed was not kept
    assert set(await cluster.ip_addresses()) == before
    assert "full" not in await cluster.service_names()
    await cluster.assert_consistent()


async def test_static_node_port_is_free_while_dynamic_band_fills():
    cluster = await Cluster.open([V4_16], node_ports="30000-30063")
    for i in range(48):
        await cluster.create(f"u{i}", node_port_spec())
    svc = await cluster.create("static", node_port_spec({"port": 80, "nodePort": 30005}))
    assert svc["spec"]["ports"][0]["nodePort"] == 30005


NODE_PORT_ERRORS = [
    # (id, ports of the second Service, message) -- §2 error table
    ("already allocated", [{"port": 80, "nodePort": 30001}],
     'Service "foo" is invalid: spec.ports[0].nodePort: Invalid value: 30001: provided port is already allocated'),
    ("already allocated, second port", [{"name": "a", "port": 80, "nodePort": 30002}, {"name": "b", "port": 81, "nodePort": 30001}],
     'Service "foo" is invalid: spec.ports[1].nodePort: Invalid value: 30001: provided port is already allocated'),
    ("below the range", [{"port": 80, "nodePort": 29999}],
     'Service "foo" is invalid: spec.ports[0].nodePort: Invalid value: 29999: '
     "provided port is not in the valid range. The range of valid ports is 30000-32767"),
    ("above the range", [{"port": 80, "nodePort": 32768}],
     'Service "foo" is invalid: spec.ports[0].nodePort: Invalid value: 32768: '
     "provided port is not in the valid range. The range of valid ports is 30000-32767"),
]


@pytest.mark.parametrize(("ports", "message"), [row[1:] for row in NODE_PORT_ERRORS], ids=[row[0] for row in NODE_PORT_ERRORS])
async def test_explicit_node_port_errors(ports, message):
    cluster = await Cluster.open([V4_16])
    await cluster.create("first", node_port_spec({"port": 80, "nodePort": 30001}))
    ips_before, records_before = set(await cluster.ip_addresses()), await cluster.node_port_records()
    error = await raises(422, cluster.create, "foo", node_port_spec(*ports))
    assert error.message == message
    assert set(await cluster.ip_addresses()) == ips_before
    assert await cluster.node_port_records() == records_before  # 30002 of the second row was not kept


SHARED_NODE_PORTS = [
    # (id, ports, expected shared nodePort or None for "any")
    ("TCP+UDP 53 allocated", [{"name": "dns-tcp", "port": 53}, {"name": "dns", "port": 53, "protocol": "UDP"}], None),
    ("TCP+UDP 53, user value on the second", [{"name": "dns-tcp", "port": 53}, {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}], 30053),
    ("TCP+UDP 53, user value on the first", [{"name": "dns-tcp", "port": 53, "nodePort": 30053}, {"name": "dns", "port": 53, "protocol": "UDP"}], 30053),
    ("TCP+SCTP 9000", [{"name": "t", "port": 9000}, {"name": "s", "port": 9000, "protocol": "SCTP"}], None),
]


@pytest.mark.parametrize(("ports", "shared"), [row[1:] for row in SHARED_NODE_PORTS], ids=[row[0] for row in SHARED_NODE_PORTS])
async def test_same_port_number_shares_one_node_port(ports, shared):
    cluster = await Cluster.open([V4_16])
    got = (await cluster.create("dns", node_port_spec(*ports)))["spec"]["ports"]
    node_ports = {p["nodePort"] for p in got}
    assert len(node_ports) == 1
    if shared is not None:
        assert node_ports == {shared}
    assert await cluster.node_port_records() == {node_ports.pop(): ("default", "dns")}


async def test_node_ports_released_on_delete():
    cluster = await Cluster.open([V4_16])
    svc = await cluster.create("n", node_port_spec({"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81}))
    ports = {p["nodePort"] for p in svc["spec"]["ports"]}
    assert set(await cluster.node_port_records()) == ports
    await cluster.delete("n")
    assert await cluster.node_port_records() == {}
    assert await cluster.ip_addresses() == {}
    again = await cluster.create("again", node_port_spec(*[{"name": n, "port": 80 + i, "nodePort": p} for i, (n, p) in enumerate(zip("ab", sorted(ports)))]))
    assert {p["nodePort"] for p in again["spec"]["ports"]} == ports


async def test_cluster_ip_to_node_port_allocates():
    cluster = await Cluster.open([V4_16])
    await cluster.create("s")
    spec = (await cluster.put("s", lambda o: o["spec"].update(type="NodePort")))["spec"]
    port = spec["ports"][0]["nodePort"]
    assert 30086 <= port <= 32767
    assert spec["externalTrafficPolicy"] == "Cluster"
    assert await cluster.node_port_records() == {port: ("default", "s")}


NODE_PORT_TO_CLUSTER_IP = [
    # (id, change to the ports list besides the type) -- strategy.go sameNodePorts: the old set
    # of nodePorts must be a superset of the new one for them to be wiped
    ("ports untouched", lambda ports: None),
    ("nodePorts omitted", lambda ports: [p.pop("nodePort") for p in ports]),
    ("a port removed", lambda ports: ports.pop(1)),
    ("a port added", lambda ports: ports.append({"name": "c", "port": 82})),
]


@pytest.mark.parametrize("change", [row[1] for row in NODE_PORT_TO_CLUSTER_IP], ids=[row[0] for row in NODE_PORT_TO_CLUSTER_IP])
async def test_node_port_to_cluster_ip_releases_and_wipes(change):
    cluster = await Cluster.open([V4_16])
    svc = await cluster.create("n", node_port_spec({"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81}))
    ports = {p["nodePort"] for p in svc["spec"]["ports"]}

    def to_cluster_ip(obj):
        obj["spec"]["type"] = "ClusterIP"
        change(obj["spec"]["ports"])

    spec = (await cluster.put("n", to_cluster_ip))["spec"]
    assert all("nodePort" not in p for p in spec["ports"])
    assert "externalTrafficPolicy" not in spec
    assert await cluster.node_port_records() == {}
    # the released ports can be taken explicitly again
    for i, port in enumerate(sorted(ports)):
        await cluster.create(f"again{i}", node_port_spec({"port": 80, "nodePort": port}))


async def test_node_port_to_cluster_ip_with_a_new_node_port_is_rejected():
    cluster = await Cluster.open([V4_16])
    await cluster.create("n", node_port_spec({"port": 80, "nodePort": 30001}))

    def to_cluster_ip(obj):
        obj["spec"]["type"] = "ClusterIP"
        obj["spec"]["ports"][0]["nodePort"] = 30002

    error = await raises(422, cluster.put, "n", to_cluster_ip)
    assert error.message == 'Service "n" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is \'ClusterIP\''
    assert await cluster.node_port_records() == {30001: ("default", "n")}


async def test_node_port_collision_through_update():
    cluster = await Cluster.open([V4_16])
    await cluster.create("a", node_port_spec({"port": 80, "nodePort": 30001}))
    own = (await cluster.create("b", node_port_spec()))["spec"]["ports"][0]["nodePort"]

    def take(obj):
        obj["spec"]["ports"][0]["nodePort"] = 30001

    error = await raises(422, cluster.put, "b", take)
    assert error.message == 'Service "b" is invalid: spec.ports[0].nodePort: Invalid value: 30001: provided port is already allocated'
    assert (await cluster.get("b"))["spec"]["ports"][0]["nodePort"] == own
    assert await cluster.node_port_records() == {30001: ("default", "a"), own: ("default", "b")}


async def test_node_port_change_through_update_moves_the_record():
    cluster = await Cluster.open([V4_16])
    await cluster.create("b", node_port_spec({"port": 80, "nodePort": 30001}))
    spec = (await cluster.put("b", lambda o: o["spec"]["ports"][0].update(nodePort=30002)))["spec"]
    assert spec["ports"][0]["nodePort"] == 30002
    assert await cluster.node_port_records() == {30002: ("default", "b")}
    await cluster.create("c", node_port_spec({"port": 80, "nodePort": 30001}))


async def test_put_without_node_ports_keeps_them():
    cluster = await Cluster.open([V4_16])
    port = (await cluster.create("n", node_port_spec()))["spec"]["ports"][0]["nodePort"]
    spec = (await cluster.put("n", lambda o: o["spec"]["ports"][0].pop("nodePort")))["spec"]
    assert spec["ports"][0]["nodePort"] == port
    assert await cluster.node_port_records() == {port: ("default", "n")}


def lb(**extra) -> dict:
    return {"type": "LoadBalancer", "ports": [{"port": 80}], **extra}


async def test_health_check_node_port_for_load_balancer_local():
    cluster = await Cluster.open([V4_16])
    spec = (await cluster.create("lb", lb(externalTrafficPolicy="Local")))["spec"]
    hc, port = spec["healthCheckNodePort"], spec["ports"][0]["nodePort"]
    assert hc != port and 30086 <= hc <= 32767
    assert await cluster.node_port_records() == {hc: ("default", "lb"), port: ("default", "lb")}
    # switching to Cluster releases and wipes it
    spec = (await cluster.put("lb", lambda o: o["spec"].update(externalTrafficPolicy="Cluster")))["spec"]
    assert "healthCheckNodePort" not in spec
    assert await cluster.node_port_records() == {port: ("default", "lb")}
    await cluster.create("reuse", node_port_spec({"port": 80, "nodePort": hc}))


async def test_health_check_node_port_allocated_when_switching_to_local():
    cluster = await Cluster.open([V4_16])
    await cluster.create("lb", lb())
    spec = (await cluster.put("lb", lambda o: o["spec"].update(externalTrafficPolicy="Local")))["spec"]
    assert spec["healthCheckNodePort"] in await cluster.node_port_records()


async def test_user_chosen_health_check_node_port():
    cluster = await Cluster.open([V4_16])
    spec = (await cluster.create("lb", lb(externalTrafficPolicy="Local", healthCheckNodePort=30100)))["spec"]
    assert spec["healthCheckNodePort"] == 30100
    assert (await cluster.node_port_records())[30100] == ("default", "lb")
    await cluster.delete("lb")
    assert await cluster.node_port_records() == {}


@pytest.mark.parametrize("extra", [{}, {"externalTrafficPolicy": "Cluster"}], ids=["default-policy", "Cluster"])
async def test_no_health_check_node_port_without_local(extra):
    cluster = await Cluster.open([V4_16])
    spec = (await cluster.create("lb", lb(**extra)))["spec"]
    assert "healthCheckNodePort" not in spec
    assert len(await cluster.node_port_records()) == 1


async def test_load_balancer_to_cluster_ip_releases_everything_node_port():
    cluster = await Cluster.open([V4_16])
    await cluster.create("lb", lb(externalTrafficPolicy="Local"))
    spec = (await cluster.put("lb", lambda o: o["spec"].update(type="ClusterIP")))["spec"]
    for key in ("healthCheckNodePort", "externalTrafficPolicy", "allocateLoadBalancerNodePorts"):
        assert key not in spec, key
    assert all("nodePort" not in p for p in spec["ports"])
    assert await cluster.node_port_records() == {}


async def test_allocate_load_balancer_node_ports_false():
    cluster = await Cluster.open([V4_16])
    spec = (await cluster.create("lb", lb(allocateLoadBalancerNodePorts=False)))["spec"]
    assert all("nodePort" not in p for p in spec["ports"])
    assert await cluster.node_port_records() == {}
    # a user-given one is still allocated
    spec = (await cluster.create("lb2", lb(allocateLoadBalancerNodePorts=False, ports=[{"port": 80, "nodePort": 30007}])))["spec"]
    assert spec["ports"][0]["nodePort"] == 30007
    assert await cluster.node_port_records() == {30007: ("default", "lb2")}


# ==== atomicity: failed and dry-run writes allocate nothing ====================================

BAD_PORT_NAME = "Bad_Name"


async def test_create_failing_validation_after_allocation_leaves_nothing():
    cluster = await Cluster.open([V4_16])
    spec = node_port_spec({"name": BAD_PORT_NAME, "port": 80, "nodePort": 30050}, clusterIP="10.96.0.50", clusterIPs=["10.96.0.50"])
    error = await raises(422, cluster.create, "bad", spec)
    assert error.message.startswith('Service "bad" is invalid: spec.ports[0].name: Invalid value: "Bad_Name"')
    assert await cluster.ip_addresses() == {}
    assert await cluster.node_port_records() == {}
    spec["ports"][0]["name"] = "good"
    svc = (await cluster.create("bad", spec))["spec"]
    assert svc["clusterIP"] == "10.96.0.50" and svc["ports"][0]["nodePort"] == 30050


async def test_failed_dynamic_creates_do_not_leak_from_the_index():
    # /29: 6 addresses, offset 0. Six creates failing validation, then six good ones fit.
    cluster = await Cluster.open(["10.96.0.0/29"], node_ports="30000-30005")
    for i in range(6):
        await raises(422, cluster.create, f"bad{i}", node_port_spec({"name": BAD_PORT_NAME, "port": 80}))
    assert await cluster.ip_addresses() == {} and await cluster.node_port_records() == {}
    got = {(await cluster.create(f"good{i}", node_port_spec()))["spec"]["clusterIP"] for i in range(6)}
    assert got == ip_set("10.96.0.1", "10.96.0.6")
    assert set(await cluster.node_port_records()) == set(range(30000, 30006))


async def test_dry_run_create_allocates_nothing():
    cluster = await Cluster.open(DUAL)
    spec = node_port_spec({"port": 80, "nodePort": 30050}, clusterIP="10.96.0.50", clusterIPs=["10.96.0.50"],
                          ipFamilyPolicy="PreferDualStack")
    dry = (await cluster.create("dry", spec, dry_run=True))["spec"]
    assert dry["clusterIPs"][0] == "10.96.0.50" and len(dry["clusterIPs"]) == 2
    assert dry["ports"][0]["nodePort"] == 30050
    assert await cluster.ip_addresses() == {} and await cluster.node_port_records() == {}
    assert await cluster.service_names() == set()
    real = (await cluster.create("dry", spec))["spec"]
    assert real["clusterIPs"][0] == "10.96.0.50" and real["ports"][0]["nodePort"] == 30050


async def test_dry_run_dynamic_creates_do_not_fill_the_range():
    cluster = await Cluster.open(["10.96.0.0/29"])
    for i in range(20):
        await cluster.create(f"dry{i}", dry_run=True)
    assert {(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(6)} == ip_set("10.96.0.1", "10.96.0.6")


async def test_dry_run_update_allocates_nothing():
    cluster = await Cluster.open(DUAL)
    before = await cluster.create("s")
    dry = (await cluster.put("s", lambda o: o["spec"].update(type="NodePort", ipFamilyPolicy="PreferDualStack"), dry_run=True))["spec"]
    assert dry["ports"][0].get("nodePort") and len(dry["clusterIPs"]) == 2
    assert await cluster.get("s") == before
    assert set(await cluster.ip_addresses()) == set(before["spec"]["clusterIPs"])
    assert await cluster.node_port_records() == {}


async def test_failed_update_allocates_nothing():
    cluster = await Cluster.open(DUAL)
    await cluster.create("s")

    def upgrade_with_bad_port(obj):
        obj["spec"].update(type="NodePort", ipFamilyPolicy="PreferDualStack")
        obj["spec"]["ports"][0]["name"] = BAD_PORT_NAME

    await raises(422, cluster.put, "s", upgrade_with_bad_port)
    assert len(await cluster.ip_addresses()) == 1
    assert await cluster.node_port_records() == {}
    await cluster.assert_consistent()


# ==== a stale index: records in storage that the allocator does not know about ================


async def test_stale_index_last_free_ip_planted_gives_range_full():
    cluster = await Cluster.open(["10.96.0.0/29"])  # 6 slots, all dynamic
    taken = {(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(5)}
    (last,) = ip_set("10.96.0.1", "10.96.0.6") - taken
    await cluster.plant_ip_address(last)
    error = await raises(500, cluster.create, "late")
    assert error.message == FULL
    assert "late" not in await cluster.service_names()
    assert (await cluster.ip_addresses())[last]["spec"]["parentRef"]["name"] == "ghost"
    await cluster.assert_consistent()
    # and the index now knows: still full, no retry storm
    assert (await raises(500, cluster.create, "later")).message == FULL


async def test_stale_index_planted_ip_is_skipped_for_a_free_one():
    cluster = await Cluster.open(["10.96.0.0/29"])
    taken = {(await cluster.create(f"s{i}"))["spec"]["clusterIP"] for i in range(4)}
    free = sorted(ip_set("10.96.0.1", "10.96.0.6") - taken, key=ip_int)
    await cluster.plant_ip_address(free[0])
    got = (await cluster.create("next"))["spec"]["clusterIP"]
    # whichever the allocator tried first, the planted one is never handed out
    assert got == free[1]
    assert (await raises(500, cluster.create, "full")).message == FULL
    assert (await cluster.ip_addresses())[free[0]]["spec"]["parentRef"]["name"] == "ghost"
    await cluster.assert_consistent()


async def test_stale_index_user_chosen_ip_planted():
    cluster = await Cluster.open([V4_16])
    await cluster.plant_ip_address("10.96.0.5")
    error = await raises(422, cluster.create, "foo", single("10.96.0.5"))
    assert error.message == ('Service "foo" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.5"]: '
                             "failed to allocate IP 10.96.0.5: provided IP is already allocated")
    assert (await cluster.ip_addresses())["10.96.0.5"]["spec"]["parentRef"]["name"] == "ghost"
    assert await cluster.service_names() == set()


async def test_stale_index_user_chosen_node_port_planted():
    cluster = await Cluster.open([V4_16])
    await cluster.plant_node_port(30001)
    error = await raises(422, cluster.create, "foo", node_port_spec({"port": 80, "nodePort": 30001}))
    assert error.message == 'Service "foo" is invalid: spec.ports[0].nodePort: Invalid value: 30001: provided port is already allocated'
    assert await cluster.node_port_records() == {30001: ("default", "ghost")}
    assert await cluster.ip_addresses() == {}


async def test_stale_index_last_free_node_port_planted_gives_range_full():
    cluster = await Cluster.open([V4_16], node_ports="30000-30015")  # size 16: offset 0
    taken = {(await cluster.create(f"s{i}", node_port_spec()))["spec"]["ports"][0]["nodePort"] for i in range(15)}
    (last,) = set(range(30000, 30016)) - taken
    await cluster.plant_node_port(last)
    error = await raises(500, cluster.create, "late", node_port_spec())
    assert error.message == PORTS_FULL
    assert (await cluster.node_port_records())[last] == ("default", "ghost")
    assert len(await cluster.ip_addresses()) == 15
    await cluster.assert_consistent()


class Spinning(Exception):
    pass


def limit_storage_transactions(cluster: Cluster, limit: int) -> None:
    """Fail fast instead of hanging if a write retries without end."""
    txn, calls = cluster.backend.txn, []

    def limited(ops):
        calls.append(1)
        if len(calls) > limit:
            raise Spinning(f"more than {limit} storage transactions")
        return txn(ops)

    cluster.backend.txn = limited


async def test_stale_index_during_dual_stack_upgrade():
    # every IPv6 address planted behind the index: the upgrade retries (at most once per
    # address), then reports full
    cluster = await Cluster.open(["10.96.0.0/24", "fd00:10:96::/125"])  # 7 IPv6 slots, offset 0
    v4 = (await cluster.create("s"))["spec"]["clusterIP"]
    for ip in ip_set("fd00:10:96::1", "fd00:10:96::7"):
        await cluster.plant_ip_address(ip)
    limit_storage_transactions(cluster, 50)
    error = await raises(500, cluster.mutate, "s", lambda o: o["spec"].update(ipFamilyPolicy="PreferDualStack"))
    assert error.message == FULL
    assert (await cluster.get("s"))["spec"]["clusterIPs"] == [v4]
    assert all(o["spec"]["parentRef"]["name"] == "ghost" for ip, o in (await cluster.ip_addresses()).items() if ip != v4)


async def test_stale_index_whole_ip_range_planted_gives_range_full():
    cluster = await Cluster.open(["10.96.0.0/28"])  # 14 slots, offset 0: 14 conflicts before the index knows
    for ip in ip_set("10.96.0.1", "10.96.0.14"):
        await cluster.plant_ip_address(ip)
    error = await raises(500, cluster.create, "late")
    assert error.message == FULL


async def test_stale_index_whole_node_port_range_planted_gives_range_full():
    cluster = await Cluster.open([V4_16], node_ports="30000-30015")
    for port in range(30000, 30016):
        await cluster.plant_node_port(port)
    error = await raises(500, cluster.create, "late", node_port_spec())
    assert error.message == PORTS_FULL
    assert await cluster.ip_addresses() == {}
