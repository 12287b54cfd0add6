"""API discovery: how clients learn which groups, versions and resources the server has.

Two generations of documents are served (k8s.io/apiserver/pkg/endpoints/discovery):

* **Legacy discovery**, one document per level. ``GET /api`` is an ``APIVersions`` (the core
  group's versions plus the address clients should use), ``GET /apis`` an ``APIGroupList``,
  ``GET /apis/<group>`` an ``APIGroup``, and ``GET /api/v1`` or ``GET /apis/<group>/<version>``
  an ``APIResourceList`` naming each resource with its kind, scope, verbs, short names
  (``svc``), categories (``all``, for ``kubectl get all``) and a ``storageVersionHash``.
  Subresources appear as their own entries (``services/status``; the Pod's action
  subresources ``pods/binding`` and ``pods/log`` with their own kind and verbs, and the legacy
  ``bindings`` collection, see ``subresources.py``). The Python ``DynamicClient`` only uses these.
  Create-only kinds (the access reviews, TokenReview, SelfSubjectReview) have the one verb
  ``create`` and no ``storageVersionHash``; an action whose body is another group's kind
  (``serviceaccounts/token``: an authentication.k8s.io TokenRequest) names that group/version.
* **Aggregated discovery** (apidiscovery.k8s.io/v2): ``GET /api`` and ``GET /apis`` answer with
  every resource of every version in one ``APIGroupDiscoveryList``, but only when the
  ``Accept`` header asks for it, and the response must carry exactly the media type asked for
  (``application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``). kubectl asks
  first; given plain JSON with an aggregated body it finds no resources at all.

Groups are listed in kube-aggregator's order (higher ``groupPriorityMinimum`` first, then by
name; the priorities are kube-apiserver's built-in APIService ones) and versions by
Kubernetes version priority (v1 > v1beta2 > v1beta1 > v1alpha1). Resources are sorted by name,
as upstream's installer does.

Documents are computed once per :class:`Discovery`; the returned dicts are shared, so callers
serialise them and never mutate them.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Iterable

from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.subresources import ActionSubresource, actions_of

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_CONTENT_TYPE_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
_AGGREGATED_VERSIONS = {AGGREGATED_CONTENT_TYPE: "v2", AGGREGATED_CONTENT_TYPE_V2BETA1: "v2beta1"}

RESOURCE_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
CREATE_ONLY_VERBS = ["create"]  # access reviews, TokenReview, SelfSubjectReview: nothing stored to read
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "finalize": ["update"]}

# kube-apiserver's APIService group priorities (groupPriorityMinimum) for the groups served here
GROUP_PRIORITIES = {
    "events.k8s.io": 17750, "authentication.k8s.io": 17700, "authorization.k8s.io": 17600,
    "certificates.k8s.io": 17300, "networking.k8s.io": 17200, "rbac.authorization.k8s.io": 17000,
    "coordination.k8s.io": 16500, "discovery.k8s.io": 16200, "apps": 17800, "batch": 17400,
}
_DEFAULT_GROUP_PRIORITY = 1000  # what a CRD's group gets


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """discovery.StorageVersionHash: base64 of the first 8 bytes of sha256("group/version/kind")."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _version_priority(version: str) -> tuple:
    """A sort key putting versions in Kubernetes preference order (most preferred first)."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (1, 0, 0, 0, version)  # not Kubernetes-shaped: after all others, by name
    major, stability, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stability]
    return (0, rank, -int(major), -int(minor or 0), version)


def _media_ranges(accept_header: str) -> list[tuple[str, dict[str, str]]]:
    """The Accept header's media ranges, most preferred first (q-ordered, stable), q=0 dropped."""
    ranges = []
    for clause in accept_header.split(","):
        media_type, *raw_params = (piece.strip() for piece in clause.split(";"))
        params = {}
        for raw in raw_params:
            name, _, value = raw.partition("=")
            params[name.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(params.pop("q", "1"))
        except ValueError:
            quality = 1.0
        if media_type and quality > 0:
            ranges.append((quality, media_type.lower(), params))
    ranges.sort(key=lambda r: -r[0])
    return [(media_type, params) for _, media_type, params in ranges]


def wants_aggregated(accept_header: str) -> str | None:
    """The aggregated-discovery media type to answer with, or None for a legacy document.

    The first acceptable range decides: an aggregated one (v2 or v2beta1) picks that, while
    plain JSON or a wildcard listed earlier means the client prefers the legacy document.
    """
    for media_type, params in _media_ranges(accept_header or ""):
        if media_type == "application/json" and params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            for content_type, version in _AGGREGATED_VERSIONS.items():
                if params.get("v") == version:
                    return content_type
        elif media_type in ("application/json", "application/*", "*/*") and "as" not in params:
            return None
    return None


class Discovery:
    """Discovery documents for the served kinds (see the module docstring)."""

    def __init__(self, kinds: Iterable[KindInfo], server_address: str):
        self._server_address = server_address
        versions_by_group: dict[str, dict[str, list[KindInfo]]] = {}
        for info in kinds:
            versions_by_group.setdefault(info.group, {}).setdefault(info.version, []).append(info)
        self._kinds = {
            group: {v: sorted(versions[v], key=lambda i: i.resource) for v in sorted(versions, key=_version_priority)}
            for group, versions in versions_by_group.items()
        }
        self._groups = sorted((g for g in self._kinds if g), key=lambda g: (-GROUP_PRIORITIES.get(g, _DEFAULT_GROUP_PRIORITY), g))
        self._aggregated: dict[tuple[bool, str], dict] = {}

    # ---- legacy documents --------------------------------------------------------------

    def api_versions(self) -> dict:
        """``GET /api``."""
        return {
            "kind": "APIVersions",
            "versions": list(self._kinds.get("", {})),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self._server_address}],
        }

    def _group_entry(self, group: str) -> dict:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self._kinds[group]]
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def api_group_list(self) -> dict:
        """``GET /apis``: every named group (the core group lives under /api)."""
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group_entry(g) for g in self._groups]}

    def api_group(self, group: str) -> dict | None:
        """``GET /apis/<group>``, or None when the group is not served."""
        if not group or group not in self._kinds:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group)}

    def api_resource_list(self, group: str, version: str) -> dict | None:
        """``GET /api/v1`` (group "") or ``GET /apis/<group>/<version>``; None when not served."""
        infos = self._kinds.get(group, {}).get(version)
        if not infos:
            return None
        resources = []
        for info in infos:
            entry = {"name": info.resource, "singularName": info.singular, "namespaced": info.namespaced, "kind": info.kind, "verbs": _verbs(info)}
            if info.short_names:
                entry["shortNames"] = list(info.short_names)
            if info.categories:
                entry["categories"] = list(info.categories)
            if not info.create_only:  # no hash where nothing is stored
                entry["storageVersionHash"] = storage_version_hash(info.group, info.version, info.kind)
            resources.append(entry)
            for sub in info.subresources:
                resources.append({"name": f"{info.resource}/{sub}", "singularName": "", "namespaced": info.namespaced, "kind": info.kind, "verbs": _subresource_verbs(sub)})
            for action in actions_of(info):
                resources.append({"name": f"{info.resource}/{action.name}", "singularName": "", "namespaced": info.namespaced,
                                  **_action_group_version(info, action), "kind": action.kind, "verbs": list(action.verbs)})
                if action.legacy_resource:  # no storageVersionHash: nothing is stored under it
                    resources.append({"name": action.legacy_resource, "singularName": action.legacy_singular, "namespaced": info.namespaced, "kind": action.kind, "verbs": list(action.verbs)})
        resources.sort(key=lambda r: r["name"])
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": infos[0].api_version, "resources": resources}

    # ---- aggregated discovery ------------------------------------------------------------

    def aggregated(self, core: bool, content_type: str = AGGREGATED_CONTENT_TYPE) -> dict:
        """The APIGroupDiscoveryList for ``/api`` (``core=True``) or ``/apis``, in the
        version named by ``content_type`` (a value :func:`wants_aggregated` returned)."""
        key = (core, _AGGREGATED_VERSIONS[content_type])
        if key not in self._aggregated:
            groups = [""] if core and "" in self._kinds else [] if core else self._groups
            self._aggregated[key] = {
                "kind": "APIGroupDiscoveryList",
                "apiVersion": f"apidiscovery.k8s.io/{key[1]}",
                "metadata": {},
                "items": [self._group_discovery(g) for g in groups],
            }
        return self._aggregated[key]

    def _group_discovery(self, group: str) -> dict:
        # Go encodes the empty ObjectMeta with "creationTimestamp": null; the core group has no name
        metadata = {"name": group, "creationTimestamp": None} if group else {"creationTimestamp": None}
        versions = [
            {"version": version, "resources": _version_resources(infos), "freshness": "Current"}
            for version, infos in self._kinds[group].items()
        ]
        return {"metadata": metadata, "versions": versions}


