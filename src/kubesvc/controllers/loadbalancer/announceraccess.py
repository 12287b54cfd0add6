"""Where the L2 announcers' Leases live and who may write them: the namespace ``kubesvc-lb``
with a Role there (Leases get/list/watch/create/update/delete) bound to the announcers'
identity, as Cilium keeps its ``cilium-l2announce-*`` Leases in its own namespace; and a
ClusterRole reading LoadBalancerIPPools (get/list/watch), since an announcer answers only for
addresses of a pool (announcer.py), as MetalLB's speaker reads its IPAddressPools.

Why a namespace of its own: a Lease per address in the Service's namespace would need Lease
write in every namespace, a ClusterRole that would also let a node take kube-system's
``kube-controller-manager`` or ``kube-scheduler`` Lease. Here the announcers may write Leases
in ``kubesvc-lb`` and nowhere else.

The identity: the announcer also lists and watches Services and EndpointSlices. A node
(``system:node:<name>``, group ``system:nodes``) may read Services but not EndpointSlices
(upstream's ``NodeRules()``), and whatever RBAC says, NodeRestriction admission refuses a node
any Lease outside ``kube-node-lease`` (upstream's ``admitLease``), so the announcer runs as
kube-proxy's identity, ``system:kube-proxy`` (ClusterRole ``system:node-proxier``: list/watch
of both), and the Role and the pool reader are bound to that user. A machine that joined with
``kubesvc join`` gets that identity as k3s's joining agents do (k3s's supervisor gives them a
``system:kube-proxy`` certificate): its node asks for a ``kubernetes.io/kube-apiserver-client``
certificate for ``system:kube-proxy``, which csrapproving approves for a node
(``nodejoin/tlsbootstrap.py``, ``controllers/certificates``), and runs its proxy and its
announcer with it. (MetalLB's speaker and Cilium's agent get theirs as DaemonSet Pods with a
ServiceAccount token.) ``up`` creates these as the admin (``ensure``), beside the default pool.
"""

from __future__ import annotations

from kubesvc.client.rest import NAMESPACES, ClientError, Resource, RestClient, is_already_exists

ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", True, "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding")

LEASE_NAMESPACE = "kubesvc-lb"
ROLE_NAME = "kubesvc:lb-announcer"
ANNOUNCER_USER = "system:kube-proxy"
LEASE_VERBS = ["get", "list", "watch", "create", "update", "delete"]


def namespace_object() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}


def role_object() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": ROLE_NAME, "namespace": LEASE_NAMESPACE},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": list(LEASE_VERBS)}]}


def _subjects() -> list[dict]:
    return [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ANNOUNCER_USER}]


def role_binding_object() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": ROLE_NAME, "namespace": LEASE_NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": _subjects()}


def pool_reader_object() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE_NAME},
            "rules": [{"apiGroups": ["kubesvc.io"], "resources": ["loadbalancerippools"], "verbs": ["get", "list", "watch"]}]}


def pool_reader_binding_object() -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE_NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE_NAME},
            "subjects": _subjects()}


def access_objects() -> list[tuple[Resource, dict]]:
    """Every object ``ensure`` makes, in creation order, with its resource."""
    return [(NAMESPACES, namespace_object()), (ROLES, role_object()), (ROLE_BINDINGS, role_binding_object()),
            (CLUSTER_ROLES, pool_reader_object()), (CLUSTER_ROLE_BINDINGS, pool_reader_binding_object())]


async def ensure(client: RestClient) -> None:
    """Create the namespace, Role, ClusterRole and their bindings where missing (as the admin);
    what exists is left as it is."""
    for resource, obj in access_objects():
        try:
            await client.resource(resource).create(obj, **({"namespace": LEASE_NAMESPACE} if resource.namespaced else {}))
        except ClientError as err:
            if not is_already_exists(err):
                raise
