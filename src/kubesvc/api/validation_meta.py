"""The building blocks of API validation: string formats, IP parsing, typed JSON reads, ObjectMeta.

Kubernetes validates in two layers, and this module is the lower one:

* **Format checks** return a list of human-readable problems for one value, never a field
  error. They are copied from apimachinery ``pkg/util/validation/validation.go`` (1.32, the
  version kubectl 1.32 talks to): ``IsDNS1123Label``, ``IsDNS1123Subdomain``,
  ``IsDNS1035Label``, ``IsQualifiedName``, ``IsValidLabelValue``, ``IsValidPortNum``,
  ``IsValidPortName``, ``IsRelaxedEnvVarName``, ``IsHTTPHeaderName``, ``IsConfigMapKey``, and
  ``pkg/api/validation/path/name.go`` (path-segment names). Their texts are kept byte for
  byte, quirks included: ``RegexError`` joins examples as ``'a',  or 'b'`` (two spaces), and
  ``MaxLenError`` says "characters" although it counts bytes.
* **Field errors** (``FieldError``) put a path and the bad value around those texts. The
  ObjectMeta rules every kind shares live here too: apimachinery
  ``pkg/api/validation/objectmeta.go`` (name/generateName, namespace, generation, labels,
  annotations, ownerReferences, finalizers, managedFields) plus the core-group extra
  finalizer-name rule from ``pkg/apis/core/validation/validation.go`` (``ValidateObjectMeta``).

Objects arrive as decoded JSON, so unlike Go nothing guarantees a field has the right type.
``read_*`` helpers return the typed value or a neutral default and record a
``FieldValueTypeInvalid`` error ("Invalid value: ...: must be of type integer"), so the
validators above them never raise on garbage.

IP addresses follow ``k8s.io/utils/net`` ``ParseIPSloppy``/``ParseCIDRSloppy`` (Go's pre-1.17
parser: IPv4 octets may carry leading zeros, zones are rejected) and Go's view that an
IPv4-mapped IPv6 address (``::ffff:1.2.3.4``) *is* IPv4.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable, Iterator

from kubesvc.api.errors import FieldError, forbidden_field, invalid_value, required, too_long
from kubesvc.util import golang
from kubesvc.util.ipnet import IPAddr, parse_cidr_sloppy, parse_ip_sloppy

Errs = list[FieldError]
NameFn = Callable[[str, bool], list[str]]

# field.Invalid(path, nil, ...) renders the bad value as the *string* "null" upstream
# (field.Error.ErrorBody replaces nil and nil pointers with "null" before %q).
GO_NIL = "null"

# ---- field paths (k8s.io/apimachinery/pkg/util/validation/field/path.go) -----------------------


def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def index(path: str, i: int | str) -> str:
    """``Index(i)`` and ``Key(k)`` render alike: ``path[i]``, keys unquoted."""
    return f"{path}[{i}]"


# ---- typed reads from decoded JSON ---------------------------------------------------------------

_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "integer", bool: "boolean"}


def type_invalid(path: str, value: Any, kind: type) -> FieldError:
    return FieldError("FieldValueTypeInvalid", path, f"must be of type {_JSON_TYPE_NAMES[kind]}", value)


def has_type(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def read(errs: Errs, obj: Any, name: str, path: str, kind: type, default: Any = None) -> Any:
    """``obj[name]`` if it has JSON type ``kind``; absent and null give ``default`` (Go's zero
    value or nil pointer); a wrong type is recorded and also gives ``default``."""
    value = obj.get(name) if isinstance(obj, dict) else None
    if value is None:
        return default
    if value.__class__ is kind or has_type(value, kind):  # the exact type first: most reads (bool is not int)
        return value
    errs.append(type_invalid(child(path, name), value, kind))
    return default


def read_str(errs: Errs, obj: Any, name: str, path: str) -> str:
    return read(errs, obj, name, path, str, "")


def read_int(errs: Errs, obj: Any, name: str, path: str, default: int | None = None) -> int | None:
    return read(errs, obj, name, path, int, default)


def read_map(errs: Errs, obj: Any, name: str, path: str) -> dict:
    return read(errs, obj, name, path, dict, {})


def read_list(errs: Errs, obj: Any, name: str, path: str) -> list:
    return read(errs, obj, name, path, list, [])


def elements(errs: Errs, items: list, path: str, kind: type) -> Iterator[tuple[int, Any]]:
    """(index, item) for the items of type ``kind``, keeping their original indices."""
    for i, item in enumerate(items):
        if has_type(item, kind):
            yield i, item
        else:
            errs.append(type_invalid(index(path, i), item, kind))


def read_str_list(errs: Errs, obj: Any, name: str, path: str) -> list[str]:
    """A list of strings, all or nothing: positional rules (clusterIPs[0]) would lie if a bad
    element were dropped, so one bad element makes the whole list read as absent."""
    items = read_list(errs, obj, name, path)
    before = len(errs)
    good = [item for _, item in elements(errs, items, child(path, name), str)]
    return good if len(errs) == before else []


def read_str_map(errs: Errs, obj: Any, name: str, path: str) -> dict[str, str]:
    here = child(path, name)
    out: dict[str, str] = {}
    for k, v in read_map(errs, obj, name, path).items():
        if isinstance(v, str):
            out[k] = v
        elif v is not None:
            errs.append(type_invalid(index(here, k), v, str))
    return out


def nbytes(value: str) -> int:
    """Go's len(): UTF-8 bytes. surrogatepass keeps lone surrogates from JSON from raising."""
    return len(value.encode("utf-8", "surrogatepass"))


