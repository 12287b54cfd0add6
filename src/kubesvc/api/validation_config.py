"""Validation of Secrets, ConfigMaps and ServiceAccounts, as ``pkg/apis/core/validation/validation.go``.

* **Secret** (``ValidateSecret``): a DNS-subdomain name; every ``data`` key a config key
  (``IsConfigMapKey``: ``[-._a-zA-Z0-9]+``, not ``.``/``..``); all values together at most
  ``MaxSecretSize`` (1 MiB). The ``type`` decides required keys: a service-account-token
  Secret needs the ``kubernetes.io/service-account.name`` annotation (its token is filled in
  later), ``kubernetes.io/dockercfg`` and ``kubernetes.io/dockerconfigjson`` need their key
  holding a JSON object, ``kubernetes.io/basic-auth`` ``username`` or ``password``,
  ``kubernetes.io/ssh-auth`` a non-empty ``ssh-privatekey``, ``kubernetes.io/tls`` both
  ``tls.crt`` and ``tls.key``. ``Opaque``, ``bootstrap.kubernetes.io/token`` and any other
  type are not checked here (a bootstrap token's keys are the authenticator's concern). On
  update ``type`` is immutable, and once ``immutable: true`` neither ``immutable`` nor
  ``data`` may change.
* **ConfigMap** (``ValidateConfigMap``): config keys in ``data`` and ``binaryData``, no key in
  both, 1 MiB for both together (reported on the empty path, as upstream), and the same
  ``immutable`` rule for ``data`` and ``binaryData``.
* **ServiceAccount**: only its metadata (a DNS-subdomain name).

``stringData`` never reaches validation: decoding merged it into ``data`` (``defaults``).
"""

from __future__ import annotations

import json
from typing import Any

from kubesvc.api.errors import forbidden_field, invalid_value, required, too_long
from kubesvc.api.validation_meta import (
    Errs,
    each_invalid,
    index,
    is_config_map_key,
    name_is_dns_subdomain,
    nbytes,
    read,
    read_map,
    read_str,
    validate_object_meta,
    validate_object_meta_update,
)
from kubesvc.util import gobase64

MAX_SECRET_SIZE = 1024 * 1024  # core.MaxSecretSize, also the ConfigMap limit

SERVICE_ACCOUNT_NAME_KEY = "kubernetes.io/service-account.name"
DOCKER_CONFIG_KEY = ".dockercfg"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
REDACTED = "<secret contents redacted>"
IMMUTABLE = "field is immutable when `immutable` is set"


def secret_bytes(value: Any) -> bytes:
    """The bytes a ``data`` value (base64 text) stands for; decoding already rejected bad base64."""
    try:
        return gobase64.decode(value) if isinstance(value, str) else b""
    except gobase64.CorruptInputError:
        return b""


def _data(errs: Errs, obj: Any, name: str) -> dict[str, bytes]:
    return {key: secret_bytes(value) for key, value in read_map(errs, obj, name, "").items()}


def _config_keys(keys: list[str], path: str) -> Errs:
    return [e for key in sorted(keys) for e in each_invalid(index(path, key), key, is_config_map_key(key))]


# ---- Secret --------------------------------------------------------------------------------------


def go_json_object_error(data: bytes) -> str | None:
    """What ``json.Unmarshal(data, &map[string]interface{}{})`` says, or None if it succeeds.
    Syntax errors follow Go's scanner wording for the common cases."""
    try:
        value = json.loads(data.decode("utf-8", "surrogateescape"))
    except json.JSONDecodeError as error:
        if not data.strip() or error.pos >= len(error.doc):
            return "unexpected end of JSON input"
        context = {
            "Expecting value": "looking for beginning of value",
            "Expecting ':' delimiter": "after object key",
            "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
            "Extra data": "after top-level value",
        }.get(error.msg, "in string literal" if "control character" in error.msg else "after object key:value pair")
        if error.msg == "Expecting ',' delimiter" and _innermost_open(error.doc, error.pos) == "[":
            context = "after array element"
        return f"invalid character {_go_char(error.doc[error.pos])} {context}"
    except UnicodeDecodeError:
        return "invalid character looking for beginning of value"
    if value is None or isinstance(value, dict):
        return None
    kind = {str: "string", bool: "bool", list: "array"}.get(type(value), "number")
    return f"json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"


