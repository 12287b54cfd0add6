"""Who a container is and runs as, decided as the kubelet decides it (pure).

* **Hostname** (``GeneratePodHostNameAndDomain`` in ``pkg/kubelet/kubelet_pods.go``): the Pod's
  ``spec.hostname``, else its name; longer than 63 characters (a hostname's limit) it is cut to
  63 and then loses trailing ``-`` and ``.`` (``truncatePodHostnameIfNeeded``). The runtime sets
  it in the sandbox's UTS namespace and as the ``HOSTNAME`` variable. ``spec.subdomain`` gives
  the domain (``<subdomain>.<namespace>.svc.<cluster domain>``), which is cluster DNS's business
  (``/etc/hosts``, ``/etc/resolv.conf``), not decided here.
* **User** (``DetermineEffectiveSecurityContext``, ``pkg/securitycontext``): a container's own
  ``securityContext.runAsUser``/``runAsGroup`` win over the Pod's; the Pod's
  ``supplementalGroups`` and ``fsGroup`` become supplementary groups
  (``convertToRuntimeSecurityContext``). Unset, the image's user runs, and kubesvc's images have
  none: root. ``runAsNonRoot`` is checked as ``verifyRunAsNonRoot`` checks it, its failure the
  container's ``CreateContainerConfigError``.
"""

from __future__ import annotations

from dataclasses import dataclass

HOSTNAME_MAX_LEN = 63


class IdentityError(Exception):
    """The container cannot be configured (its ``CreateContainerConfigError`` message)."""


def describe_pod(pod: dict) -> str:
    """``format.Pod``: ``name_namespace(uid)``."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('name', '')}_{meta.get('namespace', '')}({meta.get('uid', '')})"


def pod_hostname(pod: dict) -> str:
    """The Pod's hostname (see the module docstring)."""
    name = (pod.get("metadata") or {}).get("name") or ""
    hostname = (pod.get("spec") or {}).get("hostname") or name
    if len(hostname) <= HOSTNAME_MAX_LEN:
        return hostname
    truncated = hostname[:HOSTNAME_MAX_LEN].rstrip("-.")
    if not truncated:
        raise IdentityError(f'hostname for pod "{name}" was invalid: "{hostname}"')
    return truncated


@dataclass(frozen=True)
class RunAs:
    """The process's user: ``uid``/``gid`` None when the image's (root here) is kept."""

    uid: int | None
    gid: int | None
    groups: tuple[int, ...]


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_as(pod: dict, container: dict) -> RunAs:
    """The effective user, group and supplementary groups of ``container``; raises
    IdentityError when ``runAsNonRoot`` forbids them."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    container_sc = container.get("securityContext") or {}

    def effective(key: str):
        return container_sc[key] if container_sc.get(key) is not None else pod_sc.get(key)

    uid, gid = _int(effective("runAsUser")), _int(effective("runAsGroup"))
    groups = [g for g in pod_sc.get("supplementalGroups") or [] if _int(g) is not None]
    if _int(pod_sc.get("fsGroup")) is not None:
        groups.append(pod_sc["fsGroup"])
    if effective("runAsNonRoot"):
        if uid == 0:
            raise IdentityError(f"container's runAsUser breaks non-root policy (pod: \"{describe_pod(pod)}\", container: {container.get('name', '')})")
        if uid is None:  # the image's user, which is root here
            raise IdentityError(f"container has runAsNonRoot and image will run as root (pod: \"{describe_pod(pod)}\", "
                                f"container: {container.get('name', '')})")
    return RunAs(uid, gid, tuple(groups))
