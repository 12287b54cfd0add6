"""The EndpointSlice mirroring controller (kube-controller-manager's ``endpointslicemirroring``).

Services without a selector get their endpoints from whoever writes their Endpoints object by
hand (an external database, a VM, another cluster). kube-proxy reads only EndpointSlices, so
this controller *mirrors* such custom Endpoints into EndpointSlices labelled
``endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io``.

* ``reconciler``: the pure decision (Endpoints + Service + mirrored slices -> a Plan);
* ``controller``: the shell (event handlers, work queue, writes, Events);
* ``metrics``: upstream's ``endpoint_slice_mirroring_controller_*`` metrics.
"""

from kubesvc.controllers.mirroring.controller import EndpointSliceMirroringController
from kubesvc.controllers.mirroring.metrics import EndpointSliceMirroringMetrics
from kubesvc.controllers.mirroring.reconciler import CONTROLLER_NAME, Plan, reconcile, repack_subsets

__all__ = ["CONTROLLER_NAME", "EndpointSliceMirroringController", "EndpointSliceMirroringMetrics", "Plan", "reconcile", "repack_subsets"]
