"""IPVS mode: ``support`` decides whether the kernel can run it (else iptables runs instead),
``rules`` computes the desired state (addresses on ``kube-ipvs0``, virtual/real servers, ipsets,
the static iptables rules), ``plan`` diffs it against the kernel's IPVS table (graceful
termination), ``proxier.IpvsBackend`` applies it all through ``kernel.ipvs`` (IPVS netlink),
``kernel.netlink`` (kube-ipvs0), ``kernel.ipset`` and ``kernel.iptables``."""
