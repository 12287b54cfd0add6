"""Resource handlers: decode the request, call the registry, encode the answer.

One handler per verb (get, list, watch, create, update, patch, delete, deletecollection), all
kinds alike; kind-specific behaviour lives in registry strategies. What each verb must return
to satisfy kubectl 1.32 and the Python client is in api-compat.md §2.4 (F1–F12). The Pod's
action subresources (``subresources.py``) have a handler each: ``binding`` and ``log``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDict

from kubesvc.api import errors
from kubesvc.api.decode import decode_object
from kubesvc.api.errors import StatusError
from kubesvc.api.kinds.core import BINDING_INFO
from kubesvc.api.managedfields import ApplyConflict, apply as server_side_apply
from kubesvc.api.patch import PatchError, apply_patch
from kubesvc.api.scheme import KindInfo
from kubesvc.api.selectors import parse_field_selector, parse_label_selector
from kubesvc.apiserver import appkeys, codec
from kubesvc.apiserver.registry.deleteoptions import validate_delete_options
from kubesvc.apiserver.registry.pod import PodLogOptions, bind_pod, log_location
from kubesvc.apiserver.registry.store import ListOptions, Store, parse_resource_version
from kubesvc.apiserver.tables import to_table
from kubesvc.util.golang import rfc3339


@dataclass
class Target:
    """What a resource URL names."""

    store: Store
    namespace: str | None  # None: all namespaces (lists) or cluster-scoped
    name: str | None
    subresource: str = ""

    @property
    def info(self) -> KindInfo:
        return self.store.info


def json_response(body: object, status: int = 200, headers: CIMultiDict | dict | None = None) -> web.Response:
    return web.Response(body=codec.to_json(body), status=status, content_type="application/json", headers=headers)


def _header_safe(text: str) -> str:
    """Warning text as an HTTP header value: printable ASCII only, the rest escaped as Go's %q."""
    out = []
    for ch in text:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out)


def _warning_headers(warnings: list[str]) -> CIMultiDict | None:
    """One RFC 7234 ``Warning: 299 - "text"`` header per warning, as kube-apiserver sends."""
    if not warnings:
        return None
    headers: CIMultiDict = CIMultiDict()
    for text in warnings:
        headers.add("Warning", f'299 - "{_header_safe(text)}"')
    return headers


def list_options(query, info: KindInfo) -> ListOptions:
    label_text, field_text = query.get("labelSelector", ""), query.get("fieldSelector", "")
    return ListOptions(
        label_selector=parse_label_selector(label_text) if label_text else None,
        field_selector=parse_field_selector(field_text, info.field_labels, info.schema) if field_text else None,
        limit=max(codec.int64_param(query, "limit") or 0, 0),  # upstream pages only for a positive limit
        continue_token=query.get("continue", ""),
        resource_version=parse_resource_version(query.get("resourceVersion")),
        resource_version_match=query.get("resourceVersionMatch", ""),
    )


def render(request: web.Request, info: KindInfo, obj: dict, status: int = 200, headers: CIMultiDict | dict | None = None) -> web.Response:
    accept = request.headers.get("Accept")
    if codec.wants_table(accept):
        table = to_table(info, [obj], include_object=codec.include_object_mode(request.query), now=request.app[appkeys.CLOCK].now(),
                         list_meta={"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")})
        return json_response(table, status, headers)
    return json_response(obj, status, headers)


def _decode_write_body(request_body: bytes, request: web.Request, info: KindInfo, validation: str) -> tuple[dict, list[str]]:
    data = codec.decode_body(request_body, request.headers.get("Content-Type"), info)
    return decode_object(data, info.schema, kind_label=info.kind, api_version=info.api_version, validation=validation)


def _check_name_and_namespace(target: Target, obj: dict) -> None:
    meta = obj.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise errors.bad_request(f'{target.info.kind} in version "{target.info.version}" cannot be handled as a {target.info.kind}: metadata must be an object')
    body_ns = meta.get("namespace")
    if target.info.namespaced and body_ns not in (None, "") and body_ns != target.namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    if target.name is not None and meta.get("name") not in (None, "") and meta.get("name") != target.name:
        raise errors.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({target.name})")


