"""The ``scale`` subresource of Deployments, ReplicaSets and ReplicationControllers.

Upstream's ``ScaleREST`` (pkg/registry/apps/deployment/storage, .../replicaset/storage,
core/replicationcontroller/storage): ``GET <resource>/NAME/scale`` answers an autoscaling/v1
``Scale`` built from the object (``api/kinds/autoscaling.py``); ``PUT`` a Scale, or ``PATCH``
one (merge, JSON or strategic merge patch, applied to the current Scale: ``kubectl scale``
sends ``{"spec":{"replicas":N}}``), sets only the object's ``spec.replicas`` through the
object's own update path (its strategy, validation and managedFields, recorded with
subresource ``scale``), and answers the new Scale. The Scale's ``resourceVersion``, when
set, must be the object's (409 Conflict otherwise), and ``spec.replicas`` may not be negative
(422 ``Scale.autoscaling "NAME" is invalid: spec.replicas: Invalid value: -1: must be greater
than or equal to 0``).
"""

from __future__ import annotations

import copy

from aiohttp import web

from kubesvc.api import errors
from kubesvc.api.decode import decode_object
from kubesvc.api.errors import StatusError
from kubesvc.api.kinds.autoscaling import SCALE, SCALE_INFO
from kubesvc.api.patch import PatchError, apply_patch
from kubesvc.api.selectors import selector_from_label_selector, selector_from_map
from kubesvc.api.validation_meta import validate_nonnegative
from kubesvc.apiserver import codec
from kubesvc.apiserver.handlers import Target, json_response

_SCALE_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def selector_string(kind: str, spec: dict) -> str:
    """``status.selector``: the label selector as a string (a ReplicationController's plain map too)."""
    selector = spec.get("selector")
    if kind == "ReplicationController":
        return str(selector_from_map(selector if isinstance(selector, dict) else None)) if selector else ""
    try:
        return str(selector_from_label_selector(selector if isinstance(selector, dict) else None))
    except (StatusError, AttributeError, TypeError):
        return ""


def scale_of(kind: str, obj: dict) -> dict:
    """The Scale of a Deployment, ReplicaSet or ReplicationController (``scaleFromDeployment``...)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    scale_spec = {"replicas": spec["replicas"]} if spec.get("replicas") else {}
    scale_status: dict = {"replicas": status.get("replicas") or 0}
    if selector := selector_string(kind, spec):
        scale_status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in _SCALE_METADATA if k in meta},
        "spec": scale_spec,
        "status": scale_status,
    }


def _replicas(scale: dict) -> int:
    spec = scale.get("spec") if isinstance(scale.get("spec"), dict) else {}
    replicas = spec.get("replicas")
    return replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 0


def _validate(scale: dict, name: str) -> None:
    """``ValidateScale``."""
    field_errors = validate_nonnegative(_replicas(scale), "spec.replicas")
    if field_errors:
        raise errors.invalid("Scale", name, field_errors, "autoscaling")


async def handle_scale(request: web.Request, target: Target) -> web.Response:
    """``GET``, ``PUT`` or ``PATCH`` of ``<resource>/NAME/scale``."""
    info, store, name = target.info, target.store, target.name or ""
    if request.method == "GET":
        return json_response(scale_of(info.kind, await store.get(target.namespace, name)))
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    body = await request.read()
    if len(body) > codec.MAX_BODY_BYTES:
        raise errors.too_large()
    warnings: list[str] = []
    if request.method == "PUT":
        data = codec.check_kind(codec.decode_body(body, request.headers.get("Content-Type"), SCALE_INFO), SCALE_INFO)
        put_scale, warnings = decode_object(data, SCALE, kind_label="Scale", api_version="autoscaling/v1", validation=opts.field_validation)
        body_name = (put_scale.get("metadata") or {}).get("name")
        if body_name not in (None, "") and body_name != name:
            raise errors.bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        patch_type = ""
    else:
        patch_type = codec.media_type(request.headers.get("Content-Type"))
        if patch_type not in codec.PATCH_TYPES:
            raise errors.unsupported_media_type(patch_type)
        codec.check_patch_depth(patch_type, body)

    def mutate(current: dict) -> dict:
        if patch_type:
            try:
                patched = apply_patch(patch_type, scale_of(info.kind, current), body, SCALE)
            except PatchError as exc:
                raise StatusError(exc.code, exc.reason, str(exc)) from None
            if not isinstance(patched, dict):
                raise errors.bad_request("the patch result is not a JSON object")
            patched = codec.check_kind(patched, SCALE_INFO)
            scale, found = decode_object(patched, SCALE, kind_label="Scale", api_version="autoscaling/v1", validation=opts.field_validation)
            warnings[:] = found
        else:
            scale = put_scale
        _validate(scale, name)
        new = copy.deepcopy(current)
        new.setdefault("spec", {})["replicas"] = _replicas(scale)
        wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
        new["metadata"]["resourceVersion"] = wanted_rv or current["metadata"]["resourceVersion"]
        return new

    updated = await store.guaranteed_update(target.namespace, name, mutate, field_manager=opts.field_manager,
                                            subresource="scale", dry_run=opts.dry_run)
    headers = {"Warning": f'299 - "{warnings[0]}"'} if warnings else None
    return json_response(scale_of(info.kind, updated), 200, headers)
