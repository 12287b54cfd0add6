"""Which resources the garbage collector watches, from API discovery (upstream
``GetDeletableResources`` and the REST mapper).

The garbage collector knows no kinds of its own: any resource discovery lists with the verbs
``delete``, ``list`` and ``watch`` can own or be owned, in its group's preferred version, except
the Events (core and ``events.k8s.io``), which upstream ignores (they are many, short-lived and
never owners). An ownerReference names its owner by ``apiVersion`` and ``kind``; the *mapping*
turns that into a resource (plural, scope) for every version discovery serves, so an owner in
a non-preferred version is still found. Subresources (``services/status``) are not resources.

:func:`deletable_resources` and :func:`mapping` are pure (discovery documents in); :func:`discover`
fetches the documents (legacy discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>/<v>``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesvc.client.rest import ClientError, Resource, RestClient

REQUIRED_VERBS = frozenset({"delete", "list", "watch"})
# upstream DefaultIgnoredResources: (group, resource)
IGNORED_RESOURCES = frozenset({("", "events"), ("events.k8s.io", "events")})


@dataclass(frozen=True)
class ResourceList:
    """One ``APIResourceList`` and whether its version is its group's preferred one."""

    group_version: str
    resources: tuple[dict, ...]
    preferred: bool


def _split(group_version: str) -> tuple[str, str]:
    group, _, version = group_version.rpartition("/")
    return group, version


def _resources(lists: list[ResourceList]):
    for rl in lists:
        group, version = _split(rl.group_version)
        for entry in rl.resources:
            name = entry.get("name", "")
            if not name or "/" in name:
                continue  # a subresource
            yield rl, Resource(group, version, name, bool(entry.get("namespaced")), entry.get("kind", "")), entry


def deletable_resources(lists: list[ResourceList], ignored: frozenset = IGNORED_RESOURCES) -> set[Resource]:
    """The preferred-version resources with list, watch and delete, minus the ignored ones."""
    out = set()
    for rl, resource, entry in _resources(lists):
        if rl.preferred and REQUIRED_VERBS <= set(entry.get("verbs") or []) and (resource.group, resource.plural) not in ignored:
            out.add(resource)
    return out


def mapping(lists: list[ResourceList]) -> dict[tuple[str, str], Resource]:
    """(apiVersion, kind) -> Resource, for every served version."""
    out: dict[tuple[str, str], Resource] = {}
    for _, resource, _ in _resources(lists):
        out.setdefault((resource.api_version, resource.kind), resource)
    return out


async def discover(client: RestClient) -> list[ResourceList]:
    """Every group version's resource list. A group version that fails is left out (as
    upstream tolerates partial discovery); the core group must answer."""
    lists: list[ResourceList] = []
    core = await client.get("/api")
    for index, version in enumerate(core.get("versions") or []):
        answer = await client.get(f"/api/{version}")
        lists.append(ResourceList(version, tuple(answer.get("resources") or []), index == 0))
    groups = await client.get("/apis")
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        for version in group.get("versions") or []:
            group_version = version.get("groupVersion", "")
            try:
                answer = await client.get(f"/apis/{group_version}")
            except ClientError:  # one broken group must not hide the others
                continue
            lists.append(ResourceList(group_version, tuple(answer.get("resources") or []), group_version == preferred))
    return lists
