"""A Job's ``spec.managedBy`` validated as upstream (``pkg/apis/batch/validation``:
``IsDomainPrefixedPath``, at most 63 characters, immutable). Expected lines written by hand."""

from __future__ import annotations

import pytest

from kubesvc.api.validation import validate_update
from tests.api.test_job_policies_rules import job
from tests.api.test_workloads_rules import defaulted, errors

REGEX = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"


@pytest.mark.parametrize("managed_by", ["example.com/foo", "kubernetes.io/job-controller", "kueue.x-k8s.io/multikueue"])
def test_valid(managed_by):
    assert not [e for e in errors("Job", job(managedBy=managed_by)) if "managedBy" in e]


def test_unset_is_valid():
    assert not [e for e in errors("Job", job()) if "managedBy" in e]


@pytest.mark.parametrize("managed_by, message", [
    ("", "spec.managedBy: Required value"),
    ("my-controller", 'spec.managedBy: Invalid value: "my-controller": must be a domain-prefixed path (such as "acme.io/foo")'),
    ("example.com/", 'spec.managedBy: Invalid value: "example.com/": must be a domain-prefixed path (such as "acme.io/foo")'),
    ("Example.com/foo", 'spec.managedBy: Invalid value: "Example.com": a lowercase RFC 1123 subdomain must consist of lower case '
                        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
                        "'example.com', regex used for validation is "
                        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    ("example.com/a b", f"spec.managedBy: Invalid value: \"a b\": Invalid path (regex used for validation is '{REGEX}')"),
    ("example.com/" + "x" * 60, "spec.managedBy: Too long: may not be more than 63 bytes"),
], ids=["empty", "no-domain", "no-path", "bad-domain", "bad-path", "too-long"])
def test_invalid(managed_by, message):
    found = errors("Job", job(managedBy=managed_by))
    assert message in found, found


@pytest.mark.parametrize("old, new", [(None, "example.com/foo"), ("example.com/foo", "example.com/bar"), ("example.com/foo", None)],
                         ids=["set", "changed", "unset"])
def test_immutable(old, new):
    def with_managed_by(value):
        return job(**({"managedBy": value} if value is not None else {}))

    before, after = defaulted("Job", with_managed_by(old), resourceVersion="1"), defaulted("Job", with_managed_by(new), resourceVersion="1")
    found = [str(e) for e in validate_update("Job", after, before, namespaced=True)]
    shown = f'"{new}"' if new is not None else '"null"'  # field.Error prints a nil pointer as the string "null", quoted
    assert f"spec.managedBy: Invalid value: {shown}: field is immutable" in found, found
