"""The default RBAC policy and its reconciliation at start-up (upstream
plugin/pkg/auth/authorizer/rbac/bootstrappolicy ``policy.go``, ``controller_policy.go``,
``namespace_policy.go``; the ``rbac/bootstrap-roles`` post-start hook of
pkg/registry/rbac/rest/storage_rbac.go with component-helpers auth/rbac/reconciliation;
identity.md §3).

Every default object carries the label ``kubernetes.io/bootstrapping: rbac-defaults`` and the
annotation ``rbac.authorization.kubernetes.io/autoupdate: "true"``. At every start each is
reconciled in *union* mode, as kube-apiserver does:

* a missing role or binding is created;
* an existing role gets the default labels and annotations merged under its own (its own
  values win), every default rule it does not already cover appended (as the atoms
  ``Covers`` reports), the missing aggregation selectors appended, and an aggregationRule
  dropped where the default has none; rules a user added are never removed;
* an existing binding whose ``roleRef`` differs is deleted and recreated; otherwise it gets
  the labels and annotations merged and the missing subjects appended, extra subjects stay;
* an object annotated ``rbac.authorization.kubernetes.io/autoupdate: "false"`` is left alone
  (logged as upstream's ``skipped reconcile-protected``).

Namespaced roles and bindings are reconciled only where their namespace exists. The
rules follow kube-apiserver 1.32 with kubesvc's feature gates (ServiceCIDRs served:
``servicecidrs`` for the proxier and the service-cidrs controller; no DRA, no
ClusterTrustBundles). Upstream's one-time upgrade steps (priming ``system:aggregate-to-*``
from pre-1.9 roles, splitting ``system:public-info-viewer`` from a pre-1.14 binding) have
nothing to migrate in a kubesvc store and are not run.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from kubesvc.api.errors import StatusError
from kubesvc.apiserver.auth.rbac import RBAC_GROUP
from kubesvc.apiserver.auth.rules import PolicyRule, covers, rules_from_api

log = logging.getLogger("kubesvc.apiserver.auth")

AUTO_UPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAP_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
BOOTSTRAP_ANNOTATIONS = {AUTO_UPDATE: "true"}
CONTROLLER_PREFIX = "system:controller:"
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
READ_WRITE = READ + WRITE
READ_UPDATE = READ + ("update", "patch")


def rule(verbs, groups, resources, names=()) -> PolicyRule:
    """upstream ``NewRule(verbs...).Groups(...).Resources(...).Names(...).RuleOrDie()``
    (which sorts every list)."""
    return PolicyRule(tuple(sorted(verbs)), tuple(sorted(groups)), tuple(sorted(resources)), tuple(sorted(names)))


def url_rule(verbs, *urls: str) -> PolicyRule:
    return PolicyRule(tuple(sorted(verbs)), non_resource_urls=tuple(sorted(urls)))


def events_rule() -> PolicyRule:
    return rule(["create", "update", "patch"], ["", "events.k8s.io"], ["events"])


def node_rules() -> list[PolicyRule]:
    """Upstream ``NodeRules()``: ClusterRole ``system:node``, also the Node authorizer's rules
    for the resources it does not subdivide."""
    return [
        rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
        rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews", "localsubjectaccessreviews"]),
        rule(READ, [""], ["services"]),
        rule(["create", "get", "list", "watch"], [""], ["nodes"]),
        rule(["update", "patch"], [""], ["nodes/status"]),
        rule(["update", "patch"], [""], ["nodes"]),
        rule(["create", "update", "patch"], [""], ["events"]),
        rule(READ, [""], ["pods"]),
        rule(["create", "delete"], [""], ["pods"]),
        rule(["update", "patch"], [""], ["pods/status"]),
        rule(["create"], [""], ["pods/eviction"]),
        rule(["get", "list", "watch"], [""], ["secrets", "configmaps"]),
        rule(["get"], [""], ["persistentvolumeclaims", "persistentvolumes"]),
        rule(["get"], [""], ["endpoints"]),
        rule(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
        rule(["get", "create", "update", "patch", "delete"], ["coordination.k8s.io"], ["leases"]),
        rule(["get"], ["storage.k8s.io"], ["volumeattachments"]),
        rule(["create"], [""], ["serviceaccounts/token"]),
        rule(["get", "update", "patch"], [""], ["persistentvolumeclaims/status"]),
        rule(["get", "watch", "list"], ["storage.k8s.io"], ["csidrivers"]),
        rule(["get", "create", "update", "patch", "delete"], ["storage.k8s.io"], ["csinodes"]),
        rule(["get", "list", "watch"], ["node.k8s.io"], ["runtimeclasses"]),
    ]


@dataclass(frozen=True)
class DefaultRole:
    name: str
    rules: tuple[PolicyRule, ...] = ()
    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    aggregate_from: tuple[str, ...] = ()  # aggregate-to-<x> label values the role gathers

    def to_api(self) -> dict:
        meta: dict = {"name": self.name, "labels": {**dict(self.labels), **BOOTSTRAP_LABELS}, "annotations": dict(BOOTSTRAP_ANNOTATIONS)}
        if self.namespace:
            meta["namespace"] = self.namespace
        obj: dict = {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role" if self.namespace else "ClusterRole", "metadata": meta}
        if self.rules:
            obj["rules"] = [r.to_api() for r in self.rules]
        if self.aggregate_from:
            obj["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {AGGREGATE_TO + x: "true"}} for x in self.aggregate_from]}
        return obj


@dataclass(frozen=True)
class DefaultBinding:
    name: str
    role: str
    subjects: tuple[dict, ...]
    namespace: str = ""
    role_kind: str = "ClusterRole"

    def to_api(self) -> dict:
        meta: dict = {"name": self.name, "labels": dict(BOOTSTRAP_LABELS), "annotations": dict(BOOTSTRAP_ANNOTATIONS)}
        if self.namespace:
            meta["namespace"] = self.namespace
        return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding" if self.namespace else "ClusterRoleBinding", "metadata": meta,
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": self.role_kind, "name": self.role}, "subjects": [dict(s) for s in self.subjects]}


def users(*names: str) -> tuple[dict, ...]:
    return tuple({"kind": "User", "apiGroup": RBAC_GROUP, "name": n} for n in names)


def groups(*names: str) -> tuple[dict, ...]:
    return tuple({"kind": "Group", "apiGroup": RBAC_GROUP, "name": n} for n in names)


def service_accounts(namespace: str, *names: str) -> tuple[dict, ...]:
    return tuple({"kind": "ServiceAccount", "name": n, "namespace": namespace} for n in names)


def _aggregated(name: str, aggregate_from: str, label: str = "") -> DefaultRole:
    labels = ((AGGREGATE_TO + label, "true"),) if label else ()
    return DefaultRole(name, (), labels=labels, aggregate_from=(aggregate_from,))


def cluster_roles() -> list[DefaultRole]:
    """Upstream ``ClusterRoles()``."""
    core, apps, batch, ext = "", "apps", "batch", "extensions"
    return [
        DefaultRole("cluster-admin", (rule(["*"], ["*"], ["*"]), url_rule(["*"], "*"))),
        DefaultRole("system:discovery", (url_rule(["get"], "/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*",
                                                  "/api", "/api/*", "/apis", "/apis/*"),)),
        DefaultRole("system:monitoring", (url_rule(["get"], "/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz",
                                                   "/livez/*", "/readyz/*", "/healthz/*"),)),
        DefaultRole("system:basic-user", (rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                                          rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]))),
        DefaultRole("system:public-info-viewer", (url_rule(["get"], "/livez", "/readyz", "/healthz", "/version", "/version/"),)),
        # kubesvc's own: the Service map's page and JSON paths (kubesvc.ui.routes); each object the
        # map shows is still read with the user's own permissions (list pods, list nodes, ...)
        DefaultRole("kubesvc:service-map", (url_rule(["get"], "/ui", "/ui/*"),)),
        _aggregated("admin", "admin"),
        _aggregated("edit", "edit", label="admin"),
        _aggregated("view", "view", label="edit"),
        DefaultRole("system:aggregate-to-admin", (
            rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
            rule(READ_WRITE, [RBAC_GROUP], ["roles", "rolebindings"]),
        ), labels=((AGGREGATE_TO + "admin", "true"),)),
        DefaultRole("system:aggregate-to-edit", (
            rule(READ, [core], ["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"]),
            rule(["impersonate"], [core], ["serviceaccounts"]),
            rule(WRITE, [core], ["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"]),
            rule(["create"], [core], ["pods/eviction"]),
            rule(WRITE, [core], ["replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/proxy",
                                 "persistentvolumeclaims", "configmaps", "secrets", "events"]),
            rule(["create"], [core], ["serviceaccounts/token"]),
            rule(WRITE, [apps], ["statefulsets", "statefulsets/scale", "daemonsets", "deployments", "deployments/scale",
                                 "deployments/rollback", "replicasets", "replicasets/scale"]),
            rule(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
            rule(WRITE, [batch], ["jobs", "cronjobs"]),
            rule(WRITE, [ext], ["daemonsets", "deployments", "deployments/scale", "deployments/rollback", "ingresses", "replicasets",
                                "replicasets/scale", "replicationcontrollers/scale", "networkpolicies"]),
            rule(WRITE, ["policy"], ["poddisruptionbudgets"]),
            rule(WRITE, ["networking.k8s.io"], ["networkpolicies", "ingresses"]),
            rule(READ_WRITE, ["coordination.k8s.io"], ["leases"]),
        ), labels=((AGGREGATE_TO + "edit", "true"),)),
        DefaultRole("system:aggregate-to-view", (
            rule(READ, [core], ["pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status",
                                "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"]),
            rule(READ, [core], ["limitranges", "resourcequotas", "bindings", "events", "pods/status", "resourcequotas/status",
                                "namespaces/status", "replicationcontrollers/status", "pods/log"]),
            rule(READ, [core], ["namespaces"]),
            rule(READ, ["discovery.k8s.io"], ["endpointslices"]),
            rule(READ, [apps], ["controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale", "daemonsets",
                                "daemonsets/status", "deployments", "deployments/status", "deployments/scale", "replicasets",
                                "replicasets/status", "replicasets/scale"]),
            rule(READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
            rule(READ, [batch], ["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
            rule(READ, [ext], ["daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "ingresses",
                               "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale",
                               "networkpolicies"]),
            rule(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
            rule(READ, ["networking.k8s.io"], ["networkpolicies", "ingresses", "ingresses/status"]),
        ), labels=((AGGREGATE_TO + "view", "true"),)),
        DefaultRole("system:heapster", (rule(READ, [core], ["events", "pods", "nodes", "namespaces"]), rule(READ, [ext], ["deployments"]))),
        DefaultRole("system:node", tuple(node_rules())),
        DefaultRole("system:node-problem-detector", (rule(["get"], [core], ["nodes"]), rule(["patch"], [core], ["nodes/status"]), events_rule())),
        DefaultRole("system:node-bootstrapper", (rule(["create", "get", "list", "watch"], ["certificates.k8s.io"], ["certificatesigningrequests"]),)),
        DefaultRole("system:auth-delegator", (rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
                                              rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]))),
        DefaultRole("system:kube-aggregator", (rule(READ, [core], ["services", "endpoints"]),)),
        DefaultRole("system:kube-controller-manager", (
            events_rule(),
            rule(["create"], ["coordination.k8s.io"], ["leases"]),
            rule(["get", "update"], ["coordination.k8s.io"], ["leases"], ["kube-controller-manager"]),
            rule(["create"], [core], ["secrets", "serviceaccounts"]),
            rule(["delete"], [core], ["secrets"]),
            rule(["get"], [core], ["namespaces", "secrets", "serviceaccounts", "configmaps"]),
            rule(["update"], [core], ["secrets", "serviceaccounts"]),
            rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            rule(["list", "watch"], ["*"], ["*"]),
            rule(["create"], [core], ["serviceaccounts/token"]),
        )),
        DefaultRole("system:kube-dns", (rule(["list", "watch"], [core], ["endpoints", "services"]),)),
        DefaultRole("system:persistent-volume-provisioner", (
            rule(["get", "list", "watch", "create", "delete"], [core], ["persistentvolumes"]),
            rule(["get", "list", "watch", "update"], [core], ["persistentvolumeclaims"]),
            rule(READ, ["storage.k8s.io"], ["storageclasses"]),
            rule(["watch"], [core], ["events"]),
            events_rule(),
        )),
        DefaultRole("system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                    (rule(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/nodeclient"]),)),
        DefaultRole("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                    (rule(["create"], ["certificates.k8s.io"], ["certificatesigningrequests/selfnodeclient"]),)),
        DefaultRole("system:volume-scheduler", (rule(READ_UPDATE, [core], ["persistentvolumes"]), rule(READ, ["storage.k8s.io"], ["storageclasses"]),
                                                rule(READ_UPDATE, [core], ["persistentvolumeclaims"]))),
        *(DefaultRole(f"system:certificates.k8s.io:{name}-approver", (rule(["approve"], ["certificates.k8s.io"], ["signers"], [signer]),))
          for name, signer in (("legacy-unknown", "kubernetes.io/legacy-unknown"), ("kubelet-serving", "kubernetes.io/kubelet-serving"),
                               ("kube-apiserver-client", "kubernetes.io/kube-apiserver-client"),
                               ("kube-apiserver-client-kubelet", "kubernetes.io/kube-apiserver-client-kubelet"))),
        DefaultRole("system:service-account-issuer-discovery", (url_rule(["get"], "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                                                                          "/openid/v1/jwks", "/openid/v1/jwks/"),)),
        DefaultRole("system:kubelet-api-admin", (rule(["get", "list", "watch"], [core], ["nodes"]), rule(["proxy"], [core], ["nodes"]),
                                                 rule(["*"], [core], ["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"]))),
        DefaultRole("system:node-proxier", (
            rule(["list", "watch"], [core], ["services", "endpoints"]),
            rule(["get", "list", "watch"], [core], ["nodes"]),
            events_rule(),
            rule(["list", "watch"], ["networking.k8s.io"], ["servicecidrs"]),
            rule(["list", "watch"], ["discovery.k8s.io"], ["endpointslices"]),
        )),
        DefaultRole("system:kube-scheduler", (
            events_rule(),
            rule(["create"], ["coordination.k8s.io"], ["leases"]),
            rule(["get", "update", "list", "watch"], ["coordination.k8s.io"], ["leases"], ["kube-scheduler"]),
            rule(READ_WRITE, ["coordination.k8s.io"], ["leasecandidates"]),
            rule(READ, [core], ["nodes"]),
            rule(["get", "list", "watch", "delete"], [core], ["pods"]),
            rule(["create"], [core], ["pods/binding", "bindings"]),
            rule(["patch", "update"], [core], ["pods/status"]),
            rule(READ, [core], ["services", "replicationcontrollers"]),
            rule(READ, [apps, ext], ["replicasets"]),
            rule(READ, [apps], ["statefulsets"]),
            rule(READ, ["policy"], ["poddisruptionbudgets"]),
            rule(READ, [core], ["persistentvolumeclaims", "persistentvolumes"]),
            rule(["create"], ["authentication.k8s.io"], ["tokenreviews"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]),
            rule(READ, ["storage.k8s.io"], ["csinodes"]),
            rule(["get", "list", "watch"], ["storage.k8s.io"], ["volumeattachments"]),
            rule(READ, [core], ["namespaces"]),
            rule(READ, ["storage.k8s.io"], ["csidrivers"]),
            rule(READ, ["storage.k8s.io"], ["csistoragecapacities"]),
        )),
    ]


def cluster_role_bindings() -> list[DefaultBinding]:
    """Upstream ``ClusterRoleBindings()``."""
    return [
        DefaultBinding("cluster-admin", "cluster-admin", groups("system:masters")),
        DefaultBinding("system:monitoring", "system:monitoring", groups("system:monitoring")),
        DefaultBinding("system:discovery", "system:discovery", groups("system:authenticated")),
        DefaultBinding("system:basic-user", "system:basic-user", groups("system:authenticated")),
        DefaultBinding("system:public-info-viewer", "system:public-info-viewer", groups("system:authenticated", "system:unauthenticated")),
        DefaultBinding("kubesvc:service-map", "kubesvc:service-map", groups("system:authenticated")),
        DefaultBinding("system:node-proxier", "system:node-proxier", users("system:kube-proxy")),
        DefaultBinding("system:kube-controller-manager", "system:kube-controller-manager", users("system:kube-controller-manager")),
        DefaultBinding("system:kube-dns", "system:kube-dns", service_accounts("kube-system", "kube-dns")),
        DefaultBinding("system:kube-scheduler", "system:kube-scheduler", users("system:kube-scheduler")),
        DefaultBinding("system:volume-scheduler", "system:volume-scheduler", users("system:kube-scheduler")),
        DefaultBinding("system:node", "system:node", ()),  # no subjects: the Node authorizer replaces it (deprecated 1.7)
        DefaultBinding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", groups("system:serviceaccounts")),
    ]


def controller_roles() -> list[DefaultRole]:
    """Upstream ``ControllerRoles()``: ``system:controller:<name>``, each bound to the
    ServiceAccount ``kube-system/<name>`` (kube-controller-manager's
    ``--use-service-account-credentials``)."""
    core, apps, batch, ext, storage = "", "apps", "batch", "extensions", "storage.k8s.io"
    ev = events_rule()
    roles = {
        "attachdetach-controller": (
            rule(["list", "watch"], [core], ["persistentvolumes", "persistentvolumeclaims"]), rule(READ, [core], ["nodes"]),
            rule(["patch", "update"], [core], ["nodes/status"]), rule(["list", "watch"], [core], ["pods"]), ev,
            rule(["get", "create", "delete", "list", "watch"], [storage], ["volumeattachments"]),
            rule(READ, [storage], ["csidrivers"]), rule(READ, [storage], ["csinodes"])),
        "clusterrole-aggregation-controller": (rule(["escalate", "get", "list", "watch", "update", "patch"], [RBAC_GROUP], ["clusterroles"]),),
        "cronjob-controller": (
            rule(["get", "list", "watch", "update"], [batch], ["cronjobs"]),
            rule(["get", "list", "watch", "create", "update", "delete", "patch"], [batch], ["jobs"]),
            rule(["update"], [batch], ["cronjobs/status"]), rule(["update"], [batch], ["cronjobs/finalizers"]),
            rule(["list", "delete"], [core], ["pods"]), ev),
        "daemon-set-controller": (
            rule(READ, [ext, apps], ["daemonsets"]), rule(["update"], [ext, apps], ["daemonsets/status"]),
            rule(["update"], [ext, apps], ["daemonsets/finalizers"]), rule(["list", "watch"], [core], ["nodes"]),
            rule(["list", "watch", "create", "delete", "patch"], [core], ["pods"]), rule(["create"], [core], ["pods/binding"]),
            rule(["get", "list", "watch", "create", "delete", "update", "patch"], [apps], ["controllerrevisions"]), ev),
        "deployment-controller": (
            rule(["get", "list", "watch", "update"], [ext, apps], ["deployments"]), rule(["update"], [ext, apps], ["deployments/status"]),
            rule(["update"], [ext, apps], ["deployments/finalizers"]),
            rule(["get", "list", "watch", "create", "update", "patch", "delete"], [apps, ext], ["replicasets"]),
            rule(["get", "list", "watch", "update"], [core], ["pods"]), ev),
        "disruption-controller": (
            rule(READ, [ext, apps], ["deployments"]), rule(READ, [apps, ext], ["replicasets"]), rule(READ, [core], ["replicationcontrollers"]),
            rule(READ, ["policy"], ["poddisruptionbudgets"]), rule(READ, [apps], ["statefulsets"]),
            rule(["update"], ["policy"], ["poddisruptionbudgets/status"]), rule(["patch", "update"], [core], ["pods/status"]),
            rule(["get"], ["*"], ["*/scale"]), ev),
        "endpoint-controller": (
            rule(READ, [core], ["services", "pods"]), rule(["get", "list", "create", "update", "delete"], [core], ["endpoints"]),
            rule(["create"], [core], ["endpoints/restricted"]), ev),
        "endpointslice-controller": (
            rule(READ, [core], ["services", "pods", "nodes"]), rule(["update"], [core], ["services/finalizers"]),
            rule(["get", "list", "create", "update", "delete"], ["discovery.k8s.io"], ["endpointslices"]), ev),
        "endpointslicemirroring-controller": (
            rule(READ, [core], ["services", "endpoints"]), rule(["update"], [core], ["services/finalizers"]),
            rule(["update"], [core], ["endpoints/finalizers"]),
            rule(["get", "list", "create", "update", "delete"], ["discovery.k8s.io"], ["endpointslices"]), ev),
        "expand-controller": (
            rule(["get", "list", "watch", "update", "patch"], [core], ["persistentvolumes"]),
            rule(["update", "patch"], [core], ["persistentvolumeclaims/status"]), rule(READ, [core], ["persistentvolumeclaims"]),
            rule(READ, [storage], ["storageclasses"]), rule(["get"], [core], ["services", "endpoints"]), rule(["get"], [core], ["secrets"]), ev),
        "ephemeral-volume-controller": (
            rule(READ, [core], ["pods"]), rule(["update"], [core], ["pods/finalizers"]),
            rule(["get", "list", "watch", "create"], [core], ["persistentvolumeclaims"]), ev),
        "generic-garbage-collector": (rule(["get", "list", "watch", "patch", "update", "delete"], ["*"], ["*"]), ev),
        "horizontal-pod-autoscaler": (
            rule(READ, ["autoscaling"], ["horizontalpodautoscalers"]), rule(["update"], ["autoscaling"], ["horizontalpodautoscalers/status"]),
            rule(["get", "update"], ["*"], ["*/scale"]), rule(["list"], [core], ["pods"]), rule(["list"], ["metrics.k8s.io"], ["pods"]),
            rule(["get", "list"], ["custom.metrics.k8s.io"], ["*"]), rule(["get", "list"], ["external.metrics.k8s.io"], ["*"]), ev),
        "job-controller": (
            rule(["get", "list", "watch", "update", "patch"], [batch], ["jobs"]), rule(["update"], [batch], ["jobs/status"]),
            rule(["update"], [batch], ["jobs/finalizers"]), rule(["list", "watch", "create", "delete", "patch"], [core], ["pods"]), ev),
        "namespace-controller": (
            rule(["get", "list", "watch", "delete"], [core], ["namespaces"]), rule(["update"], [core], ["namespaces/finalize", "namespaces/status"]),
            rule(["get", "list", "delete", "deletecollection"], ["*"], ["*"])),
        "node-controller": (
            rule(["get", "list", "update", "delete", "patch"], [core], ["nodes"]), rule(["patch", "update"], [core], ["nodes/status"]),
            rule(["patch", "update"], [core], ["pods/status"]), rule(["list", "get", "delete"], [core], ["pods"]), ev),
        "persistent-volume-binder": (
            rule(["get", "list", "watch", "update", "create", "delete"], [core], ["persistentvolumes"]),
            rule(["update"], [core], ["persistentvolumes/status"]), rule(["get", "list", "watch", "update"], [core], ["persistentvolumeclaims"]),
            rule(["update"], [core], ["persistentvolumeclaims/status"]), rule(["list", "watch", "get", "create", "delete"], [core], ["pods"]),
            rule(READ, [storage], ["storageclasses"]), rule(["get", "create", "update", "delete"], [core], ["endpoints"]),
            rule(["get", "create", "delete"], [core], ["services"]), rule(["get"], [core], ["secrets"]), rule(["get", "list"], [core], ["nodes"]),
            rule(["watch"], [core], ["events"]), ev),
        "pod-garbage-collector": (
            rule(["list", "watch", "delete"], [core], ["pods"]), rule(["get", "list"], [core], ["nodes"]), rule(["patch"], [core], ["pods/status"])),
        "replicaset-controller": (
            rule(["get", "list", "watch", "update"], [apps, ext], ["replicasets"]), rule(["update"], [apps, ext], ["replicasets/status"]),
            rule(["update"], [apps, ext], ["replicasets/finalizers"]), rule(["list", "watch", "patch", "create", "delete"], [core], ["pods"]), ev),
        "replication-controller": (
            rule(["get", "list", "watch", "update"], [core], ["replicationcontrollers"]), rule(["update"], [core], ["replicationcontrollers/status"]),
            rule(["update"], [core], ["replicationcontrollers/finalizers"]), rule(["list", "watch", "patch", "create", "delete"], [core], ["pods"]), ev),
        "resourcequota-controller": (rule(["list", "watch"], ["*"], ["*"]), rule(["update"], [core], ["resourcequotas/status"]), ev),
        "route-controller": (rule(["list", "watch"], [core], ["nodes"]), rule(["patch"], [core], ["nodes/status"]), ev),
        "service-account-controller": (rule(["create"], [core], ["serviceaccounts"]), ev),
        "service-controller": (
            rule(READ, [core], ["services"]), rule(["patch", "update"], [core], ["services/status"]), rule(["list", "watch"], [core], ["nodes"]), ev),
        "service-cidrs-controller": (
            rule(["get", "list", "watch", "patch", "update"], ["networking.k8s.io"], ["servicecidrs"]),
            rule(["patch", "update"], ["networking.k8s.io"], ["servicecidrs/finalizers"]),
            rule(["patch", "update"], ["networking.k8s.io"], ["servicecidrs/status"]),
            rule(READ, ["networking.k8s.io"], ["ipaddresses"]), ev),
        "statefulset-controller": (
            rule(["list", "watch"], [core], ["pods"]), rule(READ, [apps], ["statefulsets"]), rule(["update"], [apps], ["statefulsets/status"]),
            rule(["update"], [apps], ["statefulsets/finalizers"]), rule(["get", "create", "delete", "update", "patch"], [core], ["pods"]),
            rule(["get", "create", "delete", "update", "patch", "list", "watch"], [apps], ["controllerrevisions"]),
            rule(["get", "create"], [core], ["persistentvolumeclaims"]), ev, rule(["update", "delete"], [core], ["persistentvolumeclaims"])),
        "ttl-controller": (rule(["update", "patch", "list", "watch"], [core], ["nodes"]), ev),
        "certificate-controller": (
            rule(["get", "list", "watch", "delete"], ["certificates.k8s.io"], ["certificatesigningrequests"]),
            rule(["update"], ["certificates.k8s.io"], ["certificatesigningrequests/status", "certificatesigningrequests/approval"]),
            rule(["approve"], ["certificates.k8s.io"], ["signers"], ["kubernetes.io/kube-apiserver-client-kubelet"]),
            rule(["sign"], ["certificates.k8s.io"], ["signers"], ["kubernetes.io/legacy-unknown", "kubernetes.io/kube-apiserver-client",
                                                                  "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]),
            rule(["create"], ["authorization.k8s.io"], ["subjectaccessreviews"]), ev),
        "pvc-protection-controller": (rule(["get", "list", "watch", "update"], [core], ["persistentvolumeclaims"]),
                                      rule(["list", "watch", "get"], [core], ["pods"]), ev),
        "pv-protection-controller": (rule(["get", "list", "watch", "update"], [core], ["persistentvolumes"]), ev),
        "ttl-after-finished-controller": (rule(["get", "list", "watch", "delete"], [batch], ["jobs"]), ev),
        "root-ca-cert-publisher": (rule(["create", "update"], [core], ["configmaps"]), ev),
        "validatingadmissionpolicy-status-controller": (
            rule(READ, ["admissionregistration.k8s.io"], ["validatingadmissionpolicies"]),
            rule(["get", "patch", "update"], ["admissionregistration.k8s.io"], ["validatingadmissionpolicies/status"]), ev),
        "legacy-service-account-token-cleaner": (
            rule(["get"], [core], ["configmaps"], ["kube-apiserver-legacy-service-account-token-tracking"]),
            rule(["patch", "delete"], [core], ["secrets"])),
    }
    return [DefaultRole(CONTROLLER_PREFIX + name, rules) for name, rules in roles.items()]


def controller_role_bindings() -> list[DefaultBinding]:
    return [DefaultBinding(r.name, r.name, service_accounts("kube-system", r.name[len(CONTROLLER_PREFIX):])) for r in controller_roles()]


def namespace_roles() -> list[DefaultRole]:
    """Upstream ``NamespaceRoles()``."""
    leases = rule(["create", "get", "list", "update", "watch"], ["coordination.k8s.io"], ["leases", "leasecandidates"])
    return [
        DefaultRole("extension-apiserver-authentication-reader",
                    (rule(["get", "list", "watch"], [""], ["configmaps"], ["extension-apiserver-authentication"]),), namespace="kube-system"),
        DefaultRole("system::leader-locking-kube-controller-manager", (leases,), namespace="kube-system"),
        DefaultRole("system::leader-locking-kube-scheduler", (leases,), namespace="kube-system"),
        DefaultRole(CONTROLLER_PREFIX + "bootstrap-signer", (rule(READ, [""], ["secrets"]),), namespace="kube-system"),
        DefaultRole(CONTROLLER_PREFIX + "cloud-provider", (rule(["create", "get", "list", "watch"], [""], ["configmaps"]),), namespace="kube-system"),
        DefaultRole(CONTROLLER_PREFIX + "token-cleaner", (rule(["delete", "get", "list", "watch"], [""], ["secrets"]), events_rule()),
                    namespace="kube-system"),
        DefaultRole(CONTROLLER_PREFIX + "bootstrap-signer", (rule(READ, [""], ["configmaps"]), rule(["update"], [""], ["configmaps"], ["cluster-info"]),
                                                             events_rule()), namespace="kube-public"),
    ]


def namespace_role_bindings() -> list[DefaultBinding]:
    """Upstream ``NamespaceRoleBindings()``."""
    return [
        DefaultBinding("system::extension-apiserver-authentication-reader", "extension-apiserver-authentication-reader",
                       users("system:kube-controller-manager", "system:kube-scheduler"), "kube-system", "Role"),
        DefaultBinding("system::leader-locking-kube-controller-manager", "system::leader-locking-kube-controller-manager",
                       users("system:kube-controller-manager") + service_accounts("kube-system", "kube-controller-manager", "leader-election-controller"),
                       "kube-system", "Role"),
        DefaultBinding("system::leader-locking-kube-scheduler", "system::leader-locking-kube-scheduler",
                       users("system:kube-scheduler") + service_accounts("kube-system", "kube-scheduler"), "kube-system", "Role"),
        DefaultBinding(CONTROLLER_PREFIX + "bootstrap-signer", CONTROLLER_PREFIX + "bootstrap-signer",
                       service_accounts("kube-system", "bootstrap-signer"), "kube-system", "Role"),
        DefaultBinding(CONTROLLER_PREFIX + "cloud-provider", CONTROLLER_PREFIX + "cloud-provider",
                       service_accounts("kube-system", "cloud-provider"), "kube-system", "Role"),
        DefaultBinding(CONTROLLER_PREFIX + "token-cleaner", CONTROLLER_PREFIX + "token-cleaner",
                       service_accounts("kube-system", "token-cleaner"), "kube-system", "Role"),
        DefaultBinding(CONTROLLER_PREFIX + "bootstrap-signer", CONTROLLER_PREFIX + "bootstrap-signer",
                       service_accounts("kube-system", "bootstrap-signer"), "kube-public", "Role"),
    ]


# ---- reconciliation (pure) ------------------------------------------------------------------


def _merged(expected: dict | None, existing: dict | None) -> dict | None:
    """Upstream ``merge(expected, existing)``: the existing values win."""
    if expected is None and existing is None:
        return None
    return {**(expected or {}), **(existing or {})}


@dataclass
class Reconciled:
    """``operation``: "none", "create", "update" or "recreate"; ``protected``: the object opted
    out with ``autoupdate: "false"`` (then nothing is written)."""

    operation: str
    obj: dict
    protected: bool = False


def _merge_metadata(result: dict, existing: dict, expected: dict) -> bool:
    meta, old_meta, want_meta = result["metadata"], existing.get("metadata") or {}, expected["metadata"]
    changed = False
    for name in ("annotations", "labels"):
        merged = _merged(want_meta.get(name), old_meta.get(name))
        if merged is None:
            meta.pop(name, None)
        else:
            meta[name] = merged
        changed = changed or merged != old_meta.get(name)
    return changed


def _protected(existing: dict) -> bool:
    return ((existing.get("metadata") or {}).get("annotations") or {}).get(AUTO_UPDATE) == "false"


def reconcile_role(existing: dict | None, expected: dict) -> Reconciled:
    """Upstream ``computeReconciledRole`` in union mode (RemoveExtraPermissions false)."""
    if existing is None:
        return Reconciled("create", copy.deepcopy(expected))
    result = copy.deepcopy(existing)
    changed = _merge_metadata(result, existing, expected)
    _, missing = covers(rules_from_api(existing.get("rules")), rules_from_api(expected.get("rules")))
    if missing:
        result["rules"] = list(result.get("rules") or []) + [r.to_api() for r in missing]
        changed = True
    want_selectors = (expected.get("aggregationRule") or {}).get("clusterRoleSelectors")
    have_rule = existing.get("aggregationRule")
    if expected.get("aggregationRule") is None and have_rule is not None:
        result.pop("aggregationRule", None)
        changed = True
    elif want_selectors:
        have = list((have_rule or {}).get("clusterRoleSelectors") or [])
        absent = [s for s in want_selectors if s not in have]
        if absent:
            result["aggregationRule"] = {**(have_rule or {}), "clusterRoleSelectors": have + absent}
            changed = True
    return Reconciled("update" if changed else "none", result, _protected(existing))


def reconcile_binding(existing: dict | None, expected: dict) -> Reconciled:
    """Upstream ``computeReconciledRoleBinding`` in union mode (RemoveExtraSubjects false)."""
    if existing is None:
        return Reconciled("create", copy.deepcopy(expected))
    if existing.get("roleRef") != expected.get("roleRef"):
        return Reconciled("recreate", copy.deepcopy(expected), _protected(existing))
    result = copy.deepcopy(existing)
    changed = _merge_metadata(result, existing, expected)
    have = list(existing.get("subjects") or [])
    absent = [s for s in expected.get("subjects") or [] if s not in have]
    if absent:
        result["subjects"] = have + absent
        changed = True
    return Reconciled("update" if changed else "none", result, _protected(existing))


# ---- applying it through the registry --------------------------------------------------------


async def _reconcile_one(store, namespace: str | None, expected: dict, reconcile, field_manager: str) -> None:
    name = expected["metadata"]["name"]
    kind = expected["kind"]
    for _attempt in range(5):
        try:
            existing = await store.get(namespace, name)
        except StatusError as exc:
            if exc.code != 404:
                raise
            existing = None
        result = reconcile(existing, expected)
        if result.operation == "none":
            return
        if result.protected:
            log.warning("skipped reconcile-protected %s %s", kind.lower(), name)
            return
        try:
            if result.operation == "create":
                await store.create(namespace, result.obj, field_manager=field_manager)
            elif result.operation == "recreate":
                await store.delete(namespace, name, {"preconditions": {"uid": existing["metadata"]["uid"]}})
                await store.create(namespace, result.obj, field_manager=field_manager)
            else:
                # result.obj carries the resourceVersion read: a change since is a 409, and a retry
                await store.guaranteed_update(namespace, name, lambda current: copy.deepcopy(result.obj), field_manager=field_manager)
            return
        except StatusError as exc:
            if exc.code not in (404, 409):
                raise
    log.warning("could not reconcile %s %s: it kept changing", kind.lower(), name)


async def ensure_bootstrap_policy(registry, field_manager: str = "kube-apiserver") -> None:
    """The ``rbac/bootstrap-roles`` post-start hook: every default ClusterRole, then every
    ClusterRoleBinding, then the namespaced Roles and RoleBindings whose namespace exists."""
    roles = registry.store(RBAC_GROUP, "clusterroles")
    bindings = registry.store(RBAC_GROUP, "clusterrolebindings")
    namespaced_roles = registry.store(RBAC_GROUP, "roles")
    namespaced_bindings = registry.store(RBAC_GROUP, "rolebindings")
    namespaces = registry.store("", "namespaces")

    async def namespace_exists(name: str) -> bool:
        try:
            await namespaces.get(None, name)
            return True
        except StatusError:
            return False

    for role in cluster_roles() + controller_roles():
        await _reconcile_one(roles, None, role.to_api(), reconcile_role, field_manager)
    for binding in cluster_role_bindings() + controller_role_bindings():
        await _reconcile_one(bindings, None, binding.to_api(), reconcile_binding, field_manager)
    for role in namespace_roles():
        if await namespace_exists(role.namespace):
            await _reconcile_one(namespaced_roles, role.namespace, role.to_api(), reconcile_role, field_manager)
    for binding in namespace_role_bindings():
        if await namespace_exists(binding.namespace):
            await _reconcile_one(namespaced_bindings, binding.namespace, binding.to_api(), reconcile_binding, field_manager)
