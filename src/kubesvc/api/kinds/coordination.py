"""coordination.k8s.io/v1 Lease: a named lock with a lease time, used for leader election.

A candidate takes the lease by writing its ``holderIdentity``, ``acquireTime`` and
``renewTime``; it stays leader while it renews more often than ``leaseDurationSeconds``. Another
candidate may take over once ``renewTime + leaseDurationSeconds`` has passed, bumping
``leaseTransitions``. The update is guarded by ``metadata.resourceVersion``, so only one
candidate wins a race. Times are MicroTime (RFC3339 with microseconds).
"""

from __future__ import annotations

from kubesvc.api.kinds.meta import MICRO_TIME, kind_schema
from kubesvc.api.scheme import KindInfo, register
from kubesvc.api.schema import INT32, STRING, F, Obj

LEASE_SPEC = Obj(
    "io.k8s.api.coordination.v1.LeaseSpec",
    {
        "holderIdentity": F(STRING, "holderIdentity contains the identity of the holder of a current lease."),
        "leaseDurationSeconds": F(INT32, "leaseDurationSeconds is a duration that candidates for a lease need to wait "
                                         "to force acquire it. This is measured against the time of last observed "
                                         "renewTime."),
        "acquireTime": F(MICRO_TIME, "acquireTime is a time when the current lease was acquired."),
        "renewTime": F(MICRO_TIME, "renewTime is a time when the current holder of a lease has last updated the "
                                   "lease."),
        "leaseTransitions": F(INT32, "leaseTransitions is the number of transitions of a lease between holders."),
        "strategy": F(STRING, "Strategy indicates the strategy for picking the leader for coordinated leader "
                              "election."),
        "preferredHolder": F(STRING, "PreferredHolder signals to a lease holder that the lease has a more optimal "
                                     "holder and should be given up."),
    },
    description="LeaseSpec is a specification of a Lease.",
)

LEASE = kind_schema(
    "io.k8s.api.coordination.v1.Lease", ("coordination.k8s.io", "v1", "Lease"),
    "Lease defines a lease concept.",
    {"spec": F(LEASE_SPEC, "spec contains the specification of the Lease.")},
)

register(KindInfo(
    "coordination.k8s.io", "v1", "Lease", "leases", "lease", namespaced=True, schema=LEASE,
))
