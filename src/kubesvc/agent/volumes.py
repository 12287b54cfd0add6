"""Pod volumes on the node, as decisions: what each volume holds and where each container sees it.

The kubelet sets up a Pod's volumes before its sandbox, under
``/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<volume>`` (plugin directories such as
``kubernetes.io~projected``), then the runtime bind-mounts them onto each container's
``volumeMounts``. The agent keeps that layout under its data directory
(``<data-dir>/kubelet/pods/<uid>``, mode 0700: tokens and Secrets live there). Volume kinds
served here (upstream ``pkg/volume/<plugin>``):

* ``emptyDir``: a directory made 0777 (``empty_dir.go``); ``medium: Memory`` is a directory
  too (a tmpfs would be a host mount);
* ``configMap`` / ``secret``: ``MakePayload``: with no ``items`` every key becomes a file with
  ``defaultMode``; with ``items`` only those keys, at ``item.path``, with ``item.mode`` or
  ``defaultMode``; a missing key fails (``configmap references non-existent config key: K``,
  ``references non-existent secret key: K``) unless the volume is ``optional``; a missing
  object fails (``configmap "x" not found``) unless ``optional``, which gives an empty volume;
* ``downwardAPI``: ``CollectData``: each item's ``fieldRef`` (metadata.name, namespace, uid,
  labels, annotations and their subscripts) or ``resourceFieldRef`` value, mode as above;
* ``projected``: the union of its sources (``projected.go`` ``collectData``): secret,
  configMap, downwardAPI as above, and ``serviceAccountToken``: a TokenRequest for the Pod's
  ServiceAccount, bound to the Pod (``boundObjectRef`` kind Pod with its name and uid), with the
  projection's ``audience`` (none: the API audiences) and ``expirationSeconds``; the file has
  ``defaultMode``. The ServiceAccount admission plugin's ``kube-api-access-<5 chars>`` volume
  is one of these: ``token`` (3607 s), ``ca.crt`` from ConfigMap ``kube-root-ca.crt`` and
  ``namespace``.

Files are written by the atomic writer (``atomic_writer.py``). configMap, secret, downwardAPI
and projected volumes are always mounted read-only, whatever the ``volumeMount`` says (their
``GetAttributes().ReadOnly``, since CVE-2017-1002102); a relative ``mountPath`` is taken from
``/`` (``MakeAbsolutePath``). Errors carry the kubelet's words: a volume setup failure is the
``FailedMount`` event ``MountVolume.SetUp failed for volume "v" : <error>``; a mount the
container cannot have is its ``CreateContainerConfigError``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubesvc.agent.envvars import EnvError, ObjectRef, container_resource_value, extract_field_path
from kubesvc.api.defaults import DEFAULT_VOLUME_MODE
from kubesvc.api.validation_config import secret_bytes
from kubesvc.util.golang import quote as go_quote
from kubesvc.kernel.mounts import BindMount
from kubesvc.util import golang

# source key -> the kubelet plugin's directory name (``utilstrings.EscapeQualifiedName``)
PLUGIN_DIRS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
READ_ONLY_KINDS = frozenset({"configMap", "secret", "downwardAPI", "projected"})
ATOMIC_KINDS = READ_ONLY_KINDS  # written through the atomic writer, refreshed while the Pod runs
POD_DIR_MODE = 0o700


class VolumeError(Exception):
    """A volume cannot be set up (the text after ``MountVolume.SetUp failed for volume "v" : ``)."""


class MountConfigError(Exception):
    """A container's mount cannot be made (its ``CreateContainerConfigError`` message)."""


@dataclass(frozen=True)
class FileProjection:
    """One file of an atomic-writer volume (upstream ``volumeutil.FileProjection``)."""

    data: bytes
    mode: int


Payload = dict[str, FileProjection]


# ---- which volume, where ----------------------------------------------------------------------


def volume_kind(volume: Mapping) -> str | None:
    """The volume's source key when the agent serves that kind, else None."""
    for key in PLUGIN_DIRS:
        if volume.get(key) is not None:
            return key
    return None


def unsupported_kind(volume: Mapping) -> str:
    """The source key of a volume the agent does not serve (for its error)."""
    return next((k for k, v in volume.items() if k != "name" and v is not None), "")


def pod_dir(root: Path, uid: str) -> Path:
    return Path(root) / uid


