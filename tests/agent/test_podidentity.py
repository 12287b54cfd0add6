"""Hostname and user decisions (kubelet's GeneratePodHostNameAndDomain/truncatePodHostnameIfNeeded,
DetermineEffectiveSecurityContext, verifyRunAsNonRoot), expected values written by hand."""

from __future__ import annotations

import pytest

from kubesvc.agent.podidentity import IdentityError, RunAs, pod_hostname, run_as


def pod(name="web-0", **spec):
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u1"}, "spec": spec}


@pytest.mark.parametrize("the_pod,expected", [
    (pod(), "web-0"),
    (pod(hostname="db", subdomain="cluster"), "db"),
    (pod("a" * 70), "a" * 63),
    (pod(hostname="b" * 62 + "-.c"), "b" * 62),  # cut at 63, then trailing '-' and '.' go
], ids=["pod name", "spec.hostname", "truncated", "no trailing dash or dot"])
def test_pod_hostname(the_pod, expected):
    assert pod_hostname(the_pod) == expected


def test_hostname_that_truncates_to_nothing():
    with pytest.raises(IdentityError) as err:
        pod_hostname(pod(hostname="-" * 64))
    assert str(err.value) == f'hostname for pod "web-0" was invalid: "{"-" * 64}"'


@pytest.mark.parametrize("pod_sc,container_sc,expected", [
    ({}, {}, RunAs(None, None, ())),
    ({"runAsUser": 1000, "runAsGroup": 3000}, {}, RunAs(1000, 3000, ())),
    ({"runAsUser": 1000, "runAsGroup": 3000}, {"runAsUser": 2000}, RunAs(2000, 3000, ())),
    ({"runAsUser": 1000}, {"runAsGroup": 0}, RunAs(1000, 0, ())),
    ({"supplementalGroups": [4000, 5000], "fsGroup": 2000}, {"runAsUser": 7}, RunAs(7, None, (4000, 5000, 2000))),
    ({"runAsNonRoot": True, "runAsUser": 1000}, {}, RunAs(1000, None, ())),
], ids=["none", "pod level", "container wins", "container's group 0", "supplemental and fsGroup", "non-root satisfied"])
def test_run_as(pod_sc, container_sc, expected):
    assert run_as(pod(securityContext=pod_sc), {"name": "c", "securityContext": container_sc}) == expected


@pytest.mark.parametrize("pod_sc,container_sc,message", [
    ({"runAsNonRoot": True}, {"runAsUser": 0},
     'container\'s runAsUser breaks non-root policy (pod: "web-0_ns(u1)", container: c)'),
    ({}, {"runAsNonRoot": True}, 'container has runAsNonRoot and image will run as root (pod: "web-0_ns(u1)", container: c)'),
], ids=["uid 0", "image user"])
def test_run_as_non_root(pod_sc, container_sc, message):
    with pytest.raises(IdentityError) as err:
        run_as(pod(securityContext=pod_sc), {"name": "c", "securityContext": container_sc})
    assert str(err.value) == message


# ---- capabilities (containerd's WithCapabilities) ----------------------------------------------

DEFAULT = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP",
           "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT")
KNOWN = DEFAULT + ("NET_ADMIN", "SYS_ADMIN", "SYS_TIME")


@pytest.mark.parametrize("sc,expected", [
    ({}, DEFAULT),
    ({"capabilities": {"add": ["NET_ADMIN"], "drop": ["NET_RAW", "MKNOD"]}},
     ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_ADMIN", "NET_BIND_SERVICE", "SETFCAP", "SETGID",
      "SETPCAP", "SETUID", "SYS_CHROOT")),
    ({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}, ("NET_BIND_SERVICE",)),
    ({"capabilities": {"add": ["ALL"], "drop": ["SYS_ADMIN"]}}, tuple(sorted(set(KNOWN) - {"SYS_ADMIN"}))),
    ({"capabilities": {"add": ["CAP_SYS_TIME"]}}, tuple(sorted(DEFAULT + ("SYS_TIME",)))),
    ({"privileged": True, "capabilities": {"drop": ["ALL"]}}, None),
], ids=["default", "add and drop", "drop all, add one", "add all, drop one", "CAP_ prefix", "privileged"])
def test_capabilities(sc, expected):
    from kubesvc.agent.podidentity import capabilities

    assert capabilities({"name": "c", "securityContext": sc}, KNOWN) == expected


def test_unknown_capability():
    from kubesvc.agent.podidentity import capabilities

    with pytest.raises(IdentityError) as err:
        capabilities({"securityContext": {"capabilities": {"add": ["FLY"]}}}, KNOWN)
    assert str(err.value) == "failed to generate container spec: unknown capability 'FLY'"
