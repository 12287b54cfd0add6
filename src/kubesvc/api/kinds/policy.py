"""policy/v1 Eviction: the body of ``POST pods/NAME/eviction``.

An Eviction names the Pod to evict (``metadata.name``, which must be the URL's) and may carry
``deleteOptions`` for the delete it causes (grace period, preconditions, dry run). Like Binding
and Scale it is never stored, listed or watched: described here for decoding, discovery
(``pods/eviction`` lists group ``policy``, version ``v1``, kind ``Eviction``, which is how
``kubectl drain`` finds it) and OpenAPI.
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import DELETE_OPTIONS, kind_schema
from kubesvc.api.scheme import KindInfo
from kubesvc.api.schema import F

POLICY = "io.k8s.api.policy.v1."

EVICTION = kind_schema(
    POLICY + "Eviction", ("policy", "v1", "Eviction"),
    "Eviction evicts a pod from its node subject to certain policies and safety constraints. This is a subresource of Pod.  "
    "A request to cause such an eviction is created by POSTing to .../pods/<pod name>/evictions.",
    {
        "deleteOptions": F(DELETE_OPTIONS, "DeleteOptions may be provided"),
    },
)

# not registered: never stored, listed or watched; only POSTed to ``pods/NAME/eviction``
EVICTION_INFO = KindInfo("policy", "v1", "Eviction", "evictions", "eviction", namespaced=True, schema=EVICTION)
