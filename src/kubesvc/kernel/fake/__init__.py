"""Stateful fakes of the kernel interfaces beside them in ``kernel/``, for tests: each keeps
the state the kernel would hold, applies a transaction all or nothing, and rejects what the
kernel rejects (with the same ``exec.CommandFailed``), rather than recording calls. Each comes
with a packet tracer that walks a packet through the state as upstream's packet-flow tests do.

* ``iptables``: ``FakeIptables`` behind ``kernel.iptables.Iptables`` / ``IptablesSync``;
* ``nftables``: ``FakeNFTables`` behind ``kernel.nftables.NFTables``;
* ``nftables_trace``: the packet tracer over ``FakeNFTables``.
"""
