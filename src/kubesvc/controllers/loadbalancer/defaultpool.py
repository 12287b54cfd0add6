"""``kubesvc up --loadbalancer-pool FIRST-LAST[,CIDR...]``: the simple case of k3s's ServiceLB
and MetalLB's quick start, one pool named ``default`` serving every LoadBalancer Service.

Each comma-separated item is a range ``FIRST-LAST`` (both included, one family, in order), a
CIDR, or one address; they become the pool's ``spec.blocks`` (api/kinds/loadbalancer.py), so
``up`` writes exactly the object a user could have applied. ``up`` creates the pool when it is
missing and replaces its blocks when the flag changed; without the flag it leaves any pool alone.
"""

from __future__ import annotations

import ipaddress

from kubesvc.client.rest import RestClient, is_not_found, ClientError
from kubesvc.controllers.loadbalancer.controller import LOADBALANCER_IP_POOLS

DEFAULT_POOL = "default"


def parse_pool_flag(text: str) -> list[dict]:
    """The pool blocks of the flag's value; ValueError (one line) when an item is not one."""
    blocks: list[dict] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "/" in item:
            try:
                blocks.append({"cidr": str(ipaddress.ip_network(item, strict=False))})
            except ValueError:
                raise ValueError(f"{item!r} is not a CIDR") from None
            continue
        first_text, _, last_text = item.partition("-")
        try:
            first = ipaddress.ip_address(first_text.strip())
            last = ipaddress.ip_address(last_text.strip()) if last_text else first
        except ValueError:
            raise ValueError(f"{item!r} is not FIRST-LAST, a CIDR or an address") from None
        if first.version != last.version or last < first:
            raise ValueError(f"{item!r}: FIRST and LAST must be of one family, FIRST not after LAST")
        blocks.append({"start": str(first), "stop": str(last)})
    if not blocks:
        raise ValueError("no addresses given")
    return blocks


def pool_object(blocks: list[dict]) -> dict:
    return {"apiVersion": "kubesvc.io/v1alpha1", "kind": "LoadBalancerIPPool", "metadata": {"name": DEFAULT_POOL},
            "spec": {"blocks": blocks}}


async def ensure_default_pool(client: RestClient, blocks: list[dict]) -> None:
    pools = client.resource(LOADBALANCER_IP_POOLS)
    try:
        current = await pools.get(DEFAULT_POOL)
    except ClientError as err:
        if not is_not_found(err):
            raise
        await pools.create(pool_object(blocks))
        return
    if (current.get("spec") or {}).get("blocks") != blocks:
        await pools.patch(DEFAULT_POOL, {"spec": {"blocks": blocks}})