def volume_dir(pod_directory: Path, volume: Mapping) -> Path:
    """``<pod dir>/volumes/<plugin>/<volume name>``, as the kubelet lays it out."""
    return Path(pod_directory) / "volumes" / PLUGIN_DIRS[volume_kind(volume) or "emptyDir"] / volume["name"]


def container_mounts(pod: Mapping, container: Mapping, volume_dirs: Mapping[str, Path]) -> list[tuple[BindMount, str]]:
    """Upstream ``makeMounts`` for one container: a bind per ``volumeMount`` with its subPath
    (not yet checked on disk: ``subpath.prepare``), and the subPath itself ("" when none)."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or [] if isinstance(v, Mapping)}
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = mount.get("name") or ""
        volume = volumes.get(name)
        if volume is None or name not in volume_dirs:
            raise MountConfigError(f"cannot find volume {go_quote(name)} to mount into container {go_quote(container.get('name') or '')}")
        source = str(volume_dirs[name])
        sub_path = mount.get("subPath") or ""
        if sub_path:
            if sub_path.startswith("/"):
                raise MountConfigError(f"error SubPath `{sub_path}` must not be an absolute path")
            if ".." in sub_path.split("/"):
                raise MountConfigError(f"unable to provision SubPath `{sub_path}`: must not contain '..'")
            source = posixpath.join(source, sub_path)
        target = mount.get("mountPath") or ""
        if not target.startswith("/"):
            target = posixpath.normpath("/" + target)
        read_only = bool(mount.get("readOnly")) or volume_kind(volume) in READ_ONLY_KINDS
        mounts.append((BindMount(source, target, read_only), sub_path))
    return mounts


# ---- what atomic-writer volumes hold ----------------------------------------------------------


def _mode(value, default_mode: int | None) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else int(default_mode if default_mode is not None else DEFAULT_VOLUME_MODE)


def _items(source: Mapping) -> list[Mapping]:
    return [i for i in source.get("items") or [] if isinstance(i, Mapping)]


def not_found(kind: str, name: str) -> VolumeError:
    """The kubelet's ConfigMap/Secret manager NotFound (``configmap "x" not found``)."""
    return VolumeError(f"{kind} {go_quote(name)} not found")


def configmap_payload(source: Mapping, configmap: Mapping | None, default_mode: int | None) -> Payload:
    """``configmap.MakePayload`` (``configmap`` None: not found, an error unless optional)."""
    optional = bool(source.get("optional"))
    if configmap is None:
        if not optional:
            raise not_found("configmap", source.get("name") or "")
        configmap = {}
    data = {k: v.encode() for k, v in (configmap.get("data") or {}).items() if isinstance(v, str)}
    binary = {k: secret_bytes(v) for k, v in (configmap.get("binaryData") or {}).items() if isinstance(v, str)}
    items = _items(source)
    if not items:
        return {key: FileProjection(value, _mode(None, default_mode)) for key, value in {**data, **binary}.items()}
    payload: Payload = {}
    for item in items:
        key = item.get("key") or ""
        if key in data:
            value = data[key]
        elif key in binary:
            value = binary[key]
        elif optional:
            continue
        else:
            raise VolumeError(f"configmap references non-existent config key: {key}")
        payload[item.get("path") or ""] = FileProjection(value, _mode(item.get("mode"), default_mode))
    return payload


def secret_payload(source: Mapping, secret: Mapping | None, default_mode: int | None, *, name_key: str = "secretName") -> Payload:
    """``secret.MakePayload`` (a Secret's ``data`` values are base64 in the API)."""
    optional = bool(source.get("optional"))
    if secret is None:
        if not optional:
            raise not_found("secret", source.get(name_key) or "")
        secret = {}
    data = {k: secret_bytes(v) for k, v in (secret.get("data") or {}).items() if isinstance(v, str)}
    items = _items(source)
    if not items:
        return {key: FileProjection(value, _mode(None, default_mode)) for key, value in data.items()}
    payload: Payload = {}
    for item in items:
        key = item.get("key") or ""
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"references non-existent secret key: {key}")
        payload[item.get("path") or ""] = FileProjection(data[key], _mode(item.get("mode"), default_mode))
    return payload


