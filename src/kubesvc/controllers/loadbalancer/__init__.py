"""LoadBalancer addresses on bare metal: IPAM from kubesvc.io LoadBalancerIPPools
(controller.py, its decisions in allocator.py)."""
