"""LoadBalancer addresses on bare metal: IPAM from kubesvc.io LoadBalancerIPPools
(controller.py, its decisions in allocator.py; ``up --loadbalancer-pool``: defaultpool.py) and
the node side, one Lease-elected node answering ARP per address (announcer.py, kernel/arp.py)."""
