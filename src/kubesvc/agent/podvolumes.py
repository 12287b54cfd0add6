"""One Pod's volumes on disk: set up before its containers, refreshed while it runs, removed
when it is gone (the I/O around the decisions of ``volumes.py``; upstream's volume manager
and the plugins' ``SetUpAt``/``TearDownAt``).

* **Set up** (before the sandbox, as the kubelet's ``WaitForAttachAndMount``): the Pod
  directory ``<kubelet dir>/pods/<uid>`` (0700; ``<kubelet dir>/rootfs`` is where containers'
  roots are staged, each in its own mount namespace), then each volume's directory: 0777 for disk-backed
  ``emptyDir`` and ``configMap`` (``empty_dir.go`` ``perm``), 1777 for the memory-backed ones
  (``secret``, ``downwardAPI``, ``projected``, ``emptyDir`` of medium ``Memory``: a tmpfs root's
  mode, as a container sees them upstream). Atomic-writer volumes get their files. A volume
  that fails is reported (``FailedMount``) and the whole set-up retried by the caller.
* **Refresh** (the kubelet's periodic remount of configMap, secret, downwardAPI and projected
  volumes): every atomic-writer volume is computed again and rewritten when it changed; the
  token manager decides when a token is asked for again. A failure keeps the old files.
* **Mounts** of a container: ``volumes.container_mounts`` with each ``subPath`` made safe as
  the kubelet's ``makeMounts`` does: created (with the volume directory's mode) when missing,
  symbolic links resolved, refused when that leaves the volume.
* **Memory** ``emptyDir`` (``medium: Memory``): a tmpfs mounted on the volume directory where
  the host sees it (``empty_dir.go`` ``setupTmpfs``), of ``size`` ``calculateEmptyDirMemorySize``:
  the node's allocatable memory, less when the Pod's memory limit is (every container declares
  one: the app containers' sum or the largest init container's, plus the Pod overhead), less
  again when the volume's ``sizeLimit`` is (a zero or larger one is ignored). A container
  sees ``tmpfs ... size=<KiB>k`` at its ``mountPath`` in ``/proc/mounts``; the files count
  against memory, and go with the Pod.
* **Tear down**: the Pod directory goes (its tmpfs mounts detached first), and the Pod's tokens
  leave the cache.
* **fsGroup** (the Pod's ``securityContext.fsGroup``; ``SetVolumeOwnership``,
  ``pkg/volume/volume_linux.go``): every file and directory of an ``emptyDir`` (at set-up) and
  of an atomic-writer volume (each write, before the swap publishes it) gets the group and the
  group bits: ``rw`` (0660) for ``emptyDir``, ``r`` (0440) for the read-only kinds; directories
  also ``x`` and the setgid bit, so what a container creates there belongs to the group.

ConfigMaps and Secrets are read with a GET each time (the kubelet watches them; the read
path and its errors are the same: a 404 is ``configmap "x" not found``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from kubesvc.agent import atomic_writer, volumes
from kubesvc.agent.envvars import host_allocatable
from kubesvc.agent.tokens import TokenError, TokenManager
from kubesvc.agent.volumes import MountConfigError, ObjectRef, VolumeError
from kubesvc.util.golang import quote as go_quote
from kubesvc.client.rest import ClientError, is_not_found
from kubesvc.api.quantity import parse_quantity
from kubesvc.kernel import host
from kubesvc.kernel.mounts import BindMount, mount_tmpfs, unmount_all_under
from kubesvc.util.clock import Clock


DISK_DIR_MODE = 0o777
MEMORY_DIR_MODE = 0o1777
_OBJECT_PATHS = {"configmap": "configmaps", "secret": "secrets"}


def is_memory_empty_dir(volume: Mapping) -> bool:
    return volumes.volume_kind(volume) == "emptyDir" and (volume.get("emptyDir") or {}).get("medium") == "Memory"


def read_only_root_filesystem(container: Mapping) -> bool:
    """``securityContext.readOnlyRootFilesystem`` of a container (the runtime makes its root
    filesystem read-only; its volumes keep their own mode)."""
    context = container.get("securityContext")
    return isinstance(context, Mapping) and context.get("readOnlyRootFilesystem") is True


RESOLV_CONF = "/etc/resolv.conf"


def runtime_file_binds(binds: list[BindMount], read_only_root: bool) -> list[BindMount]:
    """The Pod's ``/etc/resolv.conf`` and ``/etc/hosts`` binds for a container: with a read-only
    root ``resolv.conf`` is read-only too (containerd's own mount of it takes ``Readonly:
    GetReadonlyRootfs()``), ``/etc/hosts`` stays writable (the kubelet's mount, ``ReadOnly:
    false``)."""
    return [BindMount(b.source, b.target, True) if read_only_root and b.target == RESOLV_CONF else b for b in binds]


def _memory_limit(container: Mapping) -> int:
    limits = ((container.get("resources") or {}).get("limits") or {}) if isinstance(container.get("resources"), Mapping) else {}
    value = parse_quantity(limits.get("memory")) if isinstance(limits, Mapping) else None
    return int(value) if value is not None and value > 0 else 0


def pod_memory_limit(pod: Mapping) -> int | None:
    """The Pod's memory limit as ``ResourceConfigForPod`` makes it (None: some container has
    none, so the Pod has none): the app containers' sum or the largest init container's limit,
    whichever is more, plus ``overhead.memory``."""
    spec = pod.get("spec") or {}
    app = [_memory_limit(c) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    init = [_memory_limit(c) for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    if not app or 0 in app or 0 in init:
        return None
    overhead = parse_quantity((spec.get("overhead") or {}).get("memory")) if isinstance(spec.get("overhead"), Mapping) else None
    return max(sum(app), max(init, default=0)) + (int(overhead) if overhead and overhead > 0 else 0)


def memory_volume_size(volume: Mapping, pod: Mapping, node_allocatable: int) -> int:
    """``calculateEmptyDirMemorySize``: bytes of a memory-backed ``emptyDir``'s tmpfs."""
    size = node_allocatable
    pod_limit = pod_memory_limit(pod)
    if pod_limit is not None and 0 < pod_limit <= size:
        size = pod_limit
    limit = parse_quantity((volume.get("emptyDir") or {}).get("sizeLimit"))
    if limit is not None and 0 < limit <= size:
        size = int(limit)
    return size


