"""Kernel end-to-end tests: real connections through ``kubesvc proxy``'s nftables/iptables rules
in network namespaces each test module builds and removes (tests/support/netns.py)."""