def _innermost_open(doc: str, pos: int) -> str:
    stack: list[str] = []
    in_string = escaped = False
    for char in doc[:pos]:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _go_char(char: str) -> str:
    """encoding/json's quoteChar: ``'x'``, with ``'\\''`` and ``'"'`` spelled as Go does."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    return "'" + char + "'" if char.isprintable() else json.dumps(char)


def _secret_type_rules(secret_type: str, data: dict[str, bytes], annotations: dict) -> Errs:
    if secret_type == "kubernetes.io/service-account-token":
        if not annotations.get(SERVICE_ACCOUNT_NAME_KEY):
            return [required(index("metadata.annotations", SERVICE_ACCOUNT_NAME_KEY))]
    elif secret_type in ("kubernetes.io/dockercfg", "kubernetes.io/dockerconfigjson"):
        key = DOCKER_CONFIG_KEY if secret_type == "kubernetes.io/dockercfg" else DOCKER_CONFIG_JSON_KEY
        if key not in data:
            return [required(index("data", key))]
        error = go_json_object_error(data[key])
        if error:
            return [invalid_value(index("data", key), REDACTED, error)]
    elif secret_type == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            return [required("data[username]"), required("data[password]")]
    elif secret_type == "kubernetes.io/ssh-auth":
        if not data.get("ssh-privatekey"):
            return [required("data[ssh-privatekey]")]
    elif secret_type == "kubernetes.io/tls":
        return [required(index("data", key)) for key in ("tls.crt", "tls.key") if key not in data]
    return []


def validate_secret(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=True, name_fn=name_is_dns_subdomain)
    data = _data(errs, obj, "data")
    errs += _config_keys(list(data), "data")
    if sum(len(value) for value in data.values()) > MAX_SECRET_SIZE:
        errs.append(too_long("data", "", MAX_SECRET_SIZE))
    annotations = read_map([], read_map([], obj, "metadata", ""), "annotations", "metadata")
    errs += _secret_type_rules(read_str(errs, obj, "type", ""), data, annotations)
    return errs


def _immutable_once_set(new: Any, old: Any, fields: tuple[str, ...]) -> Errs:
    if read([], old, "immutable", "", bool) is not True:
        return []
    out: Errs = []
    if read(out, new, "immutable", "", bool) is not True:
        out.append(forbidden_field("immutable", IMMUTABLE))
    for name in fields:
        if (read_map([], new, name, "") or None) != (read_map([], old, name, "") or None):
            out.append(forbidden_field(name, IMMUTABLE))
    return out


def validate_secret_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old)
    new_type, old_type = read_str(errs, new, "type", ""), read_str([], old, "type", "")
    if new_type != old_type:
        errs.append(invalid_value("type", new_type, "field is immutable"))
    errs += _immutable_once_set(new, old, ("data",))
    return errs + validate_secret(new, namespaced)


# ---- ConfigMap -----------------------------------------------------------------------------------


def validate_config_map(obj: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta(obj, namespaced=True, name_fn=name_is_dns_subdomain)
    data = {key: value for key, value in read_map(errs, obj, "data", "").items() if isinstance(value, str)}
    binary = _data(errs, obj, "binaryData")
    for key in sorted(data):
        errs += each_invalid(index("data", key), key, is_config_map_key(key))
        if key in binary:
            errs.append(invalid_value(index("data", key), key, "duplicate of key present in binaryData"))
    errs += _config_keys(list(binary), "binaryData")
    if sum(nbytes(value) for value in data.values()) + sum(len(value) for value in binary.values()) > MAX_SECRET_SIZE:
        errs.append(too_long("", "", MAX_SECRET_SIZE))  # the whole object, as upstream's empty path says
    return errs


def validate_config_map_update(new: Any, old: Any, namespaced: bool) -> Errs:
    errs = validate_object_meta_update(new, old)
    errs += _immutable_once_set(new, old, ("data", "binaryData"))
    return errs + validate_config_map(new, namespaced)


# ---- ServiceAccount ------------------------------------------------------------------------------


def validate_service_account(obj: Any, namespaced: bool) -> Errs:
    return validate_object_meta(obj, namespaced=True, name_fn=name_is_dns_subdomain)


def validate_service_account_update(new: Any, old: Any, namespaced: bool) -> Errs:
    return validate_object_meta_update(new, old) + validate_service_account(new, namespaced)
