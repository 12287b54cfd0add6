"""The userspace proxy mode (upstream ``pkg/proxy/userspace``, removed in v1.26): the kernel
only redirects a Service's portals to a local port, and this process relays every connection
to an endpoint it chooses."""
