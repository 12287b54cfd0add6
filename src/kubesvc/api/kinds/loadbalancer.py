"""kubesvc.io/v1alpha1 LoadBalancerIPPool: addresses the ``service-lb-controller`` gives to
``type: LoadBalancer`` Services on bare metal (controllers/loadbalancer).

Modelled on Cilium's ``CiliumLoadBalancerIPPool`` (cilium.io/v2alpha1, LB-IPAM,
docs.cilium.io "LoadBalancer IP Address Management"), with the same field names so a
Cilium pool reads the same here:

* ``spec.blocks``: the addresses, each ``{cidr: 10.0.0.0/28}`` or ``{start: 10.0.0.10,
  stop: 10.0.0.20}`` (both ends included; ``stop`` may be left out for one address). In an
  IPv4 CIDR shorter than /31 the network and broadcast addresses are not given out (Cilium's
  ``allowFirstLastIPs: No``); an explicit start-stop range is given out whole.
* ``spec.serviceSelector``: a label selector; only Services it matches get addresses from the
  pool. Left out, the pool serves every Service.
* ``spec.disabled``: no new addresses from this pool; the ones given out stay (as Cilium).

The kind is cluster-scoped (an address range belongs to the LAN, not to a namespace), short
name ``lbippool``. ``kubesvc up --loadbalancer-pool FIRST-LAST[,CIDR...]`` creates one named
``default``.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import LABEL_SELECTOR, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, STRING, F, ListOf, Obj

KUBESVC_GROUP = "kubesvc.io"
LOADBALANCER_VERSION = "v1alpha1"

POOL_BLOCK = Obj(
    "io.kubesvc.v1alpha1.LoadBalancerIPPoolBlock",
    {
        "cidr": F(STRING, "cidr is a block of addresses in CIDR notation (10.0.0.0/28, 2001:db8::/120)."),
        "start": F(STRING, "start is the first address of a range; with stop, both included."),
        "stop": F(STRING, "stop is the last address of a range that starts at start (default: start)."),
    },
    description="A block of addresses: a CIDR, or a start-stop range.",
)

POOL_SPEC = Obj(
    "io.kubesvc.v1alpha1.LoadBalancerIPPoolSpec",
    {
        "blocks": F(ListOf(POOL_BLOCK), "blocks are the addresses of the pool."),
        "serviceSelector": F(LABEL_SELECTOR, "serviceSelector selects the Services that may get addresses from this "
                                             "pool; unset: every Service."),
        "disabled": F(BOOL, "disabled stops the pool giving out new addresses; addresses already given out stay."),
    },
    description="LoadBalancerIPPoolSpec is the addresses of a pool and which Services may use them.",
    required=("blocks",),
)

LOADBALANCER_IP_POOL = kind_schema(
    "io.kubesvc.v1alpha1.LoadBalancerIPPool", (KUBESVC_GROUP, LOADBALANCER_VERSION, "LoadBalancerIPPool"),
    "LoadBalancerIPPool is a pool of addresses for Services of type LoadBalancer.",
    {"spec": F(POOL_SPEC, "spec is the pool's addresses and the Services it serves.")},
)

register(KindInfo(
    KUBESVC_GROUP, LOADBALANCER_VERSION, "LoadBalancerIPPool", "loadbalancerippools", "loadbalancerippool",
    namespaced=False, schema=LOADBALANCER_IP_POOL, short_names=("lbippool",),
))
