"""Bytes in, bytes out: request bodies, query options and response negotiation.

Clients differ in what they send (api-compat.md §4, G7, G12): kubectl sends JSON with a
Content-Type, the Python client sends JSON with *no* Content-Type and often no apiVersion/kind,
``kubectl create namespace|service`` sends protobuf, server-side apply sends YAML (or JSON, which
is YAML). Responses are always JSON; a ``Table`` when the Accept header asks for
``as=Table;g=meta.k8s.io`` (kubectl get), which is what gives kubectl its columns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import msgspec

from kubesvc.api import errors, nesting
from kubesvc.api.yamljson import YAMLBodyError, yaml_to_json
from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.protobuf import decode_kubernetes_protobuf
from kubesvc.serving.params import parameter_bool, parameter_int  # noqa: F401 (codec.parameter_bool: the apiserver's handlers)

# upstream apiserver's MaxRequestBodyBytes (3 MiB); larger bodies get 413
MAX_BODY_BYTES = 3 * 1024 * 1024

PROTOBUF = "application/vnd.kubernetes.protobuf"
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def to_json(obj: object) -> bytes:
    return _encoder.encode(obj)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_json(body: bytes, what: str = "request body") -> object:
    """A JSON body (at most ``nesting.MAX_DEPTH`` deep: deeper is a 400 with Go's scanner error,
    as upstream's decoder of ``what`` gives it)."""
    try:
        nesting.check_json_depth(body)
    except nesting.NestingError as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None
    return _decode_json(body, what)


def _decode_json(body: bytes, what: str) -> object:
    """A JSON body whose depth is already checked."""
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise errors.bad_request(f"error decoding {what}: {exc}") from None


def yaml_document(body: bytes) -> object:
    """A YAML body as JSON data, as sigs.k8s.io/yaml's ``YAMLToJSON`` gives it: nothing nested
    deeper than ``nesting.MAX_DEPTH`` or aliased past go-yaml's budget is built
    (``api/yamljson.py``). A body that is JSON (as ``kubectl apply --server-side`` sends it) is
    read as JSON, which is YAML, at JSON's speed."""
    try:
        text = nesting.yaml_text(body)
    except UnicodeDecodeError as exc:
        raise YAMLBodyError(f"yaml: {_UTF8_PROBLEMS.get(exc.reason, 'invalid Unicode character')}") from None
    if text.lstrip(" \t\r\n").startswith("{"):
        try:
            nesting.check_json_depth(text.encode())
            return _decoder.decode(text)
        except (nesting.NestingError, msgspec.DecodeError):
            pass  # too deep, or YAML's flow style rather than JSON: YAML's reading and its errors
    return yaml_to_json(text)


# Python's UnicodeDecodeError reasons, as libyaml's and go-yaml's reader words them
_UTF8_PROBLEMS = {
    "invalid start byte": "invalid leading UTF-8 octet",
    "invalid continuation byte": "invalid trailing UTF-8 octet",
    "unexpected end of data": "incomplete UTF-8 octet sequence",
}


def parse_yaml(body: bytes) -> object:
    """A server-side apply body: errors worded as 1.32's apply patcher words them."""
    try:
        return yaml_document(body)
    except YAMLBodyError as exc:
        raise errors.bad_request(f"error decoding YAML: error converting YAML to JSON: {exc}") from None


def check_patch_depth(patch_type: str, body: bytes) -> None:
    """A JSON, merge or strategic merge patch nested deeper than ``MAX_DEPTH``: the 400 of 1.32's
    patch handler, whose strict decode of the patch (fieldValidation Warn, the default, or
    Strict) meets Go's scanner error first: ``error decoding patch: …`` for JSON and merge
    patches, the bare error for a strategic merge patch."""
    try:
        nesting.check_json_depth(body)
    except nesting.NestingError as exc:
        prefix = "" if patch_type == "application/strategic-merge-patch+json" else "error decoding patch: "
        raise errors.bad_request(f"{prefix}{exc}") from None


def summarize_data(data: bytes, max_length: int = 30) -> str:
    """Upstream's ``summarizeData`` (handlers/rest.go): a JSON object's first bytes as text,
    anything else in hex, for the 400 of a body it could not recognize."""
    if not data:
        return "<empty>"
    cut = data[:max_length]
    text = cut.decode("utf-8", "replace") if data[:1] == b"{" else cut.hex()
    return text + " ..." if len(data) > max_length else text


def unrecognized(info: KindInfo, reason: str, body: bytes) -> StatusError:
    """Upstream's ``transformDecodeError`` for a body its decoder found no kind in."""
    return errors.bad_request(f"the object provided is unrecognized (must be of type {info.kind}): {reason} ({summarize_data(body)})")


def decode_body(body: bytes, content_type: str | None, info: KindInfo) -> dict:
    """A POST/PUT body as a JSON object of this kind (apiVersion/kind filled from the URL when
    absent; a different kind is a 400, as upstream's decoder says)."""
    if len(body) > MAX_BODY_BYTES:
        raise errors.too_large()
    kind_type = media_type(content_type)
    if kind_type == PROTOBUF:
        data: object = decode_kubernetes_protobuf(body)
    elif kind_type in ("", "application/json", "*/*"):
        try:
            nesting.check_json_depth(body)
        except nesting.NestingError as exc:
            raise unrecognized(info, f"couldn't get version/kind; json parse error: {exc}", body) from None
        data = _decode_json(body, "request body")  # depth checked just above: not scanned twice
    elif kind_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        try:
            data = yaml_document(body)
        except YAMLBodyError as exc:
            raise unrecognized(info, str(exc), body) from None
    else:
        raise StatusError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf')
    return check_kind(data, info)


def check_kind(data: object, info: KindInfo) -> dict:
    if not isinstance(data, dict):
        raise errors.bad_request(f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}: the object provided is not a JSON object')
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if api_version in (None, "") and kind in (None, ""):
        return {"apiVersion": info.api_version, "kind": info.kind, **{k: v for k, v in data.items() if k not in ("apiVersion", "kind")}}
    if kind not in (None, "") and kind != info.kind or api_version not in (None, "") and api_version != info.api_version:
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected API version ({info.api_version})"
                                 if kind == info.kind else
                                 f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}: no kind "{kind}" is registered for version "{api_version}"')
    data = dict(data)
    data["apiVersion"], data["kind"] = info.api_version, info.kind
    return data


