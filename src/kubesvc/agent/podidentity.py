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
* **Capabilities** (containerd's CRI ``WithCapabilities``): a container starts from the
  runtime's default set (``CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP
  SETPCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE``); ``capabilities.add: [ALL]`` takes
  every one, ``drop: [ALL]`` none, then each named ``add`` and ``drop`` (names without ``CAP_``,
  as the API spells them); ``privileged: true`` keeps all. Everything else leaves the bounding
  set, so even root in the container cannot regain it.
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


DEFAULT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP", "SETPCAP",
                        "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
ALL = "ALL"


def capabilities(container: dict, all_names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The container's capabilities, sorted (None: all, a privileged container); ``all_names``
    is every capability the runtime knows, for ``ALL``."""
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return None
    requested = sc.get("capabilities") or {}
    add = [str(c).upper().removeprefix("CAP_") for c in requested.get("add") or []]
    drop = [str(c).upper().removeprefix("CAP_") for c in requested.get("drop") or []]
    kept = set(DEFAULT_CAPABILITIES)
    if ALL in add:
        kept = set(all_names)
    if ALL in drop:
        kept = set()
    kept |= {c for c in add if c != ALL}
    kept -= set(drop)
    unknown = sorted(kept - set(all_names))
    if unknown:
        raise IdentityError(f"failed to generate container spec: unknown capability {unknown[0]!r}")
    return tuple(sorted(kept))


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
