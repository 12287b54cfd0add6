"""The cluster DNS add-on as ``kubesvc up`` installs it, after k3s's manifests/coredns.yaml:

- ServiceAccount ``kube-system/coredns``;
- ClusterRole ``system:coredns`` (label ``kubernetes.io/bootstrapping: rbac-defaults``):
  list and watch ``services``, ``namespaces`` and ``discovery.k8s.io`` ``endpointslices``:
  what ``kubesvc dns`` reads, nothing more (k3s's and kubeadm's also grant ``endpoints`` and
  ``pods``; here ``pods`` only when the add-on runs ``--pods verified``, the one mode that
  watches them), bound to that ServiceAccount by the ClusterRoleBinding ``system:coredns``;
- Service ``kube-system/kube-dns`` at the tenth address of the Service range (``10.96.0.10``),
  ports ``dns`` 53/UDP, ``dns-tcp`` 53/TCP, ``metrics`` 9153/TCP, labels ``k8s-app: kube-dns``,
  ``kubernetes.io/cluster-service: "true"`` and ``kubernetes.io/name: CoreDNS`` (what
  ``kubectl cluster-info`` lists: "CoreDNS is running at ..."), the Prometheus annotations;
- Deployment ``kube-system/coredns`` (one replica, ``dnsPolicy: Default``: the DNS Pod
  forwards to the node's resolvers), its container running ``kubesvc dns --pods insecure``
  (the ``pods insecure`` of both k3s's and kubeadm's Corefile) with the readiness
  probe ``/ready`` on 8181 (period 2 s) and the liveness probe ``/health`` on 8080 (initial
  delay 60 s, period 10 s, 3 failures), as k3s's. While the apiserver serves no
  ``apps/v1`` Deployments (or, under ``up``, while the controller-manager runs no deployment and
replicaset controllers), a bare Pod ``coredns`` stands in (nothing then recreates it).

:func:`install` creates what is missing and leaves what exists (the next ``up`` on the same
data directory finds them in the store), as the admin.
"""

from __future__ import annotations

import ipaddress
import logging
import sys

log = logging.getLogger("kubesvc.dns.addon")

NAMESPACE = "kube-system"
NAME = "coredns"
SERVICE = "kube-dns"
LABELS = {"k8s-app": "kube-dns"}
ROLE = "system:coredns"
HEALTH_PORT, READY_PORT, METRICS_PORT = 8080, 8181, 9153


def cluster_dns_ip(service_cidr: str) -> str:
    """The DNS Service's address: the tenth of the Service range (kubeadm's and k3s's choice)."""
    return str(ipaddress.ip_network(service_cidr, strict=False)[10])


PODS_MODE = "insecure"  # k3s's and kubeadm's Corefile: kubernetes <zone> ... { pods insecure }


def objects(cluster_dns: str, cluster_domain: str, *, deployment: bool, python: str = sys.executable, pods: str = PODS_MODE) -> list[dict]:
    """The add-on's objects, in creation order; ``pods``: the ``--pods`` mode it runs."""
    bootstrapping = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    container = {
        "name": NAME,
        "image": "kubesvc",
        "command": [python, "-m", "kubesvc", "dns", "--cluster-domain", cluster_domain, "--pods", pods],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],  # its own address, for the zone's NS
        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}, {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": READY_PORT, "scheme": "HTTP"}, "periodSeconds": 2, "timeoutSeconds": 1,
                           "successThreshold": 1, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/health", "port": HEALTH_PORT, "scheme": "HTTP"}, "initialDelaySeconds": 60, "periodSeconds": 10,
                          "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
    }
    pod_spec = {"serviceAccountName": NAME, "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical",
                "terminationGracePeriodSeconds": 2, "containers": [container]}
    workload_labels = {**LABELS, "kubernetes.io/name": "CoreDNS"}
    if deployment:
        workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": workload_labels},
                    "spec": {"replicas": 1, "revisionHistoryLimit": 0, "selector": {"matchLabels": dict(LABELS)},
                             "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                             "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod_spec}}}
    else:
        workload = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": workload_labels},
                    "spec": pod_spec}
    family = "IPv6" if ":" in cluster_dns else "IPv4"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE, "labels": bootstrapping},
         "rules": [{"apiGroups": [""], "resources": ["services", "namespaces", *(["pods"] if pods == "verified" else [])], "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": ROLE, "labels": bootstrapping, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                      "labels": {**LABELS, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                      "annotations": {"prometheus.io/port": str(METRICS_PORT), "prometheus.io/scrape": "true"}},
         "spec": {"selector": dict(LABELS), "clusterIP": cluster_dns, "clusterIPs": [cluster_dns], "ipFamilies": [family],
                  "ipFamilyPolicy": "SingleStack",
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                            {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT}]}},
        workload,
    ]


async def serves_deployments(client) -> bool:
    from kubesvc.client.rest import ClientError

    try:
        resources = await client.get("/apis/apps/v1")
    except ClientError:
        return False
    return any(r.get("name") == "deployments" for r in (resources or {}).get("resources") or [])


async def install(client, cluster_dns: str, cluster_domain: str, *, deployment: bool | None = None, pods: str = PODS_MODE) -> list[str]:
    """Create the add-on's missing objects; what was created ("kind/name"). ``deployment``:
    a Deployment (True) or a bare Pod (False); None: a Deployment if the API serves them.
    ``pods``: the server's ``--pods`` mode (``verified`` also grants list/watch on Pods)."""
    from kubesvc.client.rest import Resource, is_already_exists, is_not_found

    created = []
    if deployment is None:
        deployment = await serves_deployments(client)
    for obj in objects(cluster_dns, cluster_domain, deployment=deployment, pods=pods):
        group, _, version = obj["apiVersion"].rpartition("/")
        namespaced = "namespace" in obj["metadata"]
        plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
                  "Service": "services", "Deployment": "deployments", "Pod": "pods"}[obj["kind"]]
        api = client.resource(Resource(group, version, plural, namespaced, obj["kind"]))
        namespace = obj["metadata"].get("namespace")
        try:  # looked up first: a Service created again is refused for its IP (422) before its name (409)
            await api.get(obj["metadata"]["name"], namespace=namespace)
            continue
        except Exception as err:  # noqa: BLE001
            if not is_not_found(err):
                raise
        try:
            await api.create(obj, namespace=namespace)
            created.append(f"{obj['kind'].lower()}/{obj['metadata']['name']}")
        except Exception as err:  # noqa: BLE001 - AlreadyExists is the normal second up
            if not is_already_exists(err):
                raise
    return created
