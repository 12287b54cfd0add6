"""Bytes in, bytes out: request bodies, query options and response negotiation.

Clients differ in what they send (api-compat.md §4, G7, G12): kubectl sends JSON with a
Content-Type, the Python client sends JSON with *no* Content-Type and often no apiVersion/kind,
``kubectl create namespace|service`` sends protobuf, server-side apply sends YAML (or JSON, which
is YAML). Responses are always JSON; a ``Table`` when the Accept header asks for
``as=Table;g=meta.k8s.io`` (kubectl get), which is what gives kubectl its columns.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

import msgspec
import yaml

from kubesvc.api import errors
from kubesvc.api.errors import StatusError
from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.protobuf import decode_kubernetes_protobuf

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
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise errors.bad_request(f"error decoding {what}: {exc}") from None


class _JSONCompatibleLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML as Kubernetes reads it (sigs.k8s.io/yaml converts to JSON): timestamps stay strings."""


_JSONCompatibleLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _JSONCompatibleLoader.yaml_implicit_resolvers.items()
}


def parse_yaml(body: bytes) -> object:
    try:
        return _json_keys(yaml.load(body, Loader=_JSONCompatibleLoader))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise errors.bad_request(f"error converting YAML to JSON: {str(exc).splitlines()[0]}") from None


def _json_keys(value: object) -> object:
    """sigs.k8s.io/yaml's JSON conversion: mapping keys become strings (``null``, ``true``,
    ``1``), as JSON has no other kind of key."""
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else json.dumps(k) if k is None or isinstance(k, (bool, int, float)) else str(k)): _json_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_json_keys(v) for v in value]
    return value


def decode_body(body: bytes, content_type: str | None, info: KindInfo) -> dict:
    """A POST/PUT body as a JSON object of this kind (apiVersion/kind filled from the URL when
    absent; a different kind is a 400, as upstream's decoder says)."""
    if len(body) > MAX_BODY_BYTES:
        raise errors.too_large()
    kind_type = media_type(content_type)
    if kind_type == PROTOBUF:
        data: object = decode_kubernetes_protobuf(body)
    elif kind_type in ("", "application/json", "*/*"):
        data = parse_json(body)
    elif kind_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        data = parse_yaml(body)
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
    force_text = query.get("force", "false").lower()
    if force_text not in ("true", "false", "1", "0", ""):
        raise errors.bad_request(f'invalid value for force: "{force_text}"')
    return WriteOptions(manager, validation, bool(dry_run_values), force_text in ("true", "1"))


def default_field_manager(user_agent: str | None) -> str:
    """Upstream's prefixFromUserAgent: the User-Agent up to the first '/' (kubectl, OpenAPI-Generator)."""
    agent = (user_agent or "unknown").split("/", 1)[0]
    return "".join(ch for ch in agent if ch.isprintable())[:128] or "unknown"


def int_param(query, name: str, default: int | None = None, minimum: int = 0) -> int | None:
    text = query.get(name)
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'invalid value for {name}: "{text}": must be an integer') from None
    if value < minimum:
        raise errors.bad_request(f"invalid value for {name}: {value}: must be >= {minimum}")
    return value


def bool_param(query, name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


def parameter_bool(query, name: str) -> bool:
    """A bool query parameter as the parameter codec reads one into an options struct
    (``Convert_Slice_string_To_bool``): absent, "0" or "false" (any case) is false, anything
    else, even empty, is true."""
    if name not in query:
        return False
    return not (query[name] == "0" or query[name].lower() == "false")


def parameter_int(query, name: str) -> int | None:
    """An int64 query parameter as the parameter codec reads one (``strconv.ParseInt``): None
    when absent or empty, ValueError with Go's words when it is not a 64-bit integer."""
    text = query.get(name, "")
    if text == "":
        return None
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def watch_timeout(query) -> float:
    """timeoutSeconds, else upstream's min-request-timeout jitter: 1800 s .. 3600 s."""
    seconds = int_param(query, "timeoutSeconds")
    if seconds is None or seconds == 0:
        return 1800 * (1 + random.random())
    return float(seconds)


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
