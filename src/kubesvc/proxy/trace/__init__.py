"""``kubesvc trace``: where a new connection goes on this node, read from the kernel's live state
and walked the way the kernel walks it, with the Kubernetes objects behind each step.

* ``nftables``: the tracer over our nftables layout (``proxy/nftables/rules.py``), from the
  fake's table in tests or the live one (``table_from_listing``);
* ``objects``: what a chain name, a DNAT target and an EndpointSlice say about the Service port,
  the Pod and the node behind a step, and why an endpoint of the Service is not a candidate;
* ``iptables``: the tracer over ``iptables-save``; ``userspace``: its walk up to the userspace
  proxy's listener, then the listener's endpoints from the state the proxy publishes;
* ``live``: reading this node's tables through ``kernel/`` and putting the answer together.
"""
