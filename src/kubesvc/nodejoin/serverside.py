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
* ``kubesvc:node-proxier``: ``system:node-proxier`` to ``system:nodes``: the node's own identity
  follows Services, EndpointSlices and Nodes (the agent's Pod network reads every Node);
* ``kubesvc:node-autoapprove-kube-proxy-client``: ClusterRole
  ``kubesvc:certificatesigningrequests:nodekubeproxyclient`` (``create`` of that
  virtual subresource) to ``system:nodes``, so csrapproving approves a node's request for
  kube-proxy's client certificate (controllers/certificates/approver.py; k3s's supervisor hands
  its agents one for the node token), and ``kubesvc:kube-apiserver-client-approver`` (``approve``
  on signer ``kubernetes.io/kube-apiserver-client``) to csrapproving's ServiceAccount
  ``kube-system/certificate-controller``, which upstream lets approve kubelet client requests only.

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
ROLES_PATH = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
KUBE_PROXY_CLIENT_ROLE = "kubesvc:certificatesigningrequests:nodekubeproxyclient"  # not system:, which upstream reserves
CLIENT_APPROVER_ROLE = "kubesvc:kube-apiserver-client-approver"
APPROVER_SERVICE_ACCOUNT = ("kube-system", "certificate-controller")


def kube_proxy_client_roles() -> list[dict]:
    def role(name: str, rule: dict) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": [rule]}

    return [role(KUBE_PROXY_CLIENT_ROLE, {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/nodekubeproxyclient"],
                                          "verbs": ["create"]}),
            role(CLIENT_APPROVER_ROLE, {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                                        "resourceNames": ["kubernetes.io/kube-apiserver-client"], "verbs": ["approve"]})]


def kube_proxy_client_bindings() -> list[dict]:
    namespace, name = APPROVER_SERVICE_ACCOUNT
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": [subject]}
            for binding, role, subject in (
                ("kubesvc:node-autoapprove-kube-proxy-client", KUBE_PROXY_CLIENT_ROLE,
                 {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}),
                (CLIENT_APPROVER_ROLE, CLIENT_APPROVER_ROLE, {"kind": "ServiceAccount", "name": name, "namespace": namespace}))]


def node_bootstrap_bindings() -> list[dict]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}
            for name, role, group in BINDINGS]


async def publish_node_bootstrap(client) -> None:
    from kubesvc.client.rest import is_already_exists

    for path, obj in [*((ROLES_PATH, r) for r in kube_proxy_client_roles()),
                      *((PATH, b) for b in [*node_bootstrap_bindings(), *kube_proxy_client_bindings()])]:
        try:
            await client.create(path, obj)
        except Exception as err:
            if not is_already_exists(err):
                raise
