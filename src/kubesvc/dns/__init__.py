"""``kubesvc dns``: the cluster DNS add-on, held to the Kubernetes DNS-Based Service Discovery
specification (kubernetes/dns docs/specification.md, schema 1.1.0) and, where it is silent, to
CoreDNS's ``kubernetes`` plugin as k3s deploys it.

- ``records``: the in-memory index of Services, EndpointSlices and Namespaces the informers
  feed (pure data, no I/O);
- ``answer``: the pure answer builder: a question and the index in, a dnspython message out;
- ``cache`` and ``forward``: names outside the cluster domain, as CoreDNS's ``forward`` and
  ``cache 30`` plugins;
- ``metrics``: CoreDNS's metric names; ``server``: the UDP/TCP/HTTP shell around all of it.
"""
