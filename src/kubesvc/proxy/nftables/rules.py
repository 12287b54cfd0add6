"""nftables mode, the pure half: desired state + what the kernel holds → one ``nft -f``
transaction, and the bookkeeping that lets the next sync touch only what changed.

How a packet meets a Service (table ``ip kube-proxy``; ``ip6`` for the IPv6 proxier)
====================================================================================

Upstream's fixed layout (``pkg/proxy/nftables/proxier.go``, ``setupNFTables``), unchanged::

  filter-prerouting-pre-dnat / filter-output-pre-dnat (filter, -110): ct state new → firewall-check
      firewall-check: daddr . proto . dport vmap @firewall-ips → firewall-<svc>: saddr != {ranges} drop
  nat-prerouting / nat-output (nat, -100) → services:
      daddr . proto . dport vmap @service-ips          (ClusterIP → service-/local-, extIP/LB → external-)
      NodePort: (fib daddr type local, not loopback | daddr @nodeport-ips) proto . dport vmap @service-nodeports
  filter-input / filter-forward / filter-output (filter, 0), ct state new:
      service-endpoints-check: daddr . proto . dport vmap @no-endpoint-services  (goto reject-chain | drop)
      nodeport-endpoints-check (input): the same for @no-endpoint-nodeports
      cluster-ips-check (forward, output): daddr @cluster-ips reject; daddr {service CIDRs} drop
  nat-postrouting (nat, 100) → masquerading: marked packets get ``masquerade fully-random``

A Service lookup is one concatenated-key vmap lookup whatever the number of Services.

Our own per-Service layout (why it differs from upstream)
---------------------------------------------------------
Upstream gives every endpoint a chain (``endpoint-…``: hairpin mark, affinity update, DNAT) and
every service chain an anonymous ``numgen`` vmap onto them. At 5k Services × 50 endpoints that
is 250k chains: ``nft`` needs 222 s and 2.4 GB for the transaction. Worse for partial syncs:
``nft`` reads every chain and set of the family into its cache before adding one rule or
element (~1.7 ms per 1000 chains, ~3.5 ms per 1000 sets, anonymous ones included), so a
one-endpoint change at 10k Services must not face 10k anonymous maps. Hence:

* **No endpoint chains, no per-Service sets.** A policy chain (``service-…`` for Cluster,
  ``local-…`` for Local) with one endpoint DNATs directly (``meta l4proto tcp dnat to
  10.0.0.1:80``); with 2 ≤ N ≤ 16 it holds one rule ``meta l4proto tcp dnat ip addr . port to
  numgen random mod 1048576 offset S map @endpoint-ranges-XX``: shared interval maps from
  numbers to ``address . port``, where each chain owns a fixed block [S, S+2^20) in the map its
  name hashes to (``endpoint_range_map``), split into one range per endpoint. The rule does not
  depend on N, so an endpoint added, removed or replaced changes map elements only, one netlink
  batch: a rewritten rule would make the kernel validate every chain of the table at commit
  (~20-30 ms at 10k Services; see ``RANGE_BLOCK``). With N > 16 the rule is ``numgen random mod
  N offset S map @endpoints-XX``, exact *slot* maps with a block of slots [S, S+capacity)
  (``endpoint_map``; power-of-two blocks, reused while the count fits): one element per
  endpoint where a range takes two, and a changed count rewrites the rule. The maps are sharded (256) because the kernel
  checks each element of a map against each rule bound to it: one map used by 5k chains with
  250k slots took 22 s to load, 256 shards take well under a second. (Anonymous per-rule maps,
  as upstream, would be just as fast to load but each is a set in ``nft``'s cache.)
* **Hairpin** (a Pod reaching itself through its Service must be masqueraded, or it answers
  itself directly): upstream marks in each endpoint chain ``ip saddr <ep> jump
  mark-for-masquerade``. Here ``masquerading`` starts with ``ct status dnat ip saddr . ip daddr
  @hairpin-endpoints jump mark-for-masquerade``: the set holds ``ip . ip`` for every endpoint
  address, so a DNATed packet whose source equals its new destination is masqueraded.
  (nftables cannot compare two packet fields directly; the pair set does it in one lookup.)
* **ClientIP affinity** keeps upstream's per-endpoint sets ``affinity-<endpoint>`` (type addr,
  flags dynamic,timeout, timeout = stickyMaxAgeSeconds), but without endpoint chains: the
  policy chain has per endpoint ``ip saddr @affinity-X update @affinity-X { ip saddr } meta
  l4proto tcp dnat to <ep>`` (a sticky client, refreshed as upstream's ``update`` does), then the
  random choice written as rules ``numgen random mod (N-i) 0 update @affinity-X_i { ip saddr }
  … dnat to <ep_i>`` (rule i wins with probability 1/(N-i) among the rest: uniform overall),
  the last rule unconditional. A removed endpoint's rule and set disappear together, so a
  client stuck to it simply picks again. (nft 1.0.6 cannot look up a concatenation that
  contains constants, e.g. ``ip saddr . 10.0.0.1 . 80 @set``, which rules out one set per
  Service keyed by client and endpoint.)

Partial syncs (upstream NFT "partial sync")
-------------------------------------------
A full sync re-creates every fixed chain, rule and container and reconciles every element of
every set/map against the kernel's actual content (listed by the caller into a
``KernelSnapshot``); into endpoint maps and the hairpin set that hold nothing yet its
additions are marked ``early`` (``kernel.nftables.Transaction``): nothing reads those keys
before the transaction lands, so the kernel layer may send them ahead as one netlink batch,
which at 5k Services × 50 spares ``nft`` parsing 500k elements. Into a table that holds
nothing of ours at all (a new one) every element addition goes *after* the rest of the text
instead, in one batch (``Transaction.after``, see AFTER below): maps bound by rules while
still empty spare the kernel a walk of their elements per binding. Then ``NftState``
remembers, per Service, what it rendered: its chains with their rules, its elements (a slot
map's as blocks of endpoints, ``Slots``), its affinity sets, its slot blocks, its no-local
counts. A partial sync renders only ``request.changed_services`` (unchanged ones are not even
categorized), flushes and rewrites their chains, and adds/deletes only the elements whose
owners changed; a reused slot block keeps each remaining endpoint in its slot. Elements are
owned by Services (two ports of one Service share their ClusterIP element; a Pod IP behind
two Services shares a hairpin element) and leave the kernel when their last owner does; an
endpoint map's keys each lie in one chain's block, so those need no owner records
(``EXCLUSIVE_CONTAINERS``). Chains no Service uses any more are flushed now and deleted by the
caller in a later, separate transaction (kernels before 6.2 need a moment to notice a chain is
no longer referenced by a map element); stale affinity sets are deleted at once.

``build_sync`` is pure: it leaves the ``NftState`` it is given alone and returns, beside the
transaction, the ``next_state`` after it, which the shared proxier commits only once ``nft``
accepted the transaction (a failed one leaves the previous state, and the next sync is full).
A full sync builds its next state from scratch (the snapshot). A partial one is proportional
to what changed: its next state keeps the previous state's dicts and records its own changes
beside them (``Overlay``); they are folded in when that state, committed, is planned from again.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from kubesvc.kernel.nftables import Transaction
from kubesvc.kernel.nftables_elements import Joined, Slots
from kubesvc.proxy.backend import KernelPlan, ProxyOptions, SyncRequest
from kubesvc.proxy.nftables.naming import (
    AFFINITY_PREFIX,
    CLUSTER_POLICY_PREFIX,
    EXTERNAL_PREFIX,
    FIREWALL_PREFIX,
    LOCAL_POLICY_PREFIX,
    endpoint_name_base,
    is_affinity_set_name,
    is_service_chain_name,
    service_port_chain_name_base,
)
from kubesvc.proxy.topology import categorize_endpoints
from kubesvc.proxy.types import IPV6, Endpoint, ServicePort, ServicePortName

TABLE = "kube-proxy"
TABLE_COMMENT = "rules for kube-proxy"

# base chains: name, type, hook, priority (dstnat-10, filter, dstnat, srcnat)
BASE_CHAINS: tuple[tuple[str, str, str, int], ...] = (
    ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
    ("filter-output-pre-dnat", "filter", "output", -110),
    ("filter-input", "filter", "input", 0),
    ("filter-forward", "filter", "forward", 0),
    ("filter-output", "filter", "output", 0),
    ("nat-prerouting", "nat", "prerouting", -100),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
)

SERVICES_CHAIN = "services"
# Chains every sync leaves non-empty; the interference monitor checks them (proxier.py).
WATCHED_CHAINS = ("nat-prerouting", SERVICES_CHAIN)
SERVICE_ENDPOINTS_CHECK_CHAIN = "service-endpoints-check"
NODEPORT_ENDPOINTS_CHECK_CHAIN = "nodeport-endpoints-check"
FIREWALL_CHECK_CHAIN = "firewall-check"
REJECT_CHAIN = "reject-chain"
CLUSTER_IPS_CHECK_CHAIN = "cluster-ips-check"
MARK_MASQ_CHAIN = "mark-for-masquerade"
MASQUERADING_CHAIN = "masquerading"

# (source base chain, match, destination): upstream nftablesJumpChains
JUMP_CHAINS: tuple[tuple[str, str, str], ...] = (
    ("filter-input", "ct state new", NODEPORT_ENDPOINTS_CHECK_CHAIN),
    ("filter-input", "ct state new", SERVICE_ENDPOINTS_CHECK_CHAIN),
    ("filter-forward", "ct state new", SERVICE_ENDPOINTS_CHECK_CHAIN),
    ("filter-output", "ct state new", SERVICE_ENDPOINTS_CHECK_CHAIN),
    ("filter-prerouting-pre-dnat", "ct state new", FIREWALL_CHECK_CHAIN),
    ("filter-output-pre-dnat", "ct state new", FIREWALL_CHECK_CHAIN),
    ("nat-output", "", SERVICES_CHAIN),
    ("nat-prerouting", "", SERVICES_CHAIN),
    ("nat-postrouting", "", MASQUERADING_CHAIN),
    ("filter-forward", "ct state new", CLUSTER_IPS_CHECK_CHAIN),
    ("filter-output", "ct state new", CLUSTER_IPS_CHECK_CHAIN),
)

FIXED_CHAINS: tuple[str, ...] = (
    NODEPORT_ENDPOINTS_CHECK_CHAIN, SERVICE_ENDPOINTS_CHECK_CHAIN, FIREWALL_CHECK_CHAIN, SERVICES_CHAIN,
    MASQUERADING_CHAIN, CLUSTER_IPS_CHECK_CHAIN, MARK_MASQ_CHAIN, REJECT_CHAIN,
)
ALL_FIXED_CHAINS = frozenset(name for name, *_ in BASE_CHAINS) | frozenset(FIXED_CHAINS)

# sets and maps
CLUSTER_IPS = "cluster-ips"
NODEPORT_IPS = "nodeport-ips"
SERVICE_IPS = "service-ips"
SERVICE_NODEPORTS = "service-nodeports"
NO_ENDPOINT_SERVICES = "no-endpoint-services"
NO_ENDPOINT_NODEPORTS = "no-endpoint-nodeports"
FIREWALL_IPS = "firewall-ips"
HAIRPIN_ENDPOINTS = "hairpin-endpoints"  # ours: endpoint address . same address

# ours: slot → endpoint address . port, in shards. The kernel checks every element of a map
# against every rule bound to it (on each new element and each new binding), so one map used
# by every service chain is quadratic: 22 s for 250k slots × 5k chains. A chain's shard is
# fixed by its name; 256 shards make that cost negligible while adding ~1 ms to nft's cache.
# The maps are per protocol because nft 1.0.6 cannot use a map declared with ``th dport``
# data once it is in the kernel ("conflicting protocols specified: tcp vs. th"); TCP, the
# common case, gets 256 shards, UDP and SCTP 16 each.
ENDPOINT_MAP_SHARDS = {"tcp": 256, "udp": 16, "sctp": 16}
ENDPOINT_MAP_PREFIX = "endpoints-"


def _endpoint_map_name(proto: str, shard: int) -> str:
    return f"{ENDPOINT_MAP_PREFIX}{shard:02x}" if proto == "tcp" else f"{ENDPOINT_MAP_PREFIX}{proto}-{shard:02x}"


def endpoint_map(chain: str, proto: str = "tcp") -> str:
    """The map holding ``chain``'s endpoint slots: fixed by the chain's name."""
    return _endpoint_map_name(proto, zlib.crc32(chain.encode()) % ENDPOINT_MAP_SHARDS[proto])


# ours: the same, as ranges (``flags interval``), for chains of 2..RANGE_MAX_ENDPOINTS
# endpoints. Each such chain owns a fixed block of RANGE_BLOCK numbers, whatever its count:
# ``numgen random mod RANGE_BLOCK offset S`` and one range per endpoint, so an endpoint added or
# removed changes elements only, never the rule. Any rule the kernel receives whose
# expressions can be validated (nat, lookup, meta, immediate, ...) marks the table for
# validation at commit, a walk of every chain reachable from the base chains: ~20-30 ms at
# 10k Services whatever the batch (the same one-rule batch without such an expression takes
# 0.13 ms). Elements of a non-verdict map do not. Ranges are split as evenly as integers
# allow: endpoint shares differ by at most one number in RANGE_BLOCK / N (under 2e-5 for
# N <= 16). Larger counts keep the exact slot maps above: each range is two kernel elements
# (start, and end flagged), which at 50 endpoints per Service would double the endpoint
# elements of a full sync for little gain.
RANGE_BLOCK = 1 << 20
RANGE_MAX_ENDPOINTS = 16
RANGE_MAP_PREFIX = "endpoint-ranges-"


def _range_map_name(proto: str, shard: int) -> str:
    return f"{RANGE_MAP_PREFIX}{shard:02x}" if proto == "tcp" else f"{RANGE_MAP_PREFIX}{proto}-{shard:02x}"


def endpoint_range_map(chain: str, proto: str = "tcp") -> str:
    """The interval map holding ``chain``'s endpoint ranges: fixed by the chain's name."""
    return _range_map_name(proto, zlib.crc32(chain.encode()) % ENDPOINT_MAP_SHARDS[proto])


RANGE_MAPS = frozenset(_range_map_name(proto, k) for proto, shards in ENDPOINT_MAP_SHARDS.items() for k in range(shards))

# every endpoint map (slots and ranges), with its protocol
ENDPOINT_MAP_PROTOCOLS = {name(proto, k): proto for name in (_endpoint_map_name, _range_map_name)
                          for proto, shards in ENDPOINT_MAP_SHARDS.items() for k in range(shards)}
ENDPOINT_MAPS = tuple(ENDPOINT_MAP_PROTOCOLS)
# Every key of an endpoint map lies in one chain's block, so it has one owner (that chain's
# Service) and, once a sync is committed, the kernel holds exactly what the renders hold. They
# get no per-key bookkeeping (``NftState.kernel``/``owners`` stay empty for them): a full sync
# compares the snapshot with the renders, a partial one the changed Services' old renders with
# their new ones. At 5k Services × 50 that is 250k keys not entered in two more dicts.
EXCLUSIVE_CONTAINERS = frozenset(ENDPOINT_MAPS)


def endpoint_map_spec(name: str, proto: str, ipx: str) -> str:
    """The declaration of endpoint map ``name``."""
    flags = " flags interval ;" if name in RANGE_MAPS else ""
    return f"{{ typeof numgen random mod 1 : {ipx} daddr . {proto} dport ;{flags} }}"

# containers whose elements are reconciled (kind "set" / "map"), in transaction order
CONTAINERS: dict[str, str] = {
    CLUSTER_IPS: "set",
    SERVICE_IPS: "map",
    SERVICE_NODEPORTS: "map",
    NO_ENDPOINT_SERVICES: "map",
    NO_ENDPOINT_NODEPORTS: "map",
    FIREWALL_IPS: "map",
    HAIRPIN_ENDPOINTS: "set",
    **{name: "map" for name in ENDPOINT_MAPS},
}

SLOT_SPACE = 1 << 32  # numgen yields u32

# Containers a full sync may fill ahead of its transaction when the kernel holds none of their
# elements (``kernel.nftables.Transaction``): no rule of the kernel reads a key of them before
# the transaction lands. A slot map is read only in the blocks of the rules that the transaction
# itself writes; a hairpin pair only for traffic already DNATed to that address.
EARLY_CONTAINERS = frozenset(ENDPOINT_MAPS) | {HAIRPIN_ENDPOINTS}
# ... worth it when those additions are most of the text: at 5k × 50, 27 of its 30 MB. When they
# are a small part (10k × 2: the hairpin pairs, 0.7 of 5 MB) the text without them is nearly a
# second copy of the transaction (peak RSS +6 MiB) for little parsing spared: sent whole.
# Ranges (endpoint range maps) go ahead by the same rule. Sending them ahead whatever their
# share was measured and not kept: the rest of the text still adds elements, so nft 1.0.6
# first reads back the elements of every interval set (``NFT_CACHE_SETELEM_MAYBE`` in its
# src/cache.c), the ranges just sent included. At 10k × 2 (20k ranges, 0.8 of 6.4 MB) the
# full sync's CPU was 2.24 s against 2.31 s for the whole text and 2.03 s with only the
# hairpin pairs ahead (medians of 3, load ~2), peak RSS 144 -> 149 MiB; at 10k × 10 3.8-3.9 s
# with the ranges ahead, 3.7 s with only the hairpin pairs, 4.4-5.2 s for the whole text
# (two runs each, load ~3; fewer distinct endpoint addresses than bench/proxy.py uses).
EARLY_MIN_SHARE = 0.5
# AFTER: into a table that holds nothing of ours (a new one, or one emptied by someone) the
# additions go *after* the rest of the text instead, all of them (the verdict maps and the
# ClusterIP set too) in the one batch (``Transaction.after``). The kernel checks a map's elements
# whenever a rule binds it (``nf_tables_bind_set`` walks them all for every binding), so rules
# written after their maps were filled cost ~20 chains × ~1000 slots per shard: at 5k × 50, 5M
# element visits, 0.6 s of the 0.9 s the kernel spent on the rest of the text (``perf``). Bound
# to empty maps, each later element is checked against the map's ~20 bindings, no walk.
# Packets still never meet half a Service: until the batch lands every map and set is empty,
# so no Service is reachable (``service-ips``, ``service-nodeports`` and the others miss; no
# ClusterIP is rejected), exactly as before the table existed but for the unallocated-ClusterIP
# drop; the batch then adds every Service's dispatch, slots, ranges and hairpin pairs at once.
# Worth it whenever the element lines are a fair part of the text (AFTER_MIN_SHARE), since
# they all leave nft: at 10k × 2 (0.4 of the text) the full sync's CPU went from 3.1 to 2.3-2.8 s.
AFTER_MIN_SHARE = 0.25
# ... and the containers besides EARLY_CONTAINERS the batch then takes as data (never commented;
# the no-endpoint maps' elements carry their Service's name and are read from their lines)
AFTER_CONTAINERS = frozenset({CLUSTER_IPS, SERVICE_IPS, SERVICE_NODEPORTS, FIREWALL_IPS})


@dataclass(slots=True)
class ServiceRender:
    """What one Service (all its ports) put into the table."""

    chains: dict[str, list[str]] = field(default_factory=dict)  # chain → rule bodies
    elements: dict[str, Mapping[str, str]] = field(default_factory=dict)  # container → key → value (slot maps: Slots)
    comments: dict[tuple[str, str], str] = field(default_factory=dict)  # (container, key) → comment
    affinity_sets: dict[str, int] = field(default_factory=dict)  # set → timeout seconds
    slots: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # chain → (base, capacity, endpoint map)
    no_local_internal: int = 0
    no_local_external: int = 0


class SlotAllocator:
    """Blocks of slots of one endpoint map: power-of-two capacities, one free list per size."""

    def __init__(self) -> None:
        self.next = 0
        self.free: dict[int, list[int]] = {}

    @staticmethod
    def capacity(n: int) -> int:
        return max(2, 1 << (n - 1).bit_length())

    def alloc(self, n: int) -> tuple[int, int]:
        cap = self.capacity(n)
        free = self.free.get(cap)
        if free:
            return free.pop(), cap
        base = self.next
        if base + cap > SLOT_SPACE:
            raise OverflowError("endpoint map slot space exhausted; a full sync compacts it")
        self.next = base + cap
        return base, cap

    def release(self, base: int, cap: int) -> None:
        self.free.setdefault(cap, []).append(base)

    def copy(self) -> SlotAllocator:
        other = type(self)()
        other.next = self.next
        other.free = {cap: list(bases) for cap, bases in self.free.items()}
        return other


class RangeAllocator(SlotAllocator):
    """Blocks of an endpoint range map: RANGE_BLOCK numbers each, whatever the count; the last
    block of the u32 space stays unused (a range's end element is the number after it)."""

    @staticmethod
    def capacity(n: int) -> int:
        return RANGE_BLOCK

    def alloc(self, n: int) -> tuple[int, int]:
        if not self.free.get(RANGE_BLOCK) and self.next + RANGE_BLOCK >= SLOT_SPACE:
            raise OverflowError("endpoint range map is full")
        return super().alloc(n)


class Allocators(dict):
    """Endpoint map → its ``SlotAllocator``. A partial plan copies an allocator of the previous
    state before its first change (``writable``), so the previous state's stay as they were."""

    def __init__(self, previous: Mapping[str, SlotAllocator] | None = None):
        super().__init__(previous or {})
        self._owned: set[str] | None = None if previous is None else set()

    def writable(self, endpoint_map: str) -> SlotAllocator:
        a = self.get(endpoint_map)
        if a is None:
            a = self[endpoint_map] = RangeAllocator() if endpoint_map in RANGE_MAPS else SlotAllocator()
        elif self._owned is not None and endpoint_map not in self._owned:
            a = self[endpoint_map] = a.copy()
        if self._owned is not None:
            self._owned.add(endpoint_map)
        return a


_ABSENT, _GONE = object(), object()


class Overlay(MutableMapping):
    """A dict's changes kept beside it: a partial plan writes here and leaves the previous
    state's dict alone. ``settle()`` folds the changes into that dict (in place: the previous
    state is gone by then) and returns it; a settled overlay stays a true view."""

    __slots__ = ("base", "delta")

    def __init__(self, base: Mapping):
        self.base = base.settle() if isinstance(base, Overlay) else base
        self.delta: dict = {}

    def __getitem__(self, key):
        v = self.delta.get(key, _ABSENT)
        if v is _ABSENT:
            return self.base[key]
        if v is _GONE:
            raise KeyError(key)
        return v

    def get(self, key, default=None):
        v = self.delta.get(key, _ABSENT)
        if v is _ABSENT:
            return self.base.get(key, default)
        return default if v is _GONE else v

    def __contains__(self, key) -> bool:
        v = self.delta.get(key, _ABSENT)
        return key in self.base if v is _ABSENT else v is not _GONE

    def __setitem__(self, key, value) -> None:
        self.delta[key] = value

    def __delitem__(self, key) -> None:
        if key not in self:
            raise KeyError(key)
        self.delta[key] = _GONE

    def __iter__(self) -> Iterator:
        delta = self.delta
        yield from (k for k in self.base if k not in delta)
        yield from (k for k, v in delta.items() if v is not _GONE)

    def __len__(self) -> int:
        n = len(self.base)
        for k, v in self.delta.items():
            if v is _GONE:
                n -= k in self.base
            else:
                n += k not in self.base
        return n

    def settle(self) -> dict:
        base = self.base
        for k, v in self.delta.items():
            if v is _GONE:
                base.pop(k, None)
            else:
                base[k] = v
        self.delta = {}
        return base


class Containers(Mapping):
    """Container name → its elements (``NftState.kernel``/``owners``) in a partial plan: an
    ``Overlay`` over the previous state's dict, made when the container is first touched."""

    __slots__ = ("previous", "touched")

    def __init__(self, previous: Mapping[str, dict]):
        self.previous = settled(previous)
        self.touched: dict[str, Overlay] = {}

    def __getitem__(self, container: str) -> Overlay:
        o = self.touched.get(container)
        if o is None:
            o = self.touched[container] = Overlay(self.previous[container])
        return o

    def __iter__(self) -> Iterator[str]:
        return iter(self.previous)

    def __len__(self) -> int:
        return len(self.previous)

    def sizes(self) -> int:
        touched = self.touched
        return sum(len(touched[c]) if c in touched else len(d) for c, d in self.previous.items())

    def settle(self) -> dict[str, dict]:
        out = dict(self.previous)
        for container, overlay in self.touched.items():
            out[container] = overlay.settle()
        return out


def settled(containers: Mapping[str, dict]) -> dict[str, dict]:
    return containers.settle() if isinstance(containers, Containers) else containers  # type: ignore[return-value]


@dataclass
class KernelSnapshot:
    """What a full sync found in the kernel. ``elements[name]`` is None when that container
    exists but could not be read (it is then flushed and refilled); a missing container has
    no entry (or an empty dict)."""

    chains: list[str] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    elements: dict[str, dict[str, str] | None] = field(default_factory=dict)


@dataclass
class NftState:
    """Bookkeeping between syncs; see the module docstring. Never changed in place once a
    plan returned it (``chains`` is replaced, not added to)."""

    synced: bool = False  # False only before the first (full) sync was committed: nothing of ours to check
    base_chains_recreated: bool = False
    services: MutableMapping[str, ServiceRender] = field(default_factory=dict)
    kernel: Mapping[str, MutableMapping[str, str]] = field(default_factory=lambda: {c: {} for c in CONTAINERS})
    owners: Mapping[str, MutableMapping[str, object]] = field(default_factory=lambda: {c: {} for c in CONTAINERS})
    chains: frozenset[str] | set[str] = frozenset()  # service chains in the kernel (active and stale)
    stale_chains: dict[str, float] = field(default_factory=dict)  # flushed, to delete later: since when
    affinity_sets: set[str] = field(default_factory=set)
    allocators: Allocators = field(default_factory=Allocators)  # endpoint map → its slots
    fixed_chains: int = 0
    fixed_rules: int = 0
    service_rules: int = 0
    no_local_internal: int = 0
    no_local_external: int = 0
    exclusive_elements: int = 0  # elements of the EXCLUSIVE_CONTAINERS (the renders')

    def due_stale_chains(self, older_than: float) -> list[str]:
        return sorted(c for c, since in self.stale_chains.items() if since < older_than)

    def without_chains(self, chains: Iterable[str]) -> NftState:
        """The state once the (stale) ``chains`` were deleted from the kernel."""
        gone = set(chains)
        return replace(self, stale_chains={c: t for c, t in self.stale_chains.items() if c not in gone},
                       chains=frozenset(self.chains - gone))

    def objects(self) -> dict[str, int]:
        kernel = self.kernel
        elements = kernel.sizes() if isinstance(kernel, Containers) else sum(len(v) for v in kernel.values())
        return {
            "chains": self.fixed_chains + len(self.chains),
            "rules": self.fixed_rules + self.service_rules,
            "elements": elements + self.exclusive_elements,
        }

    def held(self, container: str) -> dict[str, str]:
        """What the kernel holds in ``container`` once this state is committed."""
        if container not in EXCLUSIVE_CONTAINERS:
            return dict(self.kernel[container])
        out: dict[str, str] = {}
        for render in self.services.values():
            elems = render.elements.get(container)
            if elems:
                out.update(elems.items())
        return out

    def owned(self, container: str) -> dict[str, object]:
        """Who owns each element of ``container``: a Service, or a set of them."""
        if container not in EXCLUSIVE_CONTAINERS:
            return dict(self.owners[container])
        return {key: svc for svc, render in self.services.items() for key in render.elements.get(container, ())}


@dataclass
class SyncPlan(KernelPlan[NftState]):
    """``kernel_input`` is the ``nft -f`` text."""

    full: bool = False

    @property
    def text(self) -> str:
        return self.kernel_input


def _fork(previous: NftState) -> NftState:
    """The state a partial plan starts from: the previous one's, with its changes kept apart."""
    return replace(previous, services=Overlay(previous.services), kernel=Containers(previous.kernel),
                   owners=Containers(previous.owners), stale_chains=dict(previous.stale_chains),
                   affinity_sets=set(previous.affinity_sets), allocators=Allocators(previous.allocators))


# -- rendering one Service ----------------------------------------------------------------------


class _Ctx:
    """Per-sync constants for rendering."""

    def __init__(self, request: SyncRequest, options: ProxyOptions, allocators: Allocators):
        v6 = options.family == IPV6
        self.ipx = "ip6" if v6 else "ip"
        self.v6 = v6
        self.options = options
        self.request = request
        self.allocators = allocators
        self.masquerade_all = options.masquerade_all
        detector = options.local_detector
        self.if_local = detector.nft_if_local() if detector.implemented else ""
        self.if_not_local = detector.nft_if_not_local() if detector.implemented else ""
        self.node_ip = ipaddress.ip_address(request.node_ip) if request.node_ip else None
        self.node_labels = request.node_labels
        self.node_name = options.node_name
        self.prefer_same_node = options.prefer_same_node

    def allocator(self, endpoint_map: str) -> SlotAllocator:
        return self.allocators.writable(endpoint_map)


def render_service(ports: list[ServicePort], endpoints: Mapping[ServicePortName, tuple[Endpoint, ...]], ctx: _Ctx,
                   old: ServiceRender | None) -> ServiceRender:
    out = ServiceRender()
    for sp in ports:
        _render_port(sp, endpoints.get(sp.name, ()), ctx, out, old)
    return out


def _add(out: ServiceRender, container: str, key: str, value: str = "", comment: str = "") -> None:
    elems = out.elements.get(container)
    if elems is None:
        elems = out.elements[container] = {}
    elems[key] = value
    if comment:
        out.comments[(container, key)] = comment


def _render_port(sp: ServicePort, eps: tuple[Endpoint, ...], ctx: _Ctx, out: ServiceRender, old: ServiceRender | None) -> None:
    spn = sp.name
    proto = sp.protocol.lower()
    base = service_port_chain_name_base(spn, proto)
    cluster_chain = CLUSTER_POLICY_PREFIX + base
    local_chain = LOCAL_POLICY_PREFIX + base
    external_chain = EXTERNAL_PREFIX + base
    firewall_chain = FIREWALL_PREFIX + base
    name_str = str(spn)
    ipx = ctx.ipx

    cat = categorize_endpoints(eps, sp, ctx.node_name, ctx.node_labels, prefer_same_node=ctx.prefer_same_node)
    cluster_eps, local_eps, has_endpoints = cat.cluster, cat.local, cat.has_any

    uses_cluster_chain = bool(cluster_eps) and sp.uses_cluster_endpoints
    uses_local_chain = bool(local_eps) and sp.uses_local_endpoints

    internal_chain, has_internal = cluster_chain, has_endpoints
    if sp.internal_policy_local:
        internal_chain = local_chain
        has_internal = has_internal and bool(local_eps)
    external_policy_chain, has_external = cluster_chain, has_endpoints
    if sp.external_policy_local:
        external_policy_chain = local_chain
        has_external = has_external and bool(local_eps)
    uses_external_chain = has_endpoints and sp.externally_accessible

    internal_verdict = external_verdict = ""
    if not has_endpoints:
        internal_verdict = external_verdict = f"goto {REJECT_CHAIN}"
    else:
        if not has_internal:
            internal_verdict = "drop"
            out.no_local_internal += 1
        if not has_external:
            external_verdict = "drop"
            out.no_local_external += 1

    port = sp.port
    key_tail = f" . {proto} . {port}"
    cip = sp.cluster_ip
    _add(out, CLUSTER_IPS, cip)
    if has_internal:
        _add(out, SERVICE_IPS, cip + key_tail, f"goto {internal_chain}")
    else:
        _add(out, NO_ENDPOINT_SERVICES, cip + key_tail, internal_verdict, name_str)

    for ext_ip in sp.external_ips:
        if has_endpoints:
            _add(out, SERVICE_IPS, ext_ip + key_tail, f"goto {external_chain}")
        if not has_external:
            _add(out, NO_ENDPOINT_SERVICES, ext_ip + key_tail, external_verdict, name_str)

    uses_firewall = bool(sp.load_balancer_vips) and bool(sp.load_balancer_source_ranges)
    for vip in sp.load_balancer_vips:
        if has_endpoints:
            _add(out, SERVICE_IPS, vip + key_tail, f"goto {external_chain}")
        if uses_firewall:
            _add(out, FIREWALL_IPS, vip + key_tail, f"goto {firewall_chain}")
    if not has_external:
        for vip in sp.load_balancer_vips:
            _add(out, NO_ENDPOINT_SERVICES, vip + key_tail, external_verdict, name_str)

    if sp.node_port:
        np_key = f"{proto} . {sp.node_port}"
        if has_endpoints:
            _add(out, SERVICE_NODEPORTS, np_key, f"goto {external_chain}")
        if not has_external:
            _add(out, NO_ENDPOINT_NODEPORTS, np_key, external_verdict, name_str)

    chains = out.chains
    # Chains are created in this order; a chain's rules are complete before the next.
    if uses_cluster_chain:
        chains.setdefault(cluster_chain, [])
    if uses_local_chain:
        chains.setdefault(local_chain, [])
    if uses_external_chain:
        chains.setdefault(external_chain, [])
    if uses_firewall:
        chains.setdefault(firewall_chain, [])

    if has_internal:
        if ctx.masquerade_all:
            chains[internal_chain].append(f"{ipx} daddr {cip} {proto} dport {port} jump {MARK_MASQ_CHAIN}")
        elif ctx.if_not_local:
            chains[internal_chain].append(f"{ipx} daddr {cip} {proto} dport {port} {ctx.if_not_local} jump {MARK_MASQ_CHAIN}")

    if uses_external_chain:
        rules = chains[external_chain]
        if not sp.external_policy_local:
            rules.append(f"jump {MARK_MASQ_CHAIN}")
        else:
            if ctx.if_local:
                rules.append(f'{ctx.if_local} goto {cluster_chain} comment "short-circuit pod traffic"')
            rules.append(f'fib saddr type local jump {MARK_MASQ_CHAIN} comment "masquerade local traffic"')
            rules.append(f'fib saddr type local goto {cluster_chain} comment "short-circuit local traffic"')
        if has_external:
            rules.append(f"goto {external_policy_chain}")

    if uses_firewall:
        sources = [str(ipaddress.ip_network(r, strict=False)) for r in sp.load_balancer_source_ranges]
        if ctx.node_ip is not None and any(ctx.node_ip in ipaddress.ip_network(s) for s in sources):
            sources.extend(sp.load_balancer_vips)
        chains[firewall_chain].append(f"{ipx} saddr != {{ {', '.join(sources)} }} drop")

    affinity = sp.client_ip_affinity
    ep_sets: dict[str, str] = {}
    if affinity:
        for ep in cat.all_reachable:
            name = AFFINITY_PREFIX + endpoint_name_base(spn, proto, ep.ip, ep.port)
            ep_sets[ep.endpoint] = name
            out.affinity_sets[name] = sp.sticky_max_age_seconds

    if uses_cluster_chain:
        _endpoint_rules(chains[cluster_chain], cluster_chain, cluster_eps, proto, ep_sets, ctx, out, old)
    if uses_local_chain:
        _endpoint_rules(chains[local_chain], local_chain, local_eps, proto, ep_sets, ctx, out, old)

    hairpin = out.elements.get(HAIRPIN_ENDPOINTS)
    if hairpin is None:
        hairpin = out.elements[HAIRPIN_ENDPOINTS] = {}
    hairpin.update(dict.fromkeys([f"{ep[0]} . {ep[0]}" for ep in cat.all_reachable], ""))  # (ep[0]: ip)


def _endpoint_rules(rules: list[str], chain: str, eps: tuple[Endpoint, ...], proto: str, ep_sets: dict[str, str],
                    ctx: _Ctx, out: ServiceRender, old: ServiceRender | None) -> None:
    n = len(eps)
    if ep_sets:
        ipx = ctx.ipx
        for ep in eps:
            s = ep_sets[ep.endpoint]
            rules.append(f"{ipx} saddr @{s} update @{s} {{ {ipx} saddr }} meta l4proto {proto} dnat to {ep.endpoint}")
        for i, ep in enumerate(eps):
            s = ep_sets[ep.endpoint]
            pick = f"numgen random mod {n - i} 0 " if i < n - 1 else ""
            rules.append(f"{pick}update @{s} {{ {ipx} saddr }} meta l4proto {proto} dnat to {ep.endpoint}")
        return
    if n == 1:
        rules.append(f"meta l4proto {proto} dnat to {eps[0].endpoint}")
        return
    if n <= RANGE_MAX_ENDPOINTS:
        _endpoint_ranges(rules, chain, eps, proto, ctx, out, old)
        return
    emap = endpoint_map(chain, proto)
    block = old.slots.get(chain) if old is not None else None
    if block is not None and block[2] == emap and n <= block[1] <= 2 * SlotAllocator.capacity(n):
        base = block[0]
        out.slots[chain] = block
        eps = _keeping_places(eps, [ep.endpoint for ep in _block_endpoints(old, emap, base)], _endpoint_key)
    else:
        base, cap = ctx.allocator(emap).alloc(n)
        out.slots[chain] = (base, cap, emap)
    rules.append(f"meta l4proto {proto} dnat {ctx.ipx} addr . port to numgen random mod {n} offset {base} map @{emap}")
    slots = out.elements.get(emap)
    if slots is None:
        slots = out.elements[emap] = Slots()
    # slot base + i → eps[i] (address . port), without a string per slot: 250k of them in a full sync at 5k × 50
    slots.add(base, eps)


def _block_endpoints(render: ServiceRender, emap: str, base: int) -> tuple[Endpoint, ...]:
    """The endpoints ``render`` put in the slots from ``base`` of ``emap``, in slot order."""
    slots = render.elements.get(emap)
    if isinstance(slots, Slots):
        for start, endpoints in slots.blocks:
            if start == base:
                return endpoints  # type: ignore[return-value]
    return ()


def _endpoint_key(ep: Endpoint) -> str:
    return ep.endpoint


def _range_value(ep: Endpoint) -> str:
    return f"{ep.ip} . {ep.port}"


def _range_order(ranges: Mapping[str, str] | None, base: int, n: int) -> list[str]:
    """The values of the ``n`` ranges a render put in the block from ``base``, in range order;
    [] when it held another count there (then every range is re-split anyway)."""
    if not ranges:
        return []
    mine = sorted((low, value) for key, value in ranges.items() if base <= (low := int(key.partition("-")[0])) < base + RANGE_BLOCK)
    return [value for _, value in mine] if len(mine) == n else []


def _keeping_places(eps: tuple[Endpoint, ...], before: list[str], key) -> tuple[Endpoint, ...]:
    """``eps`` in the order of a block's places (slots, or ranges of the same count) that held
    ``before`` (each place's ``key``): an endpoint still there keeps its place while the block
    still has it, the others fill the free places in ``eps``' order. A Pod replaced in a Service
    of 50 then rewrites its one slot, not every slot after it in sorted order (~70 elements).
    Each place still holds one endpoint, so the choice stays uniform."""
    if not before:
        return eps
    n = len(eps)
    unplaced = {key(ep): ep for ep in eps}
    order: list[Endpoint | None] = [unplaced.pop(k, None) for k in before[:n]]
    order.extend([None] * (n - len(order)))
    if unplaced:
        newcomers = iter(unplaced.values())
        order = [ep if ep is not None else next(newcomers) for ep in order]
    return tuple(order)  # type: ignore[arg-type]


def _endpoint_ranges(rules: list[str], chain: str, eps: tuple[Endpoint, ...], proto: str, ctx: _Ctx, out: ServiceRender,
                     old: ServiceRender | None) -> None:
    """2..RANGE_MAX_ENDPOINTS endpoints: the chain's fixed block of its range map, split into one
    range per endpoint. The rule depends on the block only, so it is the old one whenever the
    chain had a block there: a changed count is a change of elements alone."""
    emap = endpoint_range_map(chain, proto)
    block = old.slots.get(chain) if old is not None else None
    if block is not None and block[2] == emap:
        base = block[0]
        out.slots[chain] = block
        eps = _keeping_places(eps, _range_order(old.elements.get(emap), base, len(eps)), _range_value)  # type: ignore[union-attr]
    else:
        base, cap = ctx.allocator(emap).alloc(len(eps))
        out.slots[chain] = (base, cap, emap)
    rules.append(f"meta l4proto {proto} dnat {ctx.ipx} addr . port to numgen random mod {RANGE_BLOCK} offset {base} map @{emap}")
    ranges = out.elements.get(emap)
    if ranges is None:
        ranges = out.elements[emap] = {}
    n = len(eps)
    for i, ep in enumerate(eps):
        # nft lists a one-number range as that number; never the case here (RANGE_BLOCK / n >= 2)
        ranges[f"{base + i * RANGE_BLOCK // n}-{base + (i + 1) * RANGE_BLOCK // n - 1}"] = f"{ep.ip} . {ep.port}"


# -- the transaction ----------------------------------------------------------------------------


class _Tx:
    """The transaction in phases, so that every reference is valid when the kernel checks it:
    element deletions, chain creation/flushes, set deletions, set creation, rules, element
    additions."""

    def __init__(self, family: str):
        self.prefix = f"{family} {TABLE}"
        self.del_elements: dict[str, list[str]] = {}
        self.chains: list[str] = []
        self.del_sets: list[str] = []
        self.add_sets: list[str] = []
        self.rules: list[str] = []
        self.add_elements: dict[str, list[str]] = {}
        self.early: dict[str, Mapping[str, str]] = {}  # additions that may go ahead (full sync)
        self.after = False  # a table with nothing of ours: every element addition may follow the text instead
        self.n_chains = 0
        self.n_rules = 0
        self.n_elements = 0

    def chain(self, name: str, spec: str = "") -> None:
        p = self.prefix
        self.chains.append(f"add chain {p} {name}{spec}\nflush chain {p} {name}")
        self.n_chains += 1

    def rule(self, chain: str, body: str) -> None:
        self.rules.append(f"add rule {self.prefix} {chain} {body}")
        self.n_rules += 1

    def chain_rules(self, chain: str, bodies: list[str]) -> None:
        if bodies:
            head = f"add rule {self.prefix} {chain} "
            self.rules.append(head + f"\n{head}".join(bodies))
            self.n_rules += len(bodies)

    def kernel_input(self) -> str:
        """The text; with ``early`` additions that are at least EARLY_MIN_SHARE of it, a
        ``Transaction`` that also knows the text without them."""
        text, spans = self.text()
        if not self.early:
            return text
        if self.after:
            if sum(end - start for start, end in spans.values()) < AFTER_MIN_SHARE * len(text):
                return text
        elif sum(len(self.add_elements[c][0]) for c in self.early) < EARLY_MIN_SHARE * len(text):
            return text
        return Transaction(text, self.early, spans, after=self.after)

    def text(self) -> tuple[str, dict[str, tuple[int, int]]]:
        """The text, and where the element line of each ``early`` container (of every
        container, ``after``) is in it (start, end past its newline), so the text without them
        is cut from it (``Transaction.rest``) and this ``_Tx`` is not kept for it."""
        p = self.prefix
        spans: dict[str, tuple[int, int]] = {}
        parts: list[str] = []
        for name, keys in self.del_elements.items():
            if keys:
                parts.append(f"delete element {p} {name} {{ {', '.join(keys)} }}")
        parts.extend(self.chains)
        parts.extend(self.del_sets)
        parts.extend(self.add_sets)
        parts.extend(self.rules)
        offset = sum(map(len, parts)) + len(parts)  # each part is followed by a newline
        for name, elems in self.add_elements.items():
            if elems:
                line = f"add element {p} {name} {{ {', '.join(elems)} }}"
                if self.after or name in self.early:
                    spans[name] = (offset, offset + len(line) + 1)
                parts.append(line)
                offset += len(line) + 1
        parts.append("")
        return "\n".join(parts), spans


def _element_text(key: str, value: str, comment: str) -> str:
    if comment:
        key = f'{key} comment "{comment}"'
    return f"{key} : {value}" if value else key


def _fixed_part(tx: _Tx, request: SyncRequest, options: ProxyOptions, state: NftState, snapshot: KernelSnapshot) -> None:
    v6 = options.family == IPV6
    ipx, addr_type = ("ip6", "ipv6_addr") if v6 else ("ip", "ipv4_addr")
    no_localhost = "ip6 daddr != ::1" if v6 else "ip daddr != 127.0.0.0/8"
    p = tx.prefix
    mark = options.masquerade_mark
    chains_before = tx.n_chains

    tx.chains.append(f'add table {p} {{ comment "{TABLE_COMMENT}" ; }}')
    if not state.base_chains_recreated:
        # Once per process: re-create base chains so a changed hook/priority takes effect.
        for name, *_ in BASE_CHAINS:
            tx.chains.append(f"add chain {p} {name}\ndelete chain {p} {name}")
    for name, ctype, hook, prio in BASE_CHAINS:
        tx.chain(name, f" {{ type {ctype} hook {hook} priority {prio} ; }}")
    for name in FIXED_CHAINS:
        if name == REJECT_CHAIN:
            tx.chain(name, ' { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }')
        else:
            tx.chain(name)
    # Someone else's (or an older version's) chains that are not service chains: make them inert.
    for name in snapshot.chains:
        if name not in ALL_FIXED_CHAINS and not is_service_chain_name(name):
            tx.chains.append(f"flush chain {p} {name}")
    state.fixed_chains = tx.n_chains - chains_before

    rules_before = tx.n_rules
    for src, match, dst in JUMP_CHAINS:
        tx.rule(src, f"{match} jump {dst}" if match else f"jump {dst}")
    tx.rule(MARK_MASQ_CHAIN, f"mark set mark or {mark}")
    tx.rule(MASQUERADING_CHAIN, f"ct status dnat {ipx} saddr . {ipx} daddr @{HAIRPIN_ENDPOINTS} jump {MARK_MASQ_CHAIN}")
    tx.rule(MASQUERADING_CHAIN, f"mark and {mark} == 0 return")
    tx.rule(MASQUERADING_CHAIN, f"mark set mark xor {mark}")
    tx.rule(MASQUERADING_CHAIN, "masquerade fully-random")

    tx.chains.append(f'add set {p} {CLUSTER_IPS} {{ type {addr_type} ; comment "Active ClusterIPs" ; }}')
    tx.rule(CLUSTER_IPS_CHECK_CHAIN, f'{ipx} daddr @{CLUSTER_IPS} reject comment "Reject traffic to invalid ports of ClusterIPs"')
    if request.service_cidrs:
        tx.rule(CLUSTER_IPS_CHECK_CHAIN, f'{ipx} daddr {{ {", ".join(request.service_cidrs)} }} drop comment "Drop traffic to unallocated ClusterIPs"')

    tx.chains.append(f'add set {p} {NODEPORT_IPS} {{ type {addr_type} ; comment "IPs that accept NodePort traffic" ; }}')
    match_all = request.nodeport_ips is None
    if match_all:
        tx.del_sets.append(f"delete set {p} {NODEPORT_IPS}")
    else:
        tx.chains.append(f"flush set {p} {NODEPORT_IPS}")
        ips = []
        for ip in request.nodeport_ips:
            if ipaddress.ip_address(ip).is_loopback:
                continue  # localhost NodePorts are not supported in nftables mode
            ips.append(ip)
        if ips:
            tx.rules.append(f"add element {p} {NODEPORT_IPS} {{ {', '.join(ips)} }}")

    tx.chains.append(f'add map {p} {NO_ENDPOINT_SERVICES} {{ type {addr_type} . inet_proto . inet_service : verdict ; '
                     f'comment "vmap to drop or reject packets to services with no endpoints" ; }}')
    tx.chains.append(f'add map {p} {NO_ENDPOINT_NODEPORTS} {{ type inet_proto . inet_service : verdict ; '
                     f'comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }}')
    tx.rule(REJECT_CHAIN, "reject")
    tx.rule(SERVICE_ENDPOINTS_CHECK_CHAIN, f"{ipx} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}")
    if match_all:
        tx.rule(NODEPORT_ENDPOINTS_CHECK_CHAIN, f"{no_localhost} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}")
    else:
        tx.rule(NODEPORT_ENDPOINTS_CHECK_CHAIN, f"{ipx} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}")

    tx.chains.append(f'add map {p} {FIREWALL_IPS} {{ type {addr_type} . inet_proto . inet_service : verdict ; '
                     f'comment "destinations that are subject to LoadBalancerSourceRanges" ; }}')
    tx.rule(FIREWALL_CHECK_CHAIN, f"{ipx} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}")

    tx.chains.append(f'add map {p} {SERVICE_IPS} {{ type {addr_type} . inet_proto . inet_service : verdict ; '
                     f'comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }}')
    tx.chains.append(f'add map {p} {SERVICE_NODEPORTS} {{ type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }}')
    tx.rule(SERVICES_CHAIN, f"{ipx} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}")
    if match_all:
        tx.rule(SERVICES_CHAIN, f"fib daddr type local {no_localhost} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}")
    else:
        tx.rule(SERVICES_CHAIN, f"{ipx} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}")

    for name, proto in ENDPOINT_MAP_PROTOCOLS.items():
        tx.chains.append(f"add map {p} {name} {endpoint_map_spec(name, proto, ipx)}")
    tx.chains.append(f'add set {p} {HAIRPIN_ENDPOINTS} {{ type {addr_type} . {addr_type} ; '
                     f'comment "every endpoint address twice: DNATed traffic from an endpoint to itself is masqueraded" ; }}')
    state.fixed_rules = tx.n_rules - rules_before

    # Containers that exist but could not be read are refilled from scratch.
    for name, content in snapshot.elements.items():
        if content is None and name in CONTAINERS:
            tx.chains.append(f"flush {CONTAINERS[name]} {p} {name}")


def build_sync(request: SyncRequest, options: ProxyOptions, previous: NftState, snapshot: KernelSnapshot | None,
               now: float) -> SyncPlan:
    """The transaction for ``request`` and the state after it (see module doc); ``previous`` is
    left alone. A full request (decided by the shared proxier) needs the ``snapshot``."""
    full = request.full
    tx = _Tx("ip6" if options.family == IPV6 else "ip")
    if full:
        if snapshot is None:
            raise ValueError("a full sync needs a KernelSnapshot")
        state = _fresh_state(previous, snapshot)
        _fixed_part(tx, request, options, state, snapshot)
        state.base_chains_recreated = True
        # Filled from nothing (a new table, or emptied by someone), not flushed by this transaction.
        early = {c for c in EARLY_CONTAINERS if not state.kernel[c] and snapshot.elements.get(c, {}) is not None}
        # Nothing of ours in the table (no service chain, every container empty and readable):
        # the element additions may follow the rest of the text (see AFTER below).
        tx.after = not state.chains and all(not state.kernel[c] and snapshot.elements.get(c, {}) is not None for c in CONTAINERS)
        if tx.after:  # then the dispatch maps and ClusterIPs go as data too (not read back from their lines)
            early |= AFTER_CONTAINERS
    else:
        state = _fork(previous)

    ctx = _Ctx(request, options, state.allocators)
    # Service ports of the Services to render, grouped by Service.
    if full:
        wanted = None
    else:
        wanted = request.changed_services
    ports_by_service: dict[str, list[ServicePort]] = {}
    by_service = None if wanted is None else getattr(request.service_ports, "by_service", None)
    if by_service is not None:  # the shared proxier's index (servicechangetracker.ServicePorts)
        all_ports = request.service_ports
        for svc in wanted:
            names = by_service.get(svc)
            if names:
                ports_by_service[svc] = [all_ports[name] for name in names]
    else:
        for spn, sp in request.service_ports.items():
            svc = spn.service
            if wanted is None or svc in wanted:
                lst = ports_by_service.get(svc)
                if lst is None:
                    ports_by_service[svc] = [sp]
                else:
                    lst.append(sp)

    services = state.services
    touched: dict[str, set[str]] | None = None if full else {c: set() for c in CONTAINERS}
    names = sorted(ports_by_service) if full else sorted(set(ports_by_service) | {s for s in wanted if s in services})
    old_chains: set[str] = set()
    old_sets: set[str] = set()
    new_chains: set[str] = set()
    new_sets: dict[str, int] = {}
    # a partial sync's endpoint map elements: the changed Services' before and after (EXCLUSIVE_CONTAINERS)
    exclusive_old: dict[str, dict[str, str]] = {}
    exclusive_new: dict[str, dict[str, str]] = {}
    for svc in names:
        old = services.pop(svc, None)
        ports = ports_by_service.get(svc)
        if ports:
            ports.sort(key=lambda sp: (sp.name.port, sp.name.protocol))
            new = render_service(ports, request.endpoints, ctx, old)
            services[svc] = new
        else:
            new = None
        if old is not None:
            _release_slots(state.allocators, old, new)
            old_chains.update(old.chains)
            old_sets.update(old.affinity_sets)
            state.no_local_internal -= old.no_local_internal
            state.no_local_external -= old.no_local_external
            state.service_rules -= sum(len(r) for r in old.chains.values())
            state.exclusive_elements -= _exclusive(old, exclusive_old if touched is not None else None)
            if touched is not None:
                _unclaim(state, svc, old, touched)
        if new is not None:
            new_chains.update(new.chains)
            new_sets.update(new.affinity_sets)
            state.no_local_internal += new.no_local_internal
            state.no_local_external += new.no_local_external
            state.service_rules += sum(len(r) for r in new.chains.values())
            state.exclusive_elements += _exclusive(new, exclusive_new if touched is not None else None)
            if touched is not None:
                _claim(state, svc, new, touched)
            for chain, bodies in new.chains.items():
                if not full and old is not None and chain in state.chains and old.chains.get(chain) == bodies:
                    # Same rules (an endpoint changed within the chain's slot block): only
                    # elements change. A rewritten dnat rule makes the kernel re-validate every
                    # chain of the table, half of a small transaction's cost at 10k Services.
                    continue
                if full or chain not in state.chains:
                    tx.chain(chain)
                else:  # exists: flushing alone spares nft a chain lookup
                    tx.chains.append(f"flush chain {tx.prefix} {chain}")
                    tx.n_chains += 1
                tx.chain_rules(chain, bodies)

    if full:
        shared = _claim_all(state)
        _reconcile_all(state, tx, early, shared)
        _reconcile_all_exclusive(state, tx, early)
    else:
        _reconcile(state, touched, tx)
        _reconcile_exclusive(exclusive_old, exclusive_new, tx)

    # Chains: active ones leave the stale list; ones nobody renders any more become stale.
    if full:
        state.chains = frozenset(state.chains | new_chains)
    elif not new_chains <= state.chains:
        state.chains = frozenset(state.chains | new_chains)
    for chain in new_chains:
        state.stale_chains.pop(chain, None)
    if full:
        stale = {c for c in state.chains if c not in new_chains}
    else:
        stale = {c for c in old_chains if c not in new_chains}
    p = tx.prefix
    for chain in sorted(stale):
        if chain not in state.stale_chains:
            tx.chains.append(f"flush chain {p} {chain}")
            state.stale_chains[chain] = now

    # Affinity sets: stale ones go at once (their rules were flushed above), new ones are added.
    if full:
        gone_sets = {s for s in state.affinity_sets if s not in new_sets}
    else:
        gone_sets = {s for s in old_sets if s not in new_sets}
    addr_type = "ipv6_addr" if options.family == IPV6 else "ipv4_addr"
    for name in sorted(gone_sets):
        if name in state.affinity_sets:
            tx.del_sets.append(f"delete set {p} {name}")
            state.affinity_sets.discard(name)
    for name, timeout in new_sets.items():
        tx.add_sets.append(f"add set {p} {name} {{ type {addr_type} ; flags dynamic,timeout ; timeout {timeout}s ; }}")
        state.affinity_sets.add(name)

    state.synced = True
    return SyncPlan(
        kernel_input=tx.kernel_input(), next_state=state, full=full,
        written={"chains": tx.n_chains, "rules": tx.n_rules, "elements": tx.n_elements},
        totals=state.objects(),
        no_local_internal=state.no_local_internal, no_local_external=state.no_local_external,
    )


def _fresh_state(previous: NftState, snapshot: KernelSnapshot) -> NftState:
    """A full sync's state: what the kernel holds (the snapshot), nothing of ours claimed yet.
    Of the previous state only the stale chains' flush times are kept, for chains still there."""
    chains = {c for c in snapshot.chains if is_service_chain_name(c)}
    return NftState(
        base_chains_recreated=previous.base_chains_recreated,
        kernel={c: dict(snapshot.elements.get(c) or {}) for c in CONTAINERS},
        chains=chains,
        stale_chains={c: t for c, t in previous.stale_chains.items() if c in chains},
        affinity_sets={s for s in snapshot.sets if is_affinity_set_name(s)},
    )


def _release_slots(allocators: Allocators, old: ServiceRender, new: ServiceRender | None) -> None:
    for chain, (base, cap, emap) in old.slots.items():
        if new is None or new.slots.get(chain) != (base, cap, emap):
            allocators.writable(emap).release(base, cap)


# -- element ownership and reconciliation ------------------------------------------------------


def _claim(state: NftState, svc: str, render: ServiceRender, touched: dict[str, set[str]]) -> None:
    for container, elems in render.elements.items():
        if container in EXCLUSIVE_CONTAINERS:
            continue
        owners = state.owners[container]
        t = touched[container]
        for key in elems:
            o = owners.get(key)
            if o is None:
                owners[key] = svc
            elif o != svc:  # a new set: the previous state's stays as it was
                owners[key] = (o | {svc}) if isinstance(o, set) else {o, svc}
            t.add(key)


def _unclaim(state: NftState, svc: str, render: ServiceRender, touched: dict[str, set[str]]) -> None:
    for container, elems in render.elements.items():
        if container in EXCLUSIVE_CONTAINERS:
            continue
        owners = state.owners[container]
        t = touched[container]
        for key in elems:
            o = owners.get(key)
            if o == svc:
                del owners[key]
            elif isinstance(o, set) and svc in o:
                rest = o - {svc}
                owners[key] = next(iter(rest)) if len(rest) == 1 else rest
            t.add(key)


def _claim_all(state: NftState) -> set[str]:
    """Every rendered element's owners; the containers where some element has several. A
    Service's elements that no other claimed are taken in one C-level update (at 5k × 50,
    nearly all of the 500k)."""
    shared: set[str] = set()
    for svc, render in state.services.items():
        for container, elems in render.elements.items():
            if container in EXCLUSIVE_CONTAINERS:
                continue
            owners = state.owners[container]
            if owners.keys().isdisjoint(elems):
                owners.update(dict.fromkeys(elems, svc))
                continue
            shared.add(container)
            for key in elems:
                o = owners.get(key)
                if o is None:
                    owners[key] = svc
                elif isinstance(o, set):
                    o.add(svc)
                else:
                    owners[key] = {o, svc}
    return shared


def _desired(state: NftState, container: str, key: str, o: object) -> tuple[str, str]:
    svc = o if isinstance(o, str) else min(o)  # type: ignore[type-var]
    render = state.services[svc]
    return render.elements[container][key], render.comments.get((container, key), "")


def _reconcile(state: NftState, touched: dict[str, set[str]], tx: _Tx) -> None:
    for container, keys in touched.items():
        if not keys:
            continue
        owners = state.owners[container]
        kernel = state.kernel[container]
        dels: list[str] = []
        adds: list[str] = []
        for key in sorted(keys):
            o = owners.get(key)
            have = kernel.get(key)
            if o is None:
                if have is not None:
                    dels.append(key)
                    del kernel[key]
                continue
            value, comment = _desired(state, container, key, o)
            if have == value:
                continue
            if have is not None:
                dels.append(key)
            adds.append(_element_text(key, value, comment))
            kernel[key] = value
        _queue(tx, container, dels, adds)


def _reconcile_all(state: NftState, tx: _Tx, early: set[str] = frozenset(), shared: set[str] | None = None) -> None:
    """A full sync's elements against what the kernel holds. Walked per Service and container
    (one lookup of the render's elements and comments each, not three per element): an
    element owned by several Services takes its value from the smallest name, as
    ``_desired``; one owned by a single Service is that Service's. The kernel held none of the
    ``early`` containers' elements: their additions are exactly what they hold afterwards, and
    may be sent ahead of the transaction (``tx.early``); those without ``shared`` elements (each
    owned by one Service) are each Service's elements, taken whole."""
    services, owners_of, kernel_of = state.services, state.owners, state.kernel
    shared_containers = [container for container in CONTAINERS if container not in EXCLUSIVE_CONTAINERS]
    dels_of: dict[str, list[str]] = {}
    for container in shared_containers:
        owners, kernel = owners_of[container], kernel_of[container]
        dels = [key for key in kernel if key not in owners] if kernel else []
        for key in dels:
            del kernel[key]
        dels_of[container] = dels
    adds_of: dict[str, list[str]] = {container: [] for container in shared_containers}
    for svc, render in services.items():
        comments = render.comments
        for container, elems in render.elements.items():
            if container in EXCLUSIVE_CONTAINERS:
                continue  # _reconcile_all_exclusive
            if container in early:  # nothing there yet: the owner's value goes in, no comparison, no text yet
                if shared is not None and container not in shared:
                    kernel_of[container].update(elems)
                    continue
                owners, kernel = owners_of[container], kernel_of[container]
                for key, value in elems.items():
                    o = owners[key]
                    if o is svc or o == svc or (not isinstance(o, str) and min(o) == svc):  # type: ignore[type-var]
                        kernel[key] = value
                continue
            owners, kernel, adds, dels = owners_of[container], kernel_of[container], adds_of[container], dels_of[container]
            for key, value in elems.items():
                o = owners[key]
                if o is not svc and o != svc and (isinstance(o, str) or min(o) != svc):  # type: ignore[type-var]
                    continue  # another Service's value
                have = kernel.get(key)
                if have == value:
                    continue
                if have is not None:
                    dels.append(key)
                comment = comments.get((container, key)) if comments else None
                if comment:
                    adds.append(_element_text(key, value, comment))
                else:  # _element_text without the call: nearly every element of a full sync
                    adds.append(f"{key} : {value}" if value else key)
                kernel[key] = value
    for container in shared_containers:
        elems = kernel_of[container]
        if container in early and elems:
            # One text for all of them (no list of 250k strings kept while the text is built).
            # (a set's values are all "", a map's never are: joined without a format per element)
            tx.add_elements[container] = [", ".join(elems) if CONTAINERS[container] == "set" else ", ".join(map(" : ".join, elems.items()))]
            tx.n_elements += len(elems)
            tx.early[container] = elems
            continue
        _queue(tx, container, dels_of[container], adds_of[container])


def _exclusive(render: ServiceRender, into: dict[str, dict[str, str]] | None) -> int:
    """How many elements ``render`` has in the EXCLUSIVE_CONTAINERS; added to ``into`` (per
    container) unless None."""
    n = 0
    for container, elems in render.elements.items():
        if container in EXCLUSIVE_CONTAINERS and elems:
            n += len(elems)
            if into is not None:
                held = into.get(container)
                if held is None:
                    into[container] = dict(elems.items())
                else:
                    held.update(elems.items())
    return n


def _reconcile_all_exclusive(state: NftState, tx: _Tx, early: Collection[str]) -> None:
    """A full sync's endpoint map elements (EXCLUSIVE_CONTAINERS): the renders' against the
    snapshot's. Into an ``early`` map (the kernel holds none) the renders' elements go as they
    are, joined without a copy (``Joined``)."""
    parts_of: dict[str, list[dict[str, str]]] = {}
    for render in state.services.values():
        for container, elems in render.elements.items():
            if container in EXCLUSIVE_CONTAINERS and elems:
                parts = parts_of.get(container)
                if parts is None:
                    parts_of[container] = [elems]
                else:
                    parts.append(elems)
    kernel_of = state.kernel
    for container in ENDPOINT_MAPS:
        parts = parts_of.get(container, [])
        held = kernel_of[container]
        kernel_of[container] = {}  # the renders are the record from now on
        if container in early:
            if parts:
                elems = Joined(parts)
                tx.add_elements[container] = [", ".join([part.text() if isinstance(part, Slots) else ", ".join(map(" : ".join, part.items()))
                                                         for part in parts])]
                tx.n_elements += len(elems)
                tx.early[container] = elems
            continue
        desired: dict[str, str] = {}
        for elems in parts:
            desired.update(elems.items())
        dels = [key for key in held if key not in desired]
        adds = []
        for key, value in desired.items():
            have = held.get(key)
            if have == value:
                continue
            if have is not None:
                dels.append(key)
            adds.append(f"{key} : {value}")
        _queue(tx, container, dels, adds)


def _reconcile_exclusive(old_of: dict[str, dict[str, str]], new_of: dict[str, dict[str, str]], tx: _Tx) -> None:
    """A partial sync's endpoint map elements: what the changed Services held (the kernel's,
    since the state was committed) against what they hold now. No other Service has a key in
    their blocks."""
    for container in ENDPOINT_MAPS:
        old, new = old_of.get(container), new_of.get(container)
        if old is None and new is None:
            continue
        old, new = old or {}, new or {}
        dels: list[str] = []
        adds: list[str] = []
        for key in sorted(old.keys() | new.keys()):
            have, value = old.get(key), new.get(key)
            if have == value:
                continue
            if have is not None:
                dels.append(key)
            if value is not None:
                adds.append(f"{key} : {value}")
        _queue(tx, container, dels, adds)


def _queue(tx: _Tx, container: str, dels: list[str], adds: list[str]) -> None:
    if dels:
        tx.del_elements.setdefault(container, []).extend(dels)
        tx.n_elements += len(dels)
    if adds:
        tx.add_elements.setdefault(container, []).extend(adds)
        tx.n_elements += len(adds)


def delete_chains_text(family: int, chains: Iterable[str]) -> str:
    """The separate transaction that deletes stale (already flushed) chains."""
    fam = "ip6" if family == IPV6 else "ip"
    return "".join(f"delete chain {fam} {TABLE} {c}\n" for c in chains)
