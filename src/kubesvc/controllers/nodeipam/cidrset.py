"""One cluster CIDR cut into node-sized ranges, as upstream's
``pkg/controller/nodeipam/ipam/cidrset/cidr_set.go``.

A ``--cluster-cidr`` of ``10.244.0.0/16`` with ``--node-cidr-mask-size-ipv4 24`` holds 256
node ranges, ``10.244.0.0/24`` .. ``10.244.255.0/24``. ``allocate_next`` hands out the first
free range at or after the one after the last handed out (round robin, so a released range is
not given again at once), ``occupy`` marks a range already in a Node's ``spec.podCIDRs`` (at
start, from the Node list: the allocator's memory is the Nodes), ``release`` frees one.
The node mask may be at most 16 bits longer than the cluster's (upstream's limit, so the
bitmap stays small) and never shorter.
"""

from __future__ import annotations

import ipaddress

MAX_PREFIX_GAP = 16
NO_CIDRS_LEFT = "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted range"


class CIDRSetError(ValueError):
    pass


class CIDRSet:
    def __init__(self, cluster_cidr: str, node_mask_size: int):
        self.cluster = ipaddress.ip_network(cluster_cidr, strict=False)
        if node_mask_size < self.cluster.prefixlen:
            raise CIDRSetError(f"node mask size {node_mask_size} is shorter than the cluster CIDR {cluster_cidr}'s /{self.cluster.prefixlen}")
        if node_mask_size > self.cluster.max_prefixlen:
            raise CIDRSetError(f"node mask size {node_mask_size} is longer than an address ({self.cluster.max_prefixlen} bits)")
        if node_mask_size - self.cluster.prefixlen > MAX_PREFIX_GAP:
            raise CIDRSetError("CIDRSet: subnet mask size is too big, the difference between the cluster CIDR mask "
                               f"(/{self.cluster.prefixlen}) and the node CIDR mask (/{node_mask_size}) must be at most {MAX_PREFIX_GAP}")
        self.node_mask_size = node_mask_size
        self.max_cidrs = 1 << (node_mask_size - self.cluster.prefixlen)
        self._step = 1 << (self.cluster.max_prefixlen - node_mask_size)
        self._used: set[int] = set()
        self._next = 0

    @property
    def used(self) -> int:
        return len(self._used)

    def _cidr(self, index: int) -> str:
        base = int(self.cluster.network_address) + index * self._step
        return str(ipaddress.ip_network((base, self.node_mask_size)))

    def _indices(self, cidr: str) -> range:
        """The node-range indices ``cidr`` covers; CIDRSetError when it is outside the cluster CIDR."""
        net = ipaddress.ip_network(cidr, strict=False)
        if net.version != self.cluster.version or not net.subnet_of(self.cluster):  # type: ignore[arg-type]
            raise CIDRSetError(f"cidr {cidr} is out the range of cluster cidr {self.cluster}")
        first = (int(net.network_address) - int(self.cluster.network_address)) // self._step
        if net.prefixlen >= self.node_mask_size:
            return range(first, first + 1)
        return range(first, first + (1 << (self.node_mask_size - net.prefixlen)))

    def allocate_next(self) -> str:
        for offset in range(self.max_cidrs):
            index = (self._next + offset) % self.max_cidrs
            if index not in self._used:
                self._used.add(index)
                self._next = (index + 1) % self.max_cidrs
                return self._cidr(index)
        raise CIDRSetError(NO_CIDRS_LEFT)

    def occupy(self, cidr: str) -> None:
        self._used.update(self._indices(cidr))

    def release(self, cidr: str) -> None:
        self._used.difference_update(self._indices(cidr))

    def contains(self, cidr: str) -> bool:
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return False
        return net.version == self.cluster.version and net.subnet_of(self.cluster)  # type: ignore[arg-type]


DEFAULT_NODE_MASK_IPV4, DEFAULT_NODE_MASK_IPV6 = 24, 64


def parse_cluster_cidrs(text: str) -> list[str]:
    """``--cluster-cidr``: one CIDR, or two of different families (dual-stack); ValueError
    worded as kube-controller-manager's otherwise."""
    cidrs = [c.strip() for c in text.split(",") if c.strip()]
    nets = []
    for cidr in cidrs:
        try:
            nets.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise ValueError(f'invalid CIDR address: {cidr}') from None
    if not nets:
        raise ValueError("--cluster-cidr is required with --allocate-node-cidrs")
    if len(nets) > 2:
        raise ValueError("len of clusters is:" + f" {len(nets)} > more than max allowed of 2")
    if len(nets) == 2 and nets[0].version == nets[1].version:
        raise ValueError("mixed cidrs are required for dual-stack: one IPv4 and one IPv6 --cluster-cidr")
    return [str(n) for n in nets]


def node_mask_sizes(cluster_cidrs: list[str], mask: int, mask_ipv4: int, mask_ipv6: int) -> list[int]:
    """Upstream ``setNodeCIDRMaskSizes``: one node mask per cluster CIDR (0 = flag not given)."""
    versions = [ipaddress.ip_network(c).version for c in cluster_cidrs]
    ipv4, ipv6 = DEFAULT_NODE_MASK_IPV4, DEFAULT_NODE_MASK_IPV6
    if len(cluster_cidrs) > 1:
        if mask:
            raise ValueError("usage of --node-cidr-mask-size is not allowed with dual-stack clusters")
    else:
        family = "IPv4" if versions[0] == 4 else "IPv6"
        other_flag, other_value = ("--node-cidr-mask-size-ipv6", mask_ipv6) if versions[0] == 4 else ("--node-cidr-mask-size-ipv4", mask_ipv4)
        if other_value:
            raise ValueError(f"usage of {other_flag} is not allowed for a single-stack {family} cluster")
        if mask:
            return [mask]
    ipv4, ipv6 = mask_ipv4 or ipv4, mask_ipv6 or ipv6
    return [ipv4 if v == 4 else ipv6 for v in versions]