# ---- format checks (apimachinery pkg/util/validation/validation.go, 1.32) ----------------------


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def empty_error() -> str:
    return "must be non-empty"


def inclusive_range_error(lo: int, hi: int) -> str:
    return f"must be between {lo} and {hi}, inclusive"


_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character"
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_FMT = "(" + _QNAME_FMT + ")?"
_LABEL_VALUE_MSG = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_HTTP_HEADER_FMT = "[-A-Za-z0-9]+"
_CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"

_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE = re.compile(_DNS1035_LABEL_FMT)
_QNAME_RE = re.compile(_QNAME_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_HTTP_HEADER_RE = re.compile(_HTTP_HEADER_FMT)
_CONFIG_MAP_KEY_RE = re.compile(_CONFIG_MAP_KEY_FMT)
_PORT_NAME_CHARSET_RE = re.compile("[-a-z0-9]+")
_PORT_NAME_LETTER_RE = re.compile("[a-z]")


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if nbytes(value) > 63:
        errs.append(max_len_error(63))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if nbytes(value) > 253:
        errs.append(max_len_error(253))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if nbytes(value) > 63:
        errs.append(max_len_error(63))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys (lower-cased first), finalizers, appProtocol, ..."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + empty_error())
        else:
            errs.extend("prefix part " + msg for msg in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part " + empty_error())
    elif nbytes(name) > 63:
        errs.append("name part " + max_len_error(63))
    if not _QNAME_RE.fullmatch(name):
        errs.append("name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if nbytes(value) > 63:
        errs.append(max_len_error(63))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_valid_port_num(port: int) -> list[str]:
    return [] if 1 <= port <= 65535 else [inclusive_range_error(1, 65535)]


def is_valid_port_name(port: str) -> list[str]:
    """IANA_SVC_NAME (RFC 6335), lower case only."""
    errs = []
    if nbytes(port) > 15:
        errs.append(max_len_error(15))
    if not _PORT_NAME_CHARSET_RE.fullmatch(port):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_LETTER_RE.search(port):
        errs.append("must contain at least one letter (a-z)")
    if "--" in port:
        errs.append("must not contain consecutive hyphens")
    if port and (port[0] == "-" or port[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def is_relaxed_env_var_name(value: str) -> list[str]:
    """RelaxedEnvironmentVariableValidation is beta and on in 1.32."""
    errs = []
    if not value:
        errs.append("environment variable name " + empty_error())
    if any(not (" " <= ch <= "~") or ch == "=" for ch in value):
        errs.append("a valid environment variable name must consist only of printable ASCII characters other than '='")
    return errs


def is_http_header_name(value: str) -> list[str]:
    if _HTTP_HEADER_RE.fullmatch(value):
        return []
    return [regex_error("a valid HTTP header must consist of alphanumeric characters or '-'", _HTTP_HEADER_FMT, "X-Header-Name")]


def is_config_map_key(value: str) -> list[str]:
    errs = []
    if nbytes(value) > 253:
        errs.append(max_len_error(253))
    if not _CONFIG_MAP_KEY_RE.fullmatch(value):
        errs.append(regex_error("a valid config key must consist of alphanumeric characters, '-', '_' or '.'", _CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if value == ".":
        errs.append("must not be '.'")
    elif value == "..":
        errs.append("must not be '..'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def is_valid_path_segment_name(name: str) -> list[str]:
    """apimachinery pkg/api/validation/path/name.go."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


# ---- name functions (apimachinery pkg/api/validation/generic.go) -------------------------------


def _mask_trailing_dash(name: str) -> str:
    """generateName prefixes may end in '-': replace the last two bytes by 'a' as upstream does."""
    return name[: len(name) - 2] + "a" if name.endswith("-") else name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """ValidatePathSegmentName: what the generic registry checks for every kind."""
    if prefix:
        return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]
    return is_valid_path_segment_name(name)


# ---- IP addresses (k8s.io/utils/net sloppy parsing, Go net.IP semantics) ------------------------

# netutils.ParseIPSloppy and the family helpers live in util/ipnet; these are the validators on top


def is_valid_ip(path: str, value: str) -> Errs:
    if parse_ip_sloppy(value) is None:
        return [invalid_value(path, value, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]
    return []


def is_valid_ipv4_address(path: str, value: str) -> Errs:
    ip = parse_ip_sloppy(value)
    if ip is None or ip.version != 4:
        return [invalid_value(path, value, "must be a valid IPv4 address")]
    return []


def is_valid_ipv6_address(path: str, value: str) -> Errs:
    ip = parse_ip_sloppy(value)
    if ip is None or ip.version != 6:
        return [invalid_value(path, value, "must be a valid IPv6 address")]
    return []


def is_valid_cidr(path: str, value: str) -> Errs:
    if parse_cidr_sloppy(value) is None:
        return [invalid_value(path, value, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]
    return []


def _is_link_local_multicast(ip: IPAddr) -> bool:
    if ip.version == 4:
        return ip in ipaddress.IPv4Network("224.0.0.0/24")
    raw = ip.packed
    return raw[0] == 0xFF and raw[1] & 0x0F == 0x02


def validate_non_special_ip(value: str, path: str) -> Errs:
    """ValidateEndpointIP (1.32; later ValidateNonSpecialIP): Endpoints, EndpointSlices and
    externalIPs may not point at unspecified, loopback or link-local addresses."""
    ip = parse_ip_sloppy(value)
    if ip is None:
        return [invalid_value(path, value, "must be a valid IP address")]
    errs = []
    if ip.is_unspecified:
        errs.append(invalid_value(path, value, f"may not be unspecified ({value})"))
    if ip.is_loopback:
        errs.append(invalid_value(path, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
    if ip.is_link_local:
        errs.append(invalid_value(path, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
    if _is_link_local_multicast(ip):
        errs.append(invalid_value(path, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
    return errs


def is_fully_qualified_domain_name(path: str, name: str) -> Errs:
    """IsFullyQualifiedDomainName: EndpointSlice FQDN addresses."""
    if not name:
        return [required(path)]
    name = name.removesuffix(".")
    if msgs := is_dns1123_subdomain(name):
        return [invalid_value(path, name, ",".join(msgs))]
    labels = name.split(".")
    if len(labels) < 2:
        return [invalid_value(path, name, "should be a domain with at least two segments separated by dots")]
    for label in labels:
        if msgs := is_dns1123_label(label):
            return [invalid_value(path, label, ",".join(msgs))]
    return []


# ---- field-error wrappers ------------------------------------------------------------------------


def each_invalid(path: str, value: Any, msgs: list[str]) -> Errs:
    """One Invalid error per message, the usual ``for _, msg := range IsX(v)`` loop."""
    return [invalid_value(path, value, msg) for msg in msgs]


def validate_dns1123_label(value: str, path: str) -> Errs:
    return each_invalid(path, value, is_dns1123_label(value))


def validate_dns1123_subdomain(value: str, path: str) -> Errs:
    return each_invalid(path, value, is_dns1123_subdomain(value))


def validate_qualified_name(value: str, path: str) -> Errs:
    return each_invalid(path, value, is_qualified_name(value))


def validate_nonnegative(value: int, path: str) -> Errs:
    return [invalid_value(path, value, "must be greater than or equal to 0")] if value < 0 else []


def validate_labels(labels: dict[str, str], path: str) -> Errs:
    """metav1 validation.ValidateLabels: key and value errors both sit on the map's path."""
    errs: Errs = []
    for k, v in labels.items():
        errs += validate_qualified_name(k, path)
        errs += each_invalid(path, v, is_valid_label_value(v))
    return errs


# ---- ObjectMeta (apimachinery pkg/api/validation/objectmeta.go, 1.32) --------------------------

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
# metav1.FinalizerOrphanDependents / FinalizerDeleteDependents: the garbage collector's finalizers,
# set by the apiserver from DeleteOptions.propagationPolicy
FINALIZER_ORPHAN = "orphan"
FINALIZER_FOREGROUND = "foregroundDeletion"
_STANDARD_FINALIZERS = {"kubernetes", FINALIZER_ORPHAN, FINALIZER_FOREGROUND}
_FIELD_MANAGER_MAX = 128
_SUBRESOURCE_MAX = 256


def validate_annotations(annotations: dict[str, str], path: str) -> Errs:
    errs: Errs = []
    for k in annotations:
        errs += each_invalid(path, k, is_qualified_name(k.lower()))
    if sum(nbytes(k) + nbytes(v) for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(too_long(path, "", TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def parse_group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: (group, version); None when it does not parse."""
    if api_version in ("", "/"):
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def _validate_owner_reference(errs: Errs, ref: dict, path: str, item: str) -> None:
    api_version = read_str(errs, ref, "apiVersion", item)
    kind = read_str(errs, ref, "kind", item)
    name = read_str(errs, ref, "name", item)
    uid = read_str(errs, ref, "uid", item)
    group, version = parse_group_version(api_version) or ("", "")
    if not version:
        errs.append(invalid_value(child(path, "apiVersion"), api_version, "version must not be empty"))
    if not kind:
        errs.append(invalid_value(child(path, "kind"), kind, "kind must not be empty"))
    if not name:
        errs.append(invalid_value(child(path, "name"), name, "name must not be empty"))
    if not uid:
        errs.append(invalid_value(child(path, "uid"), uid, "uid must not be empty"))
    if (group, version, kind) == ("", "v1", "Event"):
        errs.append(invalid_value(path, ref, "/v1, Kind=Event is disallowed from being an owner"))


def validate_owner_references(errs: Errs, refs: list, path: str) -> None:
    """Errors sit on ``ownerReferences.<field>`` without an index, as upstream."""
    first_controller = ""
    for i, ref in elements(errs, refs, path, dict):
        _validate_owner_reference(errs, ref, path, index(path, i))
        if read(errs, ref, "controller", index(path, i), bool) is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if first_controller:
                errs.append(invalid_value(path, refs, f'Only one reference can have Controller set to true. Found "true" in references for {first_controller} and {current}'))
            else:
                first_controller = current


def validate_finalizers(finalizers: list[str], path: str) -> Errs:
    errs: Errs = []
    for finalizer in finalizers:
        errs += each_invalid(path, finalizer, is_qualified_name(finalizer))
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(invalid_value(path, finalizers, "finalizer orphan and foregroundDeletion cannot be both set"))
    return errs


def validate_kube_finalizer_name(value: str, path: str) -> Errs:
    """Core-group kinds: a finalizer without '/' must be one of the standard names."""
    if "/" not in value and value not in _STANDARD_FINALIZERS:
        return [invalid_value(path, value, "name is neither a standard finalizer name nor is it fully qualified")]
    return []


def _validate_field_manager(manager: str, path: str) -> Errs:
    errs: Errs = []
    if nbytes(manager) > _FIELD_MANAGER_MAX:
        errs.append(too_long(path, "", _FIELD_MANAGER_MAX))
    position = 0
    for ch in manager:
        if not ch.isprintable():
            errs.append(invalid_value(path, manager, f"invalid character U+{ord(ch):04X} (at position {position})"))
        position += nbytes(ch)
    return errs


def validate_managed_fields(errs: Errs, entries: list, path: str) -> None:
    for i, entry in elements(errs, entries, path, dict):
        here = index(path, i)
        operation = read_str(errs, entry, "operation", here)
        if operation not in ("Apply", "Update"):
            errs.append(invalid_value(child(here, "operation"), operation, "must be `Apply` or `Update`"))
        fields_type = read_str(errs, entry, "fieldsType", here)
        if fields_type and fields_type != "FieldsV1":
            errs.append(invalid_value(child(here, "fieldsType"), fields_type, "must be `FieldsV1`"))
        errs += _validate_field_manager(read_str(errs, entry, "manager", here), child(here, "manager"))
        if nbytes(read_str(errs, entry, "subresource", here)) > _SUBRESOURCE_MAX:
            errs.append(too_long(child(here, "subresource"), "", _SUBRESOURCE_MAX))


class Meta:
    """The ObjectMeta fields validation reads, each type-checked once."""

    def __init__(self, errs: Errs, obj: Any):
        meta = read_map(errs, obj, "metadata", "")
        self.name = read_str(errs, meta, "name", "metadata")
        self.generate_name = read_str(errs, meta, "generateName", "metadata")
        self.namespace = read_str(errs, meta, "namespace", "metadata")
        self.uid = read_str(errs, meta, "uid", "metadata")
        self.resource_version = read_str(errs, meta, "resourceVersion", "metadata")
        self.generation = read_int(errs, meta, "generation", "metadata", 0)
        self.creation_timestamp = read_str(errs, meta, "creationTimestamp", "metadata")
        self.deletion_timestamp = read(errs, meta, "deletionTimestamp", "metadata", str)
        self.deletion_grace_period_seconds = read_int(errs, meta, "deletionGracePeriodSeconds", "metadata")
        self.labels = read_str_map(errs, meta, "labels", "metadata")
        self.annotations = read_str_map(errs, meta, "annotations", "metadata")
        self.owner_references = read_list(errs, meta, "ownerReferences", "metadata")
        self.finalizers = read_str_list(errs, meta, "finalizers", "metadata")
        self.managed_fields = read_list(errs, meta, "managedFields", "metadata")


def validate_object_meta(obj: Any, *, namespaced: bool, name_fn: NameFn, core: bool = True) -> Errs:
    """ValidateObjectMeta on create. ``core`` adds the core group's finalizer-name rule."""
    errs: Errs = []
    meta = Meta(errs, obj)
    if meta.generate_name:
        errs += each_invalid("metadata.generateName", meta.generate_name, name_fn(meta.generate_name, True))
    if not meta.name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        errs += each_invalid("metadata.name", meta.name, name_fn(meta.name, False))
    if namespaced:
        if not meta.namespace:
            errs.append(required("metadata.namespace"))
        else:
            errs += each_invalid("metadata.namespace", meta.namespace, name_is_dns_label(meta.namespace, False))
    elif meta.namespace:
        errs.append(forbidden_field("metadata.namespace", "not allowed on this type"))
    errs += validate_nonnegative(meta.generation, "metadata.generation")
    errs += validate_labels(meta.labels, "metadata.labels")
    errs += validate_annotations(meta.annotations, "metadata.annotations")
    validate_owner_references(errs, meta.owner_references, "metadata.ownerReferences")
    errs += validate_finalizers(meta.finalizers, "metadata.finalizers")
    validate_managed_fields(errs, meta.managed_fields, "metadata.managedFields")
    if core:
        errs += _kube_finalizer_errors(meta.finalizers)
    return errs


def _kube_finalizer_errors(finalizers: list[str]) -> Errs:
    return [e for i, f in enumerate(finalizers) for e in validate_kube_finalizer_name(f, index("metadata.finalizers", i))]


def _immutable(new: Any, old: Any, path: str) -> Errs:
    if new == old:
        return []
    return [invalid_value(path, GO_NIL if new is None else new, "field is immutable")]


def validate_object_meta_update(new: Any, old: Any, *, core: bool = True) -> Errs:
    """ValidateObjectMetaUpdate: identity and timestamps are immutable, resourceVersion is
    required, generation never goes down, and a deleting object gains no finalizers."""
    errs: Errs = []
    new_meta, old_meta = Meta(errs, new), Meta([], old)
    if old_meta.deletion_timestamp is not None:
        extra = sorted(set(new_meta.finalizers) - set(old_meta.finalizers))
        if extra:
            errs.append(forbidden_field("metadata.finalizers", "no new finalizers can be added if the object is being deleted, "
                                        f"found new finalizers {golang.go_syntax_strings(extra)}"))
    if not new_meta.resource_version:
        errs.append(invalid_value("metadata.resourceVersion", "", "must be specified for an update"))
    if new_meta.generation < old_meta.generation:
        errs.append(invalid_value("metadata.generation", new_meta.generation, "must not be decremented"))
    errs += _immutable(new_meta.name, old_meta.name, "metadata.name")
    errs += _immutable(new_meta.namespace, old_meta.namespace, "metadata.namespace")
    errs += _immutable(new_meta.uid, old_meta.uid, "metadata.uid")
    errs += _immutable(new_meta.creation_timestamp, old_meta.creation_timestamp, "metadata.creationTimestamp")
    errs += _immutable(new_meta.deletion_timestamp, old_meta.deletion_timestamp, "metadata.deletionTimestamp")
    errs += _immutable(new_meta.deletion_grace_period_seconds, old_meta.deletion_grace_period_seconds, "metadata.deletionGracePeriodSeconds")
    errs += validate_labels(new_meta.labels, "metadata.labels")
    errs += validate_annotations(new_meta.annotations, "metadata.annotations")
    validate_owner_references(errs, new_meta.owner_references, "metadata.ownerReferences")
    validate_managed_fields(errs, new_meta.managed_fields, "metadata.managedFields")
    if core:
        errs += _kube_finalizer_errors(new_meta.finalizers)
    return errs

