"""The only code that touches the host: nft, iptables-restore/-save, conntrack, netlink.

Everything above this package builds kernel input as values; these modules run it once and
translate failures into ``exec.CommandFailed`` carrying argv, exit code, output and input.
"""

# IP families as numbers (what proxy.types calls IPV4/IPV6): kernel/ takes plain data and
# imports nothing above it
IPV4, IPV6 = 4, 6