# ---- query options ---------------------------------------------------------------------------

_VALIDATION_MODES = ("Strict", "Warn", "Ignore")


@dataclass
class WriteOptions:
    field_manager: str
    field_validation: str
    dry_run: bool
    force: bool


def write_options(query, user_agent: str | None, *, default_validation: str = "Warn") -> WriteOptions:
    dry_run_values = query.getall("dryRun", [])
    for value in dry_run_values:
        if value != "All":
            raise StatusError(400, "BadRequest", f'Invalid dryRun value: {value!r}: supported values: "All"')
    validation = query.get("fieldValidation", "") or default_validation
    if validation not in _VALIDATION_MODES:
        raise errors.bad_request(f'fieldValidation parameter "{validation}" is not supported; valid values are: Ignore, Warn, Strict')
    manager = query.get("fieldManager", "")
    if len(manager) > 128:
        raise errors.bad_request("fieldManager: Too long: must have at most 128 bytes")
    if not manager:
        manager = default_field_manager(user_agent)
    # PatchOptions.Force through the parameter codec (Convert_Slice_string_To_Pointer_bool)
    return WriteOptions(manager, validation, bool(dry_run_values), parameter_bool(query, "force"))


def default_field_manager(user_agent: str | None) -> str:
    """Upstream's prefixFromUserAgent: the User-Agent up to the first '/' (kubectl, OpenAPI-Generator)."""
    agent = (user_agent or "unknown").split("/", 1)[0]
    return "".join(ch for ch in agent if ch.isprintable())[:128] or "unknown"


def int64_param(query, name: str) -> int | None:
    """An int64 query parameter (``limit``, ``timeoutSeconds``, ``gracePeriodSeconds``): None
    when absent or empty; anything ``strconv.ParseInt`` refuses, too large numbers included, is
    the 400 the parameter codec gives, in its words."""
    try:
        return parameter_int(query, name)
    except ValueError as exc:
        raise errors.bad_request(str(exc)) from None


MAX_GO_DURATION_SECONDS = (2**63 - 1) // 10**9  # Go's time.Duration holds about 292 years


def watch_timeout(query) -> float:
    """A watch's lifetime, as upstream's ListResource takes it: ``timeoutSeconds``, else the
    min-request-timeout jitter (1800 s .. 3600 s). A negative one ends the watch at once (a
    deadline in the past). Upstream multiplies seconds into a ``time.Duration``, which holds
    about 292 years; larger values are that long here rather than wrapping around."""
    seconds = int64_param(query, "timeoutSeconds")
    if seconds is None or seconds == 0:
        return 1800 * (1 + random.random())
    return float(min(max(seconds, -1), MAX_GO_DURATION_SECONDS))


# ---- responses -------------------------------------------------------------------------------


def wants_table(accept: str | None) -> bool:
    return bool(accept) and "as=Table" in accept and "g=meta.k8s.io" in accept


def accepts_json(accept: str | None) -> bool:
    if not accept:
        return True
    for part in accept.split(","):
        kind = part.split(";", 1)[0].strip().lower()
        if kind in ("application/json", "*/*", "application/*", "application/yaml", ""):
            return True
    return False


def include_object_mode(query) -> str:
    mode = query.get("includeObject", "") or "Metadata"
    if mode not in ("None", "Metadata", "Object"):
        raise errors.bad_request(f'includeObject: Unsupported value: "{mode}": supported values: "Metadata", "None", "Object"')
    return mode