def directory_mode(volume: Mapping) -> int:
    kind = volumes.volume_kind(volume)
    memory = kind in ("secret", "downwardAPI", "projected") or (kind == "emptyDir" and (volume.get("emptyDir") or {}).get("medium") == "Memory")
    return MEMORY_DIR_MODE if memory else DISK_DIR_MODE


class VolumeSetUpFailed(Exception):
    """Volumes that could not be set up: ``(volume name, error)`` each."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        super().__init__("; ".join(f"{name}: {message}" for name, message in failures))


PODS_DIR, STAGING_DIR = "pods", "rootfs"


def remove_orphans(kubelet_dir: Path, alive: set[str]) -> None:
    """Pod directories left by a crash for Pods not in ``alive`` (UIDs)."""
    pods = Path(kubelet_dir) / PODS_DIR
    if pods.is_dir():
        for entry in pods.iterdir():
            if entry.name not in alive:
                unmount_all_under(str(entry))  # its memory-backed volumes
                shutil.rmtree(entry, ignore_errors=True)


async def fetch_object(client, namespace: str, ref: ObjectRef, watches=None) -> dict | None:
    """A ConfigMap or Secret of ``namespace``: from the node's synced watch of it
    (``watches``: objectwatch.ObjectWatches) when that holds it, else read through the
    apiserver as the node (the Node authorizer lets a node read only those its Pods
    reference); None when it does not exist. Other failures raise ``ClientError``."""
    if watches is not None:
        cached = watches.cached(namespace, ref)
        if cached is not None:
            return cached
    try:
        return await client.get(f"/api/v1/namespaces/{namespace}/{_OBJECT_PATHS[ref.kind]}/{ref.name}")
    except ClientError as err:
        if is_not_found(err):
            return None
        raise


class PodVolumes:
    def __init__(self, kubelet_dir: Path, pod: dict, *, client, tokens: TokenManager, clock: Clock, watches=None):
        self.pod = pod
        self.watches = watches  # objectwatch.ObjectWatches: referenced objects read from their watches
        self.uid = pod["metadata"]["uid"]
        self.directory = volumes.pod_dir(Path(kubelet_dir) / PODS_DIR, self.uid)
        self.staging_root = Path(kubelet_dir) / STAGING_DIR
        self.client = client
        self.tokens = tokens
        self.clock = clock
        self.dirs: dict[str, Path] = {}
        self._allocatable: dict[str, str] | None = None

    @property
    def namespace(self) -> str:
        return self.pod["metadata"].get("namespace") or ""

    def _volumes(self) -> list[dict]:
        return [v for v in (self.pod.get("spec") or {}).get("volumes") or [] if isinstance(v, dict) and v.get("name")]

    # -- set up and refresh

    async def set_up(self) -> None:
        """Every volume in place; raises VolumeSetUpFailed listing those that are not. The
        objects and tokens are fetched on the event loop; the files are made on a thread."""
        await asyncio.to_thread(self._make_pod_directories)
        failures = []
        fetched: dict[ObjectRef, dict | None] = {}  # each object read once per pass, however many volumes name it
        for volume in self._volumes():
            kind = volumes.volume_kind(volume)
            if kind is None:
                failures.append((volume["name"], f"kubesvc cannot mount volumes of type {volumes.unsupported_kind(volume)}"))
                continue
            path = volumes.volume_dir(self.directory, volume)
            try:
                await asyncio.to_thread(_make_volume_directory, path, directory_mode(volume))
                if is_memory_empty_dir(volume):
                    size = memory_volume_size(volume, self.pod, host.memory_total_kib() * 1024)
                    await asyncio.to_thread(mount_tmpfs, str(path), size, directory_mode(volume))
                if kind == "emptyDir" and self._fs_group() is not None:
                    await asyncio.to_thread(set_volume_ownership, path, self._fs_group(), False)
                if kind in volumes.ATOMIC_KINDS:
                    await self._write(volume, path, fetched)
            except (VolumeError, OSError, ValueError) as err:
                failures.append((volume["name"], str(err)))
                continue
            self.dirs[volume["name"]] = path
        if failures:
            raise VolumeSetUpFailed(failures)

    async def refresh(self, pod: dict | None = None) -> list[tuple[str, str]]:
        """Rewrite the atomic-writer volumes (of ``pod``, a newer version, when given); the
        failures, each leaving its volume as it was."""
        if pod is not None:
            self.pod = pod
        failures = []
        fetched: dict[ObjectRef, dict | None] = {}
        for volume in self._volumes():
            path = self.dirs.get(volume["name"])
            if path is None or volumes.volume_kind(volume) not in volumes.ATOMIC_KINDS:
                continue
            try:
                await self._write(volume, path, fetched)
            except (VolumeError, OSError, ValueError) as err:
                failures.append((volume["name"], str(err)))
        return failures

    async def _write(self, volume: dict, path: Path, fetched: dict[ObjectRef, dict | None]) -> None:
        for ref in volumes.referenced_objects(volume):
            if ref not in fetched:
                fetched[ref] = await self._fetch(ref)
        objects = {ref: fetched[ref] for ref in volumes.referenced_objects(volume)}
        tokens = {}
        for projection in volumes.token_projections(volume):
            tokens[id(projection)] = await self._token(projection)
        if any(src.get("resourceFieldRef") for src in _downward_items(volume)) and self._allocatable is None:
            self._allocatable = host_allocatable()
        payload = volumes.volume_payload(volume, self.pod, objects=objects, token=lambda p: tokens[id(p)],
                                         node_allocatable=self._allocatable or {})
        fs_group = self._fs_group()
        set_perms = (lambda directory: set_volume_ownership(directory, fs_group, True)) if fs_group is not None else None
        await asyncio.to_thread(atomic_writer.write, path, payload, self.clock.now(), set_perms)

    def _fs_group(self) -> int | None:
        value = ((self.pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def _fetch(self, ref: ObjectRef) -> dict | None:
        try:
            return await fetch_object(self.client, self.namespace, ref, self.watches)
        except ClientError as err:
            raise VolumeError(f"failed to get {ref.kind} {self.namespace}/{ref.name}: {err}") from None

    async def _token(self, projection: Mapping) -> str:
        account = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
        try:
            return await self.tokens.token(self.namespace, account, volumes.token_request(self.pod, projection))
        except TokenError as err:
            raise VolumeError(str(err)) from None

    # -- mounts and tear-down

    def mounts_for(self, container: Mapping) -> list[BindMount]:
        """The container's binds; raises MountConfigError (its CreateContainerConfigError)."""
        result = []
        for mount, sub_path in volumes.container_mounts(self.pod, container, self.dirs):
            if sub_path:
                mount = BindMount(_safe_subpath(mount.source, sub_path, container), mount.target, mount.read_only)
            result.append(mount)
        return result

    async def tear_down(self) -> None:
        self.tokens.forget_pod(self.uid)
        await asyncio.to_thread(_remove_pod_directory, self.directory)

    def _make_pod_directories(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, volumes.POD_DIR_MODE)
        self.staging_root.mkdir(mode=0o700, exist_ok=True)


