"""Stateful fakes of the kernel interfaces beside them in ``kernel/``, for tests: each keeps
the state the kernel would hold, applies a transaction as the kernel does (all or nothing for
nft and iptables-restore; line by line for ipset restore), and rejects what the kernel rejects
(with the same ``exec.CommandFailed`` or its subclass), rather than recording calls. The packet
filters' fakes come with a tracer that walks a packet through the state as upstream's
packet-flow tests do.

* ``iptables``: ``FakeIptables`` behind ``kernel.iptables.Iptables`` / ``IptablesSync``, with
  its packet tracer (upstream's ``iptablesTracer``);
* ``nftables``: ``FakeNFTables`` behind ``kernel.nftables.NFTables`` (held to the real nft by
  ``tests/kernel/test_nft_fake.py``); its packet tracer is ``proxy/trace/nftables.py`` (it reads the live table too);
* ``ipset``: ``FakeIpset`` behind ``kernel.ipset.Ipset`` (held to the real ipset by
  ``tests/kernel/test_ipset_fake.py``);
* ``netlink``: ``FakeLinks`` behind ``kernel.netlink.Links`` (the proxy's view: links by index
  and their addresses), a view over one namespace of ``links``' ``FakeNetwork``;
* ``links``: ``FakeNetwork`` behind ``kernel.links.Rtnetlink`` and ``kernel.netns.Namespaces``
  (named namespaces and their processes, bridges, veths, addresses, routes; held to the kernel
  by ``tests/kernel/test_links_fake.py``);
* ``conntrack``: ``FakeConntrack`` behind ``kernel.conntrack.Conntrack`` (entries by original
  and reply tuple, deleted by ``FlowFilter``; held to the kernel by
  ``tests/kernel/test_conntrack_fake.py``);
* ``sysctl``: ``FakeSysctl`` behind ``kernel.sysctl.Sysctl`` (a namespace's ``/proc/sys`` tree,
  read-only keys, ranges, ``forwarding`` propagation; held to the kernel by
  ``tests/kernel/test_sysctl_fake.py``);
* ``modules``: ``FakeModules`` behind ``kernel.modules.Modules`` (loaded, built-in and loadable
  modules, dependencies; ``tests/kernel/test_modules_fake.py``).
"""