def _verbs(info: KindInfo) -> list[str]:
    return CREATE_ONLY_VERBS if info.create_only else RESOURCE_VERBS


def _action_group_version(info: KindInfo, action: ActionSubresource) -> dict:
    """An action whose body is another group's kind names that group and version (upstream:
    ``serviceaccounts/token`` is an authentication.k8s.io/v1 TokenRequest)."""
    body = action.body
    if body is None or (body.group, body.version) == (info.group, info.version):
        return {}
    return {"group": body.group, "version": body.version}


def _subresource_verbs(subresource: str) -> list[str]:
    return SUBRESOURCE_VERBS.get(subresource, SUBRESOURCE_VERBS["status"])


def _version_resources(infos: list[KindInfo]) -> list[dict]:
    resources = [_resource_discovery(info) for info in infos]
    resources += [_legacy_action_discovery(info, action) for info in infos for action in actions_of(info) if action.legacy_resource]
    return sorted(resources, key=lambda r: r["resource"])


def _legacy_action_discovery(info: KindInfo, action: ActionSubresource) -> dict:
    return {
        "resource": action.legacy_resource,
        "responseKind": {"group": info.group, "version": info.version, "kind": action.kind},
        "scope": "Namespaced" if info.namespaced else "Cluster",
        "singularResource": action.legacy_singular,
        "verbs": list(action.verbs),
    }


def _resource_discovery(info: KindInfo) -> dict:
    response_kind = {"group": info.group, "version": info.version, "kind": info.kind}
    entry: dict = {
        "resource": info.resource,
        "responseKind": response_kind,
        "scope": "Namespaced" if info.namespaced else "Cluster",
        "singularResource": info.singular,
        "verbs": _verbs(info),
    }
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    subresources = [{"subresource": sub, "responseKind": response_kind, "verbs": _subresource_verbs(sub)} for sub in info.subresources]
    subresources += [{"subresource": action.name, "responseKind": {**response_kind, **_action_group_version(info, action), "kind": action.kind},
                      "verbs": list(action.verbs)} for action in actions_of(info)]
    if subresources:
        entry["subresources"] = sorted(subresources, key=lambda s: s["subresource"])
    return entry
