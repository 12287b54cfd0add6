"""The serviceaccount controller and the root CA publisher: their decisions, then
``kubesvc controller-manager`` running them against a real apiserver, observed with kubectl."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest

from kubesvc.client.rest import ApiError, is_namespace_terminating
from kubesvc.controllers.rootcacert.publisher import DESCRIPTION, DESCRIPTION_ANNOTATION, needs_update, read_root_ca, updated
from kubesvc.controllers.runtime import namespace_is_active
from kubesvc.controllers.serviceaccount.controller import missing
from tests.support.apiserver import running_apiserver, start_controller_manager

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("config_map,update", [
    ({"metadata": {"annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}}, "data": {"ca.crt": CA}}, False),
    ({"metadata": {"annotations": {DESCRIPTION_ANNOTATION: "edited"}}, "data": {"ca.crt": CA}}, False),
    ({"metadata": {}, "data": {"ca.crt": CA}}, True),
    ({"metadata": {"annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}}, "data": {"ca.crt": "other"}}, True),
    ({"metadata": {"annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}}, "data": {"ca.crt": CA, "extra": "x"}}, True),
], ids=["current", "any-description-will-do", "no-description", "other-ca", "extra-key"])
def test_root_ca_needs_update(config_map, update):
    assert needs_update(config_map, CA) == update


def test_root_ca_update_keeps_other_metadata():
    current = {"metadata": {"name": "kube-root-ca.crt", "labels": {"a": "b"}, "annotations": {"x": "y"}, "resourceVersion": "7"},
               "data": {"ca.crt": "old", "extra": "x"}}
    assert updated(current, CA) == {"metadata": {"name": "kube-root-ca.crt", "labels": {"a": "b"}, "resourceVersion": "7",
                                                 "annotations": {"x": "y", DESCRIPTION_ANNOTATION: DESCRIPTION}}, "data": {"ca.crt": CA}}


def test_read_root_ca(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ValueError, match=f"error parsing root-ca-file at {bad}: data does not contain any valid RSA or ECDSA certificates"):
        read_root_ca(str(bad))


@pytest.mark.parametrize("namespace,active", [
    ({"status": {"phase": "Active"}}, True), ({"status": {"phase": "Terminating"}}, False), ({}, False), (None, False),
], ids=["active", "terminating", "no-phase", "gone"])
def test_is_active(namespace, active):
    assert namespace_is_active(namespace) == active


def test_missing_and_terminating_cause():
    assert missing(("default", "extra"), {"default"}) == ["extra"]
    refusal = ApiError(403, "Forbidden", "unable to create new content in namespace x because it is being terminated",
                       {"details": {"causes": [{"reason": "NamespaceTerminating", "message": "namespace x is being terminated"}]}})
    assert is_namespace_terminating(refusal) and not is_namespace_terminating(ApiError(403, "Forbidden", "no", {}))


def wait_for(check, timeout: float = 30, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def get_json(server, *args: str) -> dict | None:
    result = server.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def test_default_service_account_and_root_ca_in_every_namespace(tmp_path):
    with running_apiserver(tmp_path / "data") as server:
        manager = start_controller_manager(server, tmp_path / "cm.log", "--leader-elect=false", "--secure-port=0",
                                           "--controllers=serviceaccount-controller,root-ca-certificate-publisher-controller")
        try:
            cluster_ca = server.ca_file.read_text()
            for ns in ("default", "kube-system", "kube-public"):
                wait_for(lambda: get_json(server, "-n", ns, "serviceaccount", "default"), what=f"default ServiceAccount in {ns}")
                config_map = wait_for(lambda: get_json(server, "-n", ns, "configmap", "kube-root-ca.crt"), what=f"kube-root-ca.crt in {ns}")
                assert config_map["data"] == {"ca.crt": cluster_ca}
                assert config_map["metadata"]["annotations"][DESCRIPTION_ANNOTATION] == DESCRIPTION

            ns = f"team-{uuid.uuid4().hex[:6]}"
            server.kubectl("create", "namespace", ns)
            first = wait_for(lambda: get_json(server, "-n", ns, "serviceaccount", "default"), what="default ServiceAccount in a new namespace")
            server.kubectl("-n", ns, "delete", "serviceaccount", "default")
            again = wait_for(lambda: (sa := get_json(server, "-n", ns, "serviceaccount", "default")) and
                             sa["metadata"]["uid"] != first["metadata"]["uid"] and sa, what="default ServiceAccount recreated")
            assert again["metadata"]["name"] == "default"

            server.kubectl("-n", ns, "patch", "configmap", "kube-root-ca.crt", "--type=merge", "-p", json.dumps({"data": {"ca.crt": "tampered"}}))
            wait_for(lambda: (get_json(server, "-n", ns, "configmap", "kube-root-ca.crt") or {}).get("data") == {"ca.crt": cluster_ca},
                     what="kube-root-ca.crt put back")
            server.kubectl("-n", ns, "delete", "configmap", "kube-root-ca.crt")
            wait_for(lambda: (get_json(server, "-n", ns, "configmap", "kube-root-ca.crt") or {}).get("data") == {"ca.crt": cluster_ca},
                     what="kube-root-ca.crt recreated")
        finally:
            manager.stop(signal.SIGTERM)


def test_root_ca_file_flag(tmp_path):
    other_ca = tmp_path / "other-ca.crt"
    with running_apiserver(tmp_path / "data") as server:
        other_ca.write_text(server.ca_file.read_text() + server.ca_file.read_text())  # a bundle of two
        manager = start_controller_manager(server, tmp_path / "cm.log", "--leader-elect=false", "--secure-port=0",
                                           "--controllers=root-ca-certificate-publisher-controller", f"--root-ca-file={other_ca}")
        try:
            wait_for(lambda: (get_json(server, "-n", "default", "configmap", "kube-root-ca.crt") or {}).get("data") == {"ca.crt": other_ca.read_text()},
                     what="the --root-ca-file bundle published")
        finally:
            manager.stop(signal.SIGTERM)