RW_MASK, RO_MASK, EXEC_MASK = 0o660, 0o440, 0o110


def ownership_mode(mode: int, is_dir: bool, read_only: bool) -> int:
    """``SetVolumeOwnership``'s new mode bits for one entry."""
    mask = RO_MASK if read_only else RW_MASK
    if is_dir:
        mask |= stat.S_ISGID | EXEC_MASK
    return (mode | mask) & 0o7777


def set_volume_ownership(directory: Path, fs_group: int, read_only: bool) -> None:
    """Every file and directory under ``directory`` (symbolic links skipped) owned by group
    ``fs_group`` with the group bits of :func:`ownership_mode`."""
    for base, dirs, files in os.walk(directory):
        for path in [base] + [os.path.join(base, name) for name in dirs + files]:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                continue
            os.chown(path, -1, fs_group, follow_symlinks=False)
            os.chmod(path, ownership_mode(info.st_mode, stat.S_ISDIR(info.st_mode), read_only))


def _remove_pod_directory(directory: Path) -> None:
    unmount_all_under(str(directory))  # tmpfs volumes first: their contents go with the mount
    shutil.rmtree(directory, ignore_errors=True)


def _make_volume_directory(path: Path, mode: int) -> None:
    if not path.is_dir():
        path.mkdir(parents=True)
        os.chmod(path, mode)


