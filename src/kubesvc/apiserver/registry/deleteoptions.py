"""DeleteOptions as every delete checks them (upstream ``ValidateDeleteOptions``, called by
the DELETE handler and by ``rest.BeforeDelete``, so also for the delete behind an eviction),
plus the int64 bounds their decoding keeps. A pure function: the DELETE handler and the
eviction subresource (``registry/eviction.py``) call it on their options."""

from __future__ import annotations

from kubesvc.api import errors
from kubesvc.apiserver import codec
from kubesvc.util.golang import quote as go_quote


def validate_delete_options(options: dict) -> dict:
    """Upstream ``ValidateDeleteOptions`` (and the int64 bounds its decoding keeps), for a
    DELETE's options and an Eviction's ``deleteOptions`` alike: 422 for both orphanDependents
    and propagationPolicy, an unknown propagationPolicy, a dryRun other than ``All``. The
    options, the grace period capped to what a Go ``time.Duration`` holds."""
    policy = options.get("propagationPolicy")
    orphan = options.get("orphanDependents")
    if orphan is not None and not isinstance(orphan, bool):
        raise errors.bad_request("DeleteOptions.orphanDependents must be a boolean")
    # upstream ValidateDeleteOptions
    if orphan is not None and policy is not None:
        raise errors.invalid("DeleteOptions", "", [errors.invalid_value("propagationPolicy", policy, "orphanDependents and deletionPropagation cannot be both set")], "meta.k8s.io")
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise errors.invalid("DeleteOptions", "", [errors.not_supported("propagationPolicy", policy, ["Foreground", "Background", "Orphan", "nil"])], "meta.k8s.io")
    grace_value = options.get("gracePeriodSeconds")
    if grace_value is not None and (not isinstance(grace_value, int) or isinstance(grace_value, bool)):
        raise errors.bad_request("DeleteOptions.gracePeriodSeconds must be an integer")
    if grace_value is not None:
        if not -(2**63) <= grace_value < 2**63:
            raise errors.bad_request(f"json: cannot unmarshal number {grace_value} into Go struct field DeleteOptions.gracePeriodSeconds of type int64")
        # upstream multiplies it into a time.Duration (about 292 years at most)
        options["gracePeriodSeconds"] = min(grace_value, codec.MAX_GO_DURATION_SECONDS)
    if options.get("preconditions") is not None and not isinstance(options["preconditions"], dict):
        raise errors.bad_request("DeleteOptions.preconditions must be an object")
    dry_run = options.get("dryRun")
    if dry_run is not None:
        if not isinstance(dry_run, list) or not all(isinstance(value, str) for value in dry_run):
            raise errors.bad_request("DeleteOptions.dryRun must be a list of strings")
        if any(value != "All" for value in dry_run):  # ValidateDryRun; a value not understood is never a real delete
            shown = errors.GoSyntax("[]string{" + ", ".join(go_quote(value) for value in dry_run) + "}")
            raise errors.invalid("DeleteOptions", "", [errors.not_supported("dryRun", shown, ["All"])], "meta.k8s.io")
    return options
