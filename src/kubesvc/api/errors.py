"""Kubernetes API errors as ``Status`` objects (k8s.io/apimachinery/pkg/api/errors).

Every error the apiserver returns is a ``StatusError`` carrying the exact ``Status`` body a
real kube-apiserver sends; kubectl prints ``Error from server (<reason>): <message>`` and,
for 422 Invalid, one bullet per ``details.causes`` entry. Validation code produces
``FieldError`` values (k8s.io/apimachinery/pkg/util/validation/field) and ``invalid()``
turns them into the 422.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from kubesvc.util import golang

_MISSING = object()


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = details
    body["code"] = code
    return body


class StatusError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)


def _details(name: str, group: str, kind: str, **extra: Any) -> dict:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details.update(extra)
    return details


def qualified(resource: str, group: str) -> str:
    """``services`` or ``endpointslices.discovery.k8s.io``, as upstream's GroupResource.String()."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> StatusError:
    return StatusError(404, "NotFound", f'{qualified(resource, group)} "{name}" not found', _details(name, group, resource))


def already_exists(resource: str, name: str, group: str = "") -> StatusError:
    return StatusError(409, "AlreadyExists", f'{qualified(resource, group)} "{name}" already exists', _details(name, group, resource))


def conflict(resource: str, name: str, group: str = "", why: str = "the object has been modified; please apply your changes to the latest version and try again") -> StatusError:
    return StatusError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}', _details(name, group, resource))


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(message: str) -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def not_acceptable(message: str) -> StatusError:
    return StatusError(406, "NotAcceptable", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)


def too_large_resource_version(requested: int, current: int, retry_after_seconds: int = 1) -> StatusError:
    """k8s.io/apiserver/pkg/storage NewTooLargeResourceVersionError: a read at a resourceVersion
    the server has not reached (a NewTimeoutError with the ResourceVersionTooLarge cause, which
    client-go's reflector recognises and retries)."""
    return StatusError(504, "Timeout", f"Timeout: Too large resource version: {requested}, current: {current}",
                       {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": retry_after_seconds})


def too_large(message: str = "the request is too large") -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", message)


def unsupported_media_type(content_type: str) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type!r})")


def internal(message: str) -> StatusError:
    """NewInternalError: the cause's text is also the one entry of ``details.causes``."""
    return StatusError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def forbidden(resource: str, name: str, group: str, why: str) -> StatusError:
    return StatusError(403, "Forbidden", f'{qualified(resource, group)} "{name}" is forbidden: {why}', _details(name, group, resource))


# ---- field errors (k8s.io/apimachinery/pkg/util/validation/field) ----------------------------


class GoSyntax(str):
    """A bad value already spelled as Go's ``%#v`` prints it (``rbac.RoleRef{Kind:"Role", ...}``,
    ``[]string{"/healthz"}``), for messages clients compare byte for byte: shown verbatim."""


def format_value(value: Any) -> str:
    """How field.Error renders a bad value: strings as Go's ``%q`` (``strconv.Quote``: ``"²"``
    stays ``"²"``, a BEL is ``"\\a"``; JSON's escapes differ), numbers and bools bare, lists and
    maps in Go %#v-ish JSON form (close enough for humans; causes carry the same text)."""
    if isinstance(value, GoSyntax):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return golang.quote(value)
    if value is None:
        return "null"
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class FieldError:
    type: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueDuplicate, FieldValueForbidden, FieldValueTooLong, FieldValueTooMany
    field: str
    detail: str = ""
    value: Any = _MISSING

    _TYPE_TEXT = {
        "FieldValueInvalid": "Invalid value",
        "FieldValueRequired": "Required value",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueDuplicate": "Duplicate value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueTooLong": "Too long",
        "FieldValueTooMany": "Too many",
        "InternalError": "Internal error",
        "FieldValueTypeInvalid": "Invalid value",
    }

    def message(self) -> str:
        """The cause message: ``Invalid value: "x": detail`` (no field prefix)."""
        text = self._TYPE_TEXT.get(self.type, self.type)
        if self.value is not _MISSING and self.type not in ("FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "FieldValueTooMany", "InternalError"):
            text += f": {format_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.message()}"


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, detail, value)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, detail)


def not_supported(field: str, value: Any, valid: Iterable[str]) -> FieldError:
    quoted = ", ".join(json.dumps(v) for v in valid)
    return FieldError("FieldValueNotSupported", field, f"supported values: {quoted}", value)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, "", value)


def forbidden_field(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, detail)


def too_long(field: str, value: Any, max_length: int) -> FieldError:
    return FieldError("FieldValueTooLong", field, f"may not be more than {max_length} bytes", value)


def too_many(field: str, actual: int, max_items: int) -> FieldError:
    return FieldError("FieldValueTooMany", field, f"must have at most {max_items} items")


def invalid(kind: str, name: str, errors: list[FieldError], group: str = "") -> StatusError:
    """422 Invalid exactly as upstream NewInvalid: one error -> ``Kind "name" is invalid: f: m``;
    several -> ``Kind "name" is invalid: [f1: m1, f2: m2]``."""
    causes = [{"reason": e.type, "message": e.message(), "field": e.field} for e in errors]
    summary = golang.aggregate(errors)  # ErrorList.ToAggregate(): repeated messages once
    qualified_kind = f"{kind}.{group}" if group else kind
    return StatusError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', _details(name, group, kind, causes=causes))