def _downward_items(volume: Mapping) -> list[Mapping]:
    kind = volumes.volume_kind(volume)
    if kind == "downwardAPI":
        return [i for i in volume["downwardAPI"].get("items") or [] if isinstance(i, Mapping)]
    if kind == "projected":
        return [i for s in volume["projected"].get("sources") or [] if isinstance(s, Mapping) and isinstance(s.get("downwardAPI"), Mapping)
                for i in s["downwardAPI"].get("items") or [] if isinstance(i, Mapping)]
    return []


def _safe_subpath(host_path: str, sub_path: str, container: Mapping) -> str:
    """kubelet ``makeMounts`` for a subPath: made when missing (the volume directory's mode),
    resolved, and kept inside the volume."""
    volume_path = host_path[: len(host_path) - len(sub_path)].rstrip("/")
    mount_name = next((m.get("name", "") for m in container.get("volumeMounts") or [] if m.get("subPath") == sub_path), "")
    names = f"volumeMount {go_quote(mount_name)} of container {go_quote(container.get('name') or '')}"
    try:
        if not os.path.lexists(host_path):
            mode = os.stat(volume_path).st_mode & 0o7777
            os.makedirs(host_path, exist_ok=True)
            os.chmod(host_path, mode)
    except OSError:
        raise MountConfigError(f"failed to create subPath directory for {names}") from None
    resolved, base = os.path.realpath(host_path), os.path.realpath(volume_path)
    if resolved != base and not resolved.startswith(base + "/"):
        raise MountConfigError(f"failed to prepare subPath for {names}")
    return resolved
