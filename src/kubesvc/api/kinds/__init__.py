"""Every served kind, one module per API group; importing this package registers them all.

``kubesvc.api.scheme.all_kinds()`` imports it, so the kind table is complete before anything
routes, discovers, documents or stores a kind. Each group module declares its schemas (see
``kubesvc.api.schema``) and calls ``register(KindInfo(...))`` with the discovery facts upstream
serves: resource names, scope, short names, categories, subresources and selectable fields.
"""

# Import order is registration order, which is discovery order: the core group first, as upstream.
from kubesvc.api.kinds import core, replicationcontroller, discovery, networking, coordination, rbac, authentication, authorization, certificates  # noqa: F401, I001, E501
from kubesvc.api.kinds import apps, batch  # noqa: F401, I001
from kubesvc.api.kinds import loadbalancer  # noqa: F401, I001
