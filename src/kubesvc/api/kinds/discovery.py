"""discovery.k8s.io/v1 EndpointSlice: where a Service's traffic can actually go.

The EndpointSlice controller turns "the Pods a Service selects" into slices of at most 100
endpoints each, labelled ``kubernetes.io/service-name=<service>``. Every endpoint carries its
``addresses`` (one IP, of the slice's ``addressType``) and ``conditions``: ``ready`` (may receive
new connections), ``serving`` (would be ready but for terminating) and ``terminating``.
kube-proxy joins all slices of a Service, and ``ports`` give the target port numbers (already
resolved from named ``targetPort``\\s). ``hints`` let topology-aware routing keep traffic in a
zone (``forZones``) or on a node (``forNodes``).

``addressType`` is required and immutable; the Python client refuses a slice without it.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import OBJECT_REFERENCE, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import BOOL, INT32, STRING, STRING_MAP, F, ListOf, Obj, Scalar

DISCOVERY = "io.k8s.api.discovery.v1."


def _named(kind: str, what: str) -> Obj:
    return Obj(DISCOVERY + kind, {"name": F(STRING, f"name represents the name of the {what}.")},
               description=f"{kind} provides information about which {what}s should consume this endpoint.",
               required=("name",))


ENDPOINT_CONDITIONS = Obj(
    DISCOVERY + "EndpointConditions",
    {
        "ready": F(BOOL, "ready indicates that this endpoint is ready to receive traffic, according to whatever "
                         'system is managing the endpoint. A nil value should be interpreted as "true".'),
        "serving": F(BOOL, "serving indicates that this endpoint is able to receive traffic, according to whatever "
                           'system is managing the endpoint. A nil value should be interpreted as "true".'),
        "terminating": F(BOOL, 'terminating indicates that this endpoint is terminating. A nil value should be '
                               'interpreted as "false".'),
    },
    description="EndpointConditions represents the current condition of an endpoint.",
)

ENDPOINT_HINTS = Obj(
    DISCOVERY + "EndpointHints",
    {
        "forZones": F(ListOf(_named("ForZone", "zone")), "forZones indicates the zone(s) this endpoint should be "
                                                         "consumed by when using topology aware routing."),
        "forNodes": F(ListOf(_named("ForNode", "node")), "forNodes indicates the node(s) this endpoint should be "
                                                         "consumed by when using topology aware routing."),
    },
    description="EndpointHints provides hints describing how an endpoint should be consumed.",
)

ENDPOINT = Obj(
    DISCOVERY + "Endpoint",
    {
        "addresses": F(ListOf(STRING, "set"), "addresses of this endpoint. For EndpointSlices of addressType \"IPv4\" "
                                              "or \"IPv6\", the values are IP addresses in canonical form."),
        "conditions": F(ENDPOINT_CONDITIONS, "conditions contains information about the current status of the "
                                             "endpoint."),
        "hostname": F(STRING, "hostname of this endpoint. This field may be used by consumers of endpoints to "
                              "distinguish endpoints from each other (e.g. in DNS names)."),
        "targetRef": F(OBJECT_REFERENCE, "targetRef is a reference to a Kubernetes object that represents this "
                                         "endpoint."),
        "deprecatedTopology": F(STRING_MAP, "deprecatedTopology contains topology information part of the v1beta1 "
                                            "API. This field is deprecated, and will be removed when the v1beta1 API "
                                            "is removed."),
        "nodeName": F(STRING, "nodeName represents the name of the Node hosting this endpoint. This can be used to "
                              "determine endpoints local to a Node."),
        "zone": F(STRING, "zone is the name of the Zone this endpoint exists in."),
        "hints": F(ENDPOINT_HINTS, "hints contains information associated with how an endpoint should be consumed."),
    },
    description='Endpoint represents a single logical "backend" implementing a service.',
    required=("addresses",),
)

ENDPOINT_PORT = Obj(
    DISCOVERY + "EndpointPort",
    {
        "name": F(STRING, "name represents the name of this port. All ports in an EndpointSlice must have a unique "
                          "name."),
        "protocol": F(Scalar("string", enum=("SCTP", "TCP", "UDP")),
                      "protocol represents the IP protocol for this port. Must be UDP, TCP, or SCTP. Default is TCP."),
        "port": F(INT32, "port represents the port number of the endpoint. If the EndpointSlice is derived from a "
                         "Kubernetes service, this must be set to the service's target port."),
        "appProtocol": F(STRING, "The application protocol for this port. This is used as a hint for implementations "
                                 "to offer richer behavior for protocols that they understand."),
    },
    description="EndpointPort represents a Port used by an EndpointSlice",
    map_type="atomic",
)

ENDPOINT_SLICE = kind_schema(
    DISCOVERY + "EndpointSlice", ("discovery.k8s.io", "v1", "EndpointSlice"),
    "EndpointSlice represents a set of service endpoints. Most EndpointSlices are created by the EndpointSlice "
    "controller to represent the Pods selected by Service objects.",
    {
        "addressType": F(Scalar("string", enum=("FQDN", "IPv4", "IPv6")),
                         "addressType specifies the type of address carried by this EndpointSlice. All addresses in "
                         "this slice must be the same type. This field is immutable after creation."),
        "endpoints": F(ListOf(ENDPOINT), "endpoints is a list of unique endpoints in this slice. Each slice may "
                                         "include a maximum of 1000 endpoints."),
        "ports": F(ListOf(ENDPOINT_PORT), "ports specifies the list of network ports exposed by each endpoint in this "
                                          "slice."),
    },
    required=("addressType", "endpoints"),
)

register(KindInfo(
    "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", namespaced=True,
    schema=ENDPOINT_SLICE,
))