def downward_api_payload(items: list, pod: Mapping, default_mode: int | None, node_allocatable: Mapping[str, str]) -> Payload:
    """``downwardapi.CollectData``: every item's value; the errors of all items, joined as
    Go's ``utilerrors.NewAggregate`` (one error as is, several as ``[a, b]``)."""
    payload: Payload = {}
    problems: list[str] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        path = posixpath.normpath(item.get("path") or "")
        data = b""
        try:
            if (field_ref := item.get("fieldRef")) is not None:
                data = extract_field_path(pod.get("metadata") or {}, (field_ref or {}).get("fieldPath") or "").encode()
            elif (resource_ref := item.get("resourceFieldRef")) is not None:
                data = container_resource_value(resource_ref, dict(pod), {}, node_allocatable).encode()
        except EnvError as err:
            problems.append(str(err))
        payload[path] = FileProjection(data, _mode(item.get("mode"), default_mode))
    if problems:
        raise VolumeError(golang.aggregate(problems))
    return payload


# ---- projected volumes ------------------------------------------------------------------------


def token_request(pod: Mapping, projection: Mapping) -> dict:
    """The TokenRequest the kubelet sends for a ``serviceAccountToken`` projection."""
    meta = pod.get("metadata") or {}
    spec: dict = {"expirationSeconds": int(projection.get("expirationSeconds") or 3600),
                  "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name", ""), "uid": meta.get("uid", "")}}
    if projection.get("audience"):
        spec["audiences"] = [projection["audience"]]
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def referenced_objects(volume: Mapping) -> list[ObjectRef]:
    """The ConfigMaps and Secrets ``volume`` reads (fetched before its payload is made)."""
    kind = volume_kind(volume)
    if kind == "configMap":
        return [ObjectRef("configmap", volume["configMap"].get("name") or "")]
    if kind == "secret":
        return [ObjectRef("secret", volume["secret"].get("secretName") or "")]
    refs = []
    if kind == "projected":
        for source in volume["projected"].get("sources") or []:
            if isinstance(source, Mapping) and source.get("configMap") is not None:
                refs.append(ObjectRef("configmap", source["configMap"].get("name") or ""))
            elif isinstance(source, Mapping) and source.get("secret") is not None:
                refs.append(ObjectRef("secret", source["secret"].get("name") or ""))
    return refs


def token_projections(volume: Mapping) -> list[Mapping]:
    """The ``serviceAccountToken`` sources of a projected volume."""
    if volume_kind(volume) != "projected":
        return []
    return [s["serviceAccountToken"] for s in volume["projected"].get("sources") or []
            if isinstance(s, Mapping) and isinstance(s.get("serviceAccountToken"), Mapping)]


def volume_payload(volume: Mapping, pod: Mapping, *, objects: Mapping[ObjectRef, Mapping | None],
                   token: Callable[[Mapping], str], node_allocatable: Mapping[str, str]) -> Payload:
    """The files of an atomic-writer volume. ``objects`` holds every ``referenced_objects``
    (None: not found); ``token(projection)`` gives a projection's token or raises VolumeError."""
    kind = volume_kind(volume)
    source = volume[kind]
    default_mode = source.get("defaultMode")
    if kind == "configMap":
        return configmap_payload(source, objects.get(ObjectRef("configmap", source.get("name") or "")), default_mode)
    if kind == "secret":
        return secret_payload(source, objects.get(ObjectRef("secret", source.get("secretName") or "")), default_mode)
    if kind == "downwardAPI":
        return downward_api_payload(source.get("items") or [], pod, default_mode, node_allocatable)
    payload: Payload = {}
    problems: list[str] = []
    for projection in source.get("sources") or []:
        if not isinstance(projection, Mapping):
            continue
        try:
            if (cm := projection.get("configMap")) is not None:
                payload.update(configmap_payload(cm, objects.get(ObjectRef("configmap", cm.get("name") or "")), default_mode))
            elif (sec := projection.get("secret")) is not None:
                payload.update(secret_payload(sec, objects.get(ObjectRef("secret", sec.get("name") or "")), default_mode, name_key="name"))
            elif (dapi := projection.get("downwardAPI")) is not None:
                payload.update(downward_api_payload(dapi.get("items") or [], pod, default_mode, node_allocatable))
            elif (sat := projection.get("serviceAccountToken")) is not None:
                payload[sat.get("path") or ""] = FileProjection(token(sat).encode(), _mode(None, default_mode))
        except VolumeError as err:
            problems.append(str(err))
    if problems:
        raise VolumeError(golang.aggregate(problems))
    return payload
