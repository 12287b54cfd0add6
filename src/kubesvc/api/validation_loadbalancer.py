"""Validation of kubesvc.io/v1alpha1 LoadBalancerIPPool (api/kinds/loadbalancer.py).

Cilium validates its pools' blocks with CRD rules (a CIDR, or a start with an optional stop);
here, as field errors the apiserver answers with a 422: every block is exactly one of ``cidr``
or ``start`` (``stop`` only with ``start``), addresses parse, ``start`` and ``stop`` are of
one family and in order, and ``serviceSelector`` is a valid label selector.
"""

from __future__ import annotations

from typing import Any

from kubesvc.api.errors import forbidden_field, invalid_value, required
from kubesvc.api.validation_meta import (
    Errs,
    child,
    elements,
    index,
    is_valid_cidr,
    is_valid_ip,
    name_is_dns_subdomain,
    read,
    read_list,
    read_map,
    read_str,
    validate_object_meta,
    validate_object_meta_update,
)
from kubesvc.api.validation_rbac import validate_label_selector
from kubesvc.util.ipnet import parse_ip_sloppy


def validate_pool(obj: Any, namespaced: bool = False) -> Errs:
    errs = validate_object_meta(obj, namespaced=False, name_fn=name_is_dns_subdomain, core=False)
    spec = read_map(errs, obj, "spec", "")
    blocks = read_list(errs, spec, "blocks", "spec")
    if not blocks:
        errs.append(required("spec.blocks", "at least one block of addresses is required"))
    for i, block in elements(errs, blocks, "spec.blocks", dict):
        errs += _block(errs, block, index("spec.blocks", i))
    selector = read(errs, spec, "serviceSelector", "spec", dict)
    if selector is not None:
        errs += validate_label_selector(errs, selector, "spec.serviceSelector")
    read(errs, spec, "disabled", "spec", bool)
    return errs


def validate_pool_update(new: Any, old: Any, namespaced: bool = False) -> Errs:
    return validate_pool(new) + validate_object_meta_update(new, old)


def _block(errs: Errs, block: dict, path: str) -> Errs:
    cidr = read_str(errs, block, "cidr", path)
    start = read_str(errs, block, "start", path)
    stop = read_str(errs, block, "stop", path)
    if cidr:
        if start or stop:
            return [forbidden_field(child(path, "start" if start else "stop"), "may not be specified with `cidr`")]
        return is_valid_cidr(child(path, "cidr"), cidr)
    if not start:
        return [required(path, "one of `cidr` or `start` must be specified")]
    out = is_valid_ip(child(path, "start"), start)
    if stop:
        out += is_valid_ip(child(path, "stop"), stop)
    if out or not stop:
        return out
    first, last = parse_ip_sloppy(start), parse_ip_sloppy(stop)
    if first.version != last.version:
        return [invalid_value(child(path, "stop"), stop, "must be of the same IP family as `start`")]
    if last < first:
        return [invalid_value(child(path, "stop"), stop, "must not be before `start`")]
    return []
