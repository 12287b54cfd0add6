"""The Pod network across nodes (``--pod-network routes|vxlan``): :mod:`plan` decides, :mod:`masquerade`
writes the NAT rules, :mod:`controller` follows the Nodes and programs the kernel."""
