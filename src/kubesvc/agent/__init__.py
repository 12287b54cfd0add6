"""The node agent (``kubesvc agent``): kubesvc's kubelet.

It registers its Node and keeps it alive (status heartbeats and a Lease in
``kube-node-lease``), runs every Pod bound to its node as processes in the Pod's own network
namespace (a veth into the node bridge, an address from the node's podCIDR), injects the
Service environment variables kubelet injects, runs readiness/liveness/startup probes, reports
``status`` (phase, conditions, container states) and terminates Pods gracefully. There is no
container runtime: ``image`` is recorded, never pulled, and ``command``/``args`` run as host
processes inside the Pod's namespace.
"""
