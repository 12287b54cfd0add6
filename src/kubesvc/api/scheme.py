"""The served kinds: group/version/kind <-> resource names, scope, discovery facts, schema.

``KINDS`` is the single table the apiserver routes, discovery, OpenAPI, tables and the
storage key layout are generated from. Create-only kinds (``create_only``: access reviews,
TokenReview, SelfSubjectReview) are in it for routing, discovery and OpenAPI but are never
stored: :func:`stored_kinds` leaves them out. Storage keys follow the kube-apiserver etcd layout:
``/registry/<group-resource-path>/<namespace>/<name>`` (cluster-scoped: no namespace part).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubesvc.api.schema import Obj


@dataclass(frozen=True)
class KindInfo:
    group: str  # "" for core
    version: str
    kind: str
    resource: str  # plural, lower case: services
    singular: str
    namespaced: bool
    schema: Obj
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status"
    # what DELETE returns: the object (Services, Pods: the Python client needs it) or a Status
    delete_returns_object: bool = False
    # extra field-selector labels beyond metadata.name / metadata.namespace, -> JSON path
    field_labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    storage_prefix: str = ""  # defaults to the resource name (upstream: "services/specs")
    # never stored: only POSTed and answered (access reviews, TokenReview, SelfSubjectReview).
    # Discovery lists the one verb "create", there is no store or storage key, and a handler
    # registered in the app's "create_handlers" answers the POST.
    create_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def group_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def key_prefix(self, namespace: str | None = None) -> str:
        base = f"/registry/{self.storage_prefix or self.resource}/"
        if self.namespaced and namespace:
            return f"{base}{namespace}/"
        return base

    def key(self, namespace: str | None, name: str) -> str:
        if self.namespaced:
            return f"{self.key_prefix(namespace)}{name}"
        return f"{self.key_prefix()}{name}"


# Filled by kubesvc.api.kinds at import (one module per API group registers its kinds).
KINDS: list[KindInfo] = []


def register(info: KindInfo) -> KindInfo:
    KINDS.append(info)
    return info


def by_resource(group: str, version: str, resource: str) -> KindInfo | None:
    for k in all_kinds():
        if k.group == group and k.version == version and k.resource == resource:
            return k
    return None


def by_kind(api_version: str, kind: str) -> KindInfo | None:
    for k in all_kinds():
        if k.api_version == api_version and k.kind == kind:
            return k
    return None


def all_kinds() -> list[KindInfo]:
    import kubesvc.api.kinds  # noqa: F401  (registers on first import)

    return KINDS


def stored_kinds() -> list[KindInfo]:
    """The kinds with a store and storage keys: every kind but the create-only ones."""
    return [k for k in all_kinds() if not k.create_only]
