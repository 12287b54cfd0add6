"""``POST pods/NAME/eviction``: the HTTP shell of ``registry/eviction.py`` (decode the policy/v1
Eviction as any write is decoded, evict, answer ``Status`` Success 201). A policy/v1beta1
Eviction is the same object and is read as v1 (upstream's ``AcceptsGroupVersion`` takes both)."""

from __future__ import annotations

from aiohttp import web

from kubesvc.api import errors
from kubesvc.api.kinds.policy import EVICTION_INFO
from kubesvc.apiserver import codec
from kubesvc.apiserver.handlers import SUCCESS_CREATED, Target, _decode_write_body, _warning_headers, json_response
from kubesvc.apiserver.registry.eviction import evict_pod


def _v1beta1_as_v1(body: bytes) -> bytes:
    if b"policy/v1beta1" not in body:
        return body
    data = codec.parse_json(body, "Eviction")
    if isinstance(data, dict) and data.get("apiVersion") == "policy/v1beta1":
        return codec.to_json({**data, "apiVersion": EVICTION_INFO.api_version})
    return body


async def create_eviction(request: web.Request, target: Target) -> web.Response:
    opts = codec.write_options(request.query, request.headers.get("User-Agent"))
    body = await request.read()
    if "json" in (request.headers.get("Content-Type") or "application/json"):
        body = _v1beta1_as_v1(body)
    eviction, warnings = _decode_write_body(body, request, EVICTION_INFO, opts.field_validation)
    body_namespace = (eviction.get("metadata") or {}).get("namespace")
    if body_namespace not in (None, "") and body_namespace != target.namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    await evict_pod(target.store, target.namespace or "", target.name or "", eviction, request_dry_run=opts.dry_run)
    return json_response(SUCCESS_CREATED, 201, _warning_headers(warnings))
