"""The only code that touches the host: nft, iptables-restore/-save, conntrack, netlink.

Everything above this package builds kernel input as values; these modules run it once and
translate failures into ``exec.CommandFailed`` carrying argv, exit code, output and input.
"""

# IP families as numbers (4, 6: Python's ip.version), defined once in util/ipnet; kernel/ takes
# plain data and imports nothing above it
from kubesvc.util.ipnet import IPV4, IPV6  # noqa: F401
