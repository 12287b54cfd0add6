"""networking.k8s.io/v1 IPAddress and ServiceCIDR: the objects behind ClusterIP allocation.

A **ServiceCIDR** declares a range ClusterIPs are allocated from (``spec.cidrs``: at most one
IPv4 and one IPv6 prefix); its ``Ready`` condition says whether the allocator may use it. Every
allocated ClusterIP is an **IPAddress** object named by the IP itself (``10.96.0.10``,
``2001:db8::1``) whose ``spec.parentRef`` points at the Service that holds it. Creating the
IPAddress is the allocation: the name is unique, so two Services can never hold one IP, and the
repair loop reconciles IPAddresses against Services.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import CONDITION, keyed_by_type, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import STRING, F, ListOf, Obj

NETWORKING = "io.k8s.api.networking.v1."

PARENT_REFERENCE = Obj(
    NETWORKING + "ParentReference",
    {
        "group": F(STRING, "Group is the group of the object being referenced."),
        "resource": F(STRING, "Resource is the resource of the object being referenced."),
        "namespace": F(STRING, "Namespace is the namespace of the object being referenced."),
        "name": F(STRING, "Name is the name of the object being referenced."),
    },
    description="ParentReference describes a reference to a parent object.",
    required=("resource", "name"),
)

IP_ADDRESS = kind_schema(
    NETWORKING + "IPAddress", ("networking.k8s.io", "v1", "IPAddress"),
    "IPAddress represents a single IP of a single IP Family. The object is designed to be used by APIs that operate "
    "on IP addresses. The object is used by the Service core API for allocation of IP addresses.",
    {
        "spec": F(Obj(NETWORKING + "IPAddressSpec", {
            "parentRef": F(PARENT_REFERENCE, "ParentRef references the resource that an IPAddress is attached to. An "
                                             "IPAddress must reference a parent object."),
        }, description="IPAddressSpec describe the attributes in an IP Address.", required=("parentRef",)),
            "spec is the desired state of the IPAddress."),
    },
)

SERVICE_CIDR = kind_schema(
    NETWORKING + "ServiceCIDR", ("networking.k8s.io", "v1", "ServiceCIDR"),
    "ServiceCIDR defines a range of IP addresses using CIDR format (e.g. 192.168.0.0/24 or 2001:db2::/64). This range "
    "is used to allocate ClusterIPs to Service objects.",
    {
        "spec": F(Obj(NETWORKING + "ServiceCIDRSpec", {
            "cidrs": F(ListOf(STRING), 'CIDRs defines the IP blocks in CIDR notation (e.g. "192.168.0.0/24" or '
                                       '"2001:db8::/64") from which to assign service cluster IPs. Max of two CIDRs is '
                                       'allowed, one of each IP family. This field is immutable.'),
        }, description="ServiceCIDRSpec define the CIDRs the user wants to use for allocating ClusterIPs for "
                       "Services."),
            "spec is the desired state of the ServiceCIDR."),
        "status": F(Obj(NETWORKING + "ServiceCIDRStatus", {
            "conditions": F(keyed_by_type(CONDITION), "conditions holds an array of metav1.Condition that describe "
                                                      "the state of the ServiceCIDR."),
        }, description="ServiceCIDRStatus describes the current state of the ServiceCIDR."),
            "status represents the current state of the ServiceCIDR."),
    },
)

register(KindInfo(
    "networking.k8s.io", "v1", "IPAddress", "ipaddresses", "ipaddress", namespaced=False, schema=IP_ADDRESS,
))
register(KindInfo(
    "networking.k8s.io", "v1", "ServiceCIDR", "servicecidrs", "servicecidr", namespaced=False, schema=SERVICE_CIDR,
    subresources=("status",),
))