# ---- verbs -----------------------------------------------------------------------------------


async def get_object(request: web.Request, target: Target) -> web.Response:
    obj = await target.store.get(target.namespace, target.name)
    return render(request, target.info, obj)


async def list_objects(request: web.Request, target: Target) -> web.Response:
    """From the watch cache when it answers (apiserver/cacher.py: the items are the bytes each
    write encoded, concatenated), else from storage."""
    info = target.info
    opts = list_options(request.query, info)
    cache = request.app.get(appkeys.WATCH_CACHE)
    page = await cache.list(info, target.namespace, opts) if cache is not None else None
    if page is not None:
        if codec.wants_table(request.headers.get("Accept")):
            table = to_table(info, [obj.decode() for obj in page.items], include_object=codec.include_object_mode(request.query),
                             now=request.app[appkeys.CLOCK].now(), list_meta=page.meta)
            return json_response(table)
        head = codec.to_json({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": page.meta})
        return await stream_list(request, head, [obj.raw for obj in page.items])
    items, list_meta = await target.store.list(target.namespace, opts)
    if codec.wants_table(request.headers.get("Accept")):
        table = to_table(info, items, include_object=codec.include_object_mode(request.query), now=request.app[appkeys.CLOCK].now(), list_meta=list_meta)
        return json_response(table)
    return json_response({"kind": info.list_kind, "apiVersion": info.api_version, "metadata": list_meta, "items": items})


LIST_PIECE = 256 * 1024  # bytes of items joined and written at a time


async def stream_list(request: web.Request, head: bytes, items: list[bytes]) -> web.StreamResponse:
    """The list's JSON from its encoded head (``{"kind":..,"metadata":{..}}``) and its items'
    bytes, written with its Content-Length in pieces of about LIST_PIECE: each piece is joined,
    encrypted and sent while it is in the CPU's cache. One body of the whole list (12 MB for
    12k Services) was copied whole three more times on its way out (aiohttp joins it to the
    headers, TLS encrypts it into a buffer of its own, the transport copies that out), each
    copy into freshly mapped memory: 64 -> 52 ms of server CPU per list of 12k Services."""
    opening, closing = head[:-1] + b',"items":[', b"]}"
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(opening) + sum(map(len, items)) + max(len(items) - 1, 0) + len(closing)
    await response.prepare(request)
    if not items:
        await response.write(opening + closing)
        return response
    start, size = 0, 0
    try:
        for end, raw in enumerate(items, 1):
            size += len(raw)
            if size < LIST_PIECE and end < len(items):
                continue
            parts = items[start:end]
            if start == 0:
                parts[0] = opening + parts[0]
            else:
                parts.insert(0, b"")  # the comma before this piece's first item
            if end == len(items):
                parts[-1] = parts[-1] + closing
            await response.write(b",".join(parts))
            start, size = end, 0
    except ConnectionError:  # the client went away mid-list: nothing to answer
        pass
    return response


async def create_object(request: web.Request, target: Target) -> web.Response:
    info = target.info
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    obj, warnings = _decode_write_body(await request.read(), request, info, opts.field_validation)
    _check_name_and_namespace(target, obj)
    await wait_for_admission(request, target, obj)
    created = await target.store.create(target.namespace, obj, field_manager=opts.field_manager, dry_run=opts.dry_run)
    return render(request, info, created, 201, _warning_headers(warnings))


async def wait_for_admission(request: web.Request, target: Target, obj: dict) -> None:
    """Admission plugins that may wait for what they look up (upstream's retried lookups,
    e.g. ServiceAccount's for ``default``) before the store's create, which never waits."""
    for wait in request.app.get(appkeys.ADMISSION_WAITS, ()):
        await wait(target.info, target.namespace, obj)


async def update_object(request: web.Request, target: Target) -> web.Response:
    info = target.info
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    obj, warnings = _decode_write_body(await request.read(), request, info, opts.field_validation)
    _check_name_and_namespace(target, obj)
    result, created = await target.store.update(target.namespace, target.name, obj, field_manager=opts.field_manager,
                                          subresource=target.subresource, dry_run=opts.dry_run)
    return render(request, info, result, 201 if created else 200, _warning_headers(warnings))


async def patch_object(request: web.Request, target: Target) -> web.Response:
    info = target.info
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    content_type = codec.media_type(request.headers.get("Content-Type"))
    body = await request.read()
    if len(body) > codec.MAX_BODY_BYTES:
        raise errors.too_large()
    if content_type == "application/apply-patch+yaml":
        return await _server_side_apply(request, target, opts, body)
    if content_type not in codec.PATCH_TYPES:
        raise errors.unsupported_media_type(content_type)
    codec.check_patch_depth(content_type, body)
    warnings: list[str] = []

    def mutate(current: dict) -> dict:
        try:  # current is guaranteed_update's private copy: patched in place, not copied again
            patched = apply_patch(content_type, current, body, info.schema, in_place=True)
        except PatchError as exc:
            raise StatusError(exc.code, exc.reason, str(exc)) from None
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch result is not a JSON object")
        patched = codec.check_kind(patched, info)
        decoded, found = decode_object(patched, info.schema, kind_label=info.kind, api_version=info.api_version, validation=opts.field_validation)
        warnings[:] = found
        return decoded

    result = await target.store.guaranteed_update(target.namespace, target.name, mutate, field_manager=opts.field_manager,
                                            subresource=target.subresource, dry_run=opts.dry_run)
    return render(request, info, result, 200, _warning_headers(warnings))


async def _server_side_apply(request: web.Request, target: Target, opts: codec.WriteOptions, body: bytes) -> web.Response:
    info = target.info
    if not request.query.get("fieldManager"):
        raise errors.invalid("PatchOptions", "", [errors.required("fieldManager", "is required for apply patch")], "meta.k8s.io")
    config = codec.check_kind(codec.parse_yaml(body), info)
    config, warnings = decode_object(config, info.schema, kind_label=info.kind, api_version=info.api_version, validation=opts.field_validation)
    _check_name_and_namespace(target, config)
    store = target.store
    now = rfc3339(request.app[appkeys.CLOCK].now())

    def applied(live: dict | None) -> dict:
        try:
            return server_side_apply(live, config, manager=opts.field_manager, force=opts.force, schema=info.schema,
                                     api_version=info.api_version, now=now)
        except ApplyConflict as exc:
            status = exc.status()
            raise StatusError(status["code"], status["reason"], status["message"], status.get("details")) from None

    for _attempt in range(3):
        if await store.backend.get(info.key(target.namespace, target.name)) is not None:
            result = await store.guaranteed_update(target.namespace, target.name, applied, field_manager=opts.field_manager,
                                             subresource=target.subresource, dry_run=opts.dry_run, track=False)
            return render(request, info, result, 200, _warning_headers(warnings))
        if target.subresource:
            raise errors.not_found(info.resource, target.name or "", info.group)
        new = applied(None)
        new.setdefault("metadata", {})["name"] = target.name
        await wait_for_admission(request, target, new)
        try:
            created = await store.create(target.namespace, new, field_manager=opts.field_manager, dry_run=opts.dry_run, managed=False)
        except StatusError as create_error:
            if create_error.code == 409 and create_error.reason == "AlreadyExists":
                continue  # created meanwhile by someone else: apply to theirs
            raise
        return render(request, info, created, 201, _warning_headers(warnings))
    raise errors.conflict(info.resource, target.name or "", info.group)


async def delete_options(request: web.Request) -> dict:
    body = await request.read()
    options: dict = {}
    if body.strip():
        data = codec.parse_json(body, "DeleteOptions")
        if not isinstance(data, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        options = data
    query = request.query
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        options["orphanDependents"] = codec.parameter_bool(query, "orphanDependents")
    grace = codec.int64_param(query, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    return validate_delete_options(options)


async def delete_object(request: web.Request, target: Target) -> web.Response:
    info = target.info
    options = await delete_options(request)
    dry_run = codec.write_options(request.query, request.headers.get("User-Agent")).dry_run or bool(options.get("dryRun"))  # validated: only "All"s (dryrun.IsDryRun)
    obj, deleted_now = await target.store.delete(target.namespace, target.name, options, dry_run=dry_run)
    if info.kind == "Namespace" and not dry_run:
        request.app[appkeys.NAMESPACE_FINALIZER].kick()
    if info.delete_returns_object or not deleted_now:
        # upstream answers 200 with the object also when deletion is only marked (finalizers, grace)
        return json_response(obj)
    details = {"name": target.name}
    if info.group:
        details["group"] = info.group
    details["kind"] = info.resource
    details["uid"] = obj["metadata"].get("uid", "")
    return json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})


async def delete_collection(request: web.Request, target: Target) -> web.Response:
    info = target.info
    opts = list_options(request.query, info)
    options = await delete_options(request)
    dry_run = codec.write_options(request.query, request.headers.get("User-Agent")).dry_run
    deleted = await target.store.delete_collection(target.namespace, opts, options, dry_run=dry_run)
    return json_response({"kind": info.list_kind, "apiVersion": info.api_version,
                          "metadata": {"resourceVersion": str(await target.store.backend.current_revision())}, "items": deleted})


# ---- the Pod's action subresources -----------------------------------------------------------

SUCCESS_CREATED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def create_binding(request: web.Request, target: Target) -> web.Response:
    """``POST pods/NAME/binding``, or ``POST bindings`` (the Pod named by the Binding)."""
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    binding, warnings = _decode_write_body(await request.read(), request, BINDING_INFO, opts.field_validation)
    _check_name_and_namespace(Target(target.store, target.namespace, None), binding)
    name = target.name if target.name is not None else (binding.get("metadata") or {}).get("name", "")
    await bind_pod(target.store, target.namespace or "", name, binding, dry_run=opts.dry_run)
    return json_response(SUCCESS_CREATED, 201, _warning_headers(warnings))


# ---- create-only kinds: answered, never stored -----------------------------------------------


@dataclass(frozen=True)
class CreateRequest:
    """A decoded POST of a create-only kind (an access review, TokenReview, SelfSubjectReview,
    or the TokenRequest of ``serviceaccounts/NAME/token``) for the handler registered for it."""

    info: KindInfo  # the kind POSTed
    namespace: str | None  # the URL's namespace (LocalSubjectAccessReview, serviceaccounts/token)
    name: str | None  # the object the URL names (the ServiceAccount of serviceaccounts/NAME/token)
    body: dict  # decoded as any write is (types checked, apiVersion/kind set)
    dry_run: bool


# ``app[appkeys.CREATE_HANDLERS][(group, resource)]``, resource being e.g. "selfsubjectaccessreviews"
# or "serviceaccounts/token": returns the answer object, sent as 201 Created.
CreateHandler = Callable[[web.Request, CreateRequest], Awaitable[dict]]


async def create_unstored(request: web.Request, info: KindInfo, key: tuple[str, str], namespace: str | None,
                          name: str | None = None) -> web.Response:
    """POST of a kind nothing stores: 404 until a handler is registered under ``key`` (upstream
    has no route then), else the body decoded and validated like any write, the handler's
    answer as 201 with the decoder's warnings."""
    handler: CreateHandler | None = request.app.get(appkeys.CREATE_HANDLERS, {}).get(key)
    if handler is None:
        raise StatusError(404, "NotFound", "the server could not find the requested resource")
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    body, warnings = _decode_write_body(await request.read(), request, info, opts.field_validation)
    body_namespace = (body.get("metadata") or {}).get("namespace")
    if info.namespaced and namespace is not None and body_namespace not in (None, "") and body_namespace != namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    answer = await handler(request, CreateRequest(info, namespace, name, body, opts.dry_run))
    warnings = [*warnings, *request.get("warnings", ())]  # the handler's own (a TokenRequest shortened)
    return json_response({"kind": info.kind, "apiVersion": info.api_version, **answer}, 201, _warning_headers(warnings))


async def read_pod_log(request: web.Request, target: Target) -> web.StreamResponse:
    """``GET pods/NAME/log``: the container's log, streamed from its node agent."""
    location = await log_location(target.store, target.namespace or "", target.name or "", PodLogOptions.from_query(request.query))
    if location is None:
        return web.Response(status=204)  # not on a node yet: no log, no content (upstream StreamObject)
    return await request.app[appkeys.KUBELET_CLIENT].stream(request, location, resource="pods/log", name=target.name or "")
