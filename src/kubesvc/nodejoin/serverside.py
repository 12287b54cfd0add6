"""What a cluster grants so that machines can join it as nodes (kubeadm's ``bootstrap-token``
init phase, ``cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go``), written by
``kubesvc up --cluster-init`` as the admin:

* ``kubeadm:kubelet-bootstrap``: ClusterRole ``system:node-bootstrapper`` (create and read
  CertificateSigningRequests) to the group of node tokens,
  ``system:bootstrappers:kubeadm:default-node-token``;
* ``kubeadm:node-autoapprove-bootstrap``: ``...:certificatesigningrequests:nodeclient`` to that
  group, so csrapproving approves a node's first certificate;
* ``kubeadm:node-autoapprove-certificate-rotation``: ``...:selfnodeclient`` to ``system:nodes``,
  so it approves a node renewing its own;
* ``kubesvc:node-proxier``: ``system:node-proxier`` to ``system:nodes``: a joined machine runs
  its proxy with the node's credentials (k3s gives its agents a kube-proxy certificate for the
  same reads: Services, EndpointSlices, Nodes, Events).

Existing bindings are left as they are (an administrator may have narrowed them).
"""

from __future__ import annotations

from kubesvc.nodejoin.tlsbootstrap import NODE_BOOTSTRAP_GROUP

BINDINGS = (
    ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", NODE_BOOTSTRAP_GROUP),
    ("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", NODE_BOOTSTRAP_GROUP),
    ("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
    ("kubesvc:node-proxier", "system:node-proxier", "system:nodes"),
)
PATH = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"


def node_bootstrap_bindings() -> list[dict]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}
            for name, role, group in BINDINGS]


async def publish_node_bootstrap(client) -> None:
    from kubesvc.client.rest import is_already_exists

    for binding in node_bootstrap_bindings():
        try:
            await client.create(PATH, binding)
        except Exception as err:
            if not is_already_exists(err):
                raise
