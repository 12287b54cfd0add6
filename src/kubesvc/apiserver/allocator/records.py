"""Where allocations live in the store.

* A ClusterIP is an IPAddress object (networking.k8s.io/v1), ``/registry/ipaddresses/<ip>``,
  named by the canonical IP, labelled ``ipaddress.kubernetes.io/ip-family`` and
  ``ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io``, with ``spec.parentRef`` to
  the Service (upstream's IPAddress allocator, GA in 1.33).
* A NodePort is ``/registry/servicenodeports/<port>`` holding the owning Service's
  namespace and name. Upstream keeps one RangeAllocation bitmap at ``/registry/servicenodeports``;
  one key per port lets the store's create-if-absent decide races, so two Services can
  never commit the same port, and a Service and its ports commit in one transaction.
"""

from __future__ import annotations

import json

from kubesvc.util.ipnet import ip_family

NODE_PORT_PREFIX = "/registry/servicenodeports/"
IP_ADDRESS_PREFIX = "/registry/ipaddresses/"
LABEL_IP_FAMILY = "ipaddress.kubernetes.io/ip-family"
LABEL_MANAGED_BY = "ipaddress.kubernetes.io/managed-by"
IPALLOCATOR_MANAGER = "ipallocator.k8s.io"


def ip_address_key(ip: str) -> str:
    return IP_ADDRESS_PREFIX + ip


def node_port_key(port: int) -> str:
    return f"{NODE_PORT_PREFIX}{port}"


def ip_of_key(key: str) -> str:
    """The IP an IPAddress key names (IPAddress names are canonical IPs)."""
    return key[len(IP_ADDRESS_PREFIX):]


def port_of_key(key: str) -> int | None:
    """The port a NodePort record's key names, or None when it names none."""
    try:
        return int(key[len(NODE_PORT_PREFIX):])
    except ValueError:
        return None


def service_ref(namespace: str, name: str) -> dict:
    return {"group": "", "resource": "services", "namespace": namespace, "name": name}


def ip_address_object(ip: str, namespace: str, name: str) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip,
            "labels": {LABEL_IP_FAMILY: ip_family(ip), LABEL_MANAGED_BY: IPALLOCATOR_MANAGER},
        },
        "spec": {"parentRef": service_ref(namespace, name)},
    }


def ip_address_owner(obj: dict) -> tuple[str, str] | None:
    """(namespace, name) of the Service an IPAddress belongs to, or None."""
    ref = (obj.get("spec") or {}).get("parentRef") or {}
    if ref.get("group", "") != "" or ref.get("resource") != "services":
        return None
    return ref.get("namespace") or "", ref.get("name") or ""


def node_port_record(namespace: str, name: str) -> bytes:
    return json.dumps({"namespace": namespace, "name": name}, separators=(",", ":")).encode()


def node_port_owner(value: bytes) -> tuple[str, str] | None:
    try:
        data = json.loads(value)
        return str(data["namespace"]), str(data["name"])
    except (ValueError, KeyError, TypeError):
        return None
