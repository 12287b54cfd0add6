"""``kubesvc down``'s decision to refuse: only in the network namespace ``up`` recorded (the
real namespaces: tests/kernel/test_down_netns.py)."""

from __future__ import annotations

from pathlib import Path

from kubesvc.kernel.netns import NetnsId
from kubesvc.up import netns_refusal

HERE = NetnsId(4, 4026531840)


def test_the_same_namespace_or_no_record_may_clean():
    assert netns_refusal({"dev": 4, "ino": 4026531840, "name": None}, HERE, Path("/d")) is None
    assert netns_refusal(None, HERE, Path("/d")) is None, "an up.json written before the record"


def test_another_namespace_is_refused_in_one_line_naming_both():
    named = netns_refusal({"dev": 4, "ino": 4026532999, "name": "box"}, HERE, Path("/d"))
    assert named == ("refusing to clean up: the kubesvc up of /d ran in network namespace net:[4026532999] (/run/netns/box), "
                     "this is net:[4026531840]; run nsenter --net=/run/netns/box kubesvc down --data-dir /d")
    anonymous = netns_refusal({"dev": 4, "ino": 4026532999, "name": None}, HERE, Path("/d"))
    assert anonymous == ("refusing to clean up: the kubesvc up of /d ran in network namespace net:[4026532999], "
                         "this is net:[4026531840]; run kubesvc down there")
    assert netns_refusal({"dev": 5, "ino": 4026531840}, HERE, Path("/d")) is not None, "the device counts too"


def test_up_hands_its_apiserver_flags_as_given_and_keeps_its_own():
    from types import SimpleNamespace

    from kubesvc.up import apiserver_args, without_flags

    given = ["--node-name", "box", "--secure-port", "0", "--pod-cidr=10.1.0.0/24", "--anonymous-auth", "--data-dir", "rel", "--proxy-mode",
             "iptables", "--watch-cache=false", "--kubelet-port", "0", "--node-ip=10.0.0.2", "-v", "2"]
    assert without_flags(given, ("--node-name", "--pod-cidr", "--node-ip", "--proxy-mode", "--kubelet-port")) == [
        "--secure-port", "0", "--anonymous-auth", "--data-dir", "rel", "--watch-cache=false", "-v", "2"]
    config = SimpleNamespace(data_dir=Path("/abs/rel"), bind_address="0.0.0.0", advertise_address="10.244.0.1")
    assert apiserver_args(given, config) == ["--secure-port", "0", "--anonymous-auth", "--watch-cache=false", "-v", "2",
                                             "--data-dir", "/abs/rel", "--bind-address", "0.0.0.0", "--advertise-address", "10.244.0.1"]


def test_the_apiserver_announcement_is_read_whole_when_the_data_dir_has_spaces():
    from kubesvc.up import APISERVER_LINE

    line = "kubesvc apiserver listening on https://127.0.0.1:6443; kubeconfig: /home/a b/my data/.kubesvc/kubeconfig"
    match = APISERVER_LINE.search(line)
    assert match.group(1) == "https://127.0.0.1:6443"
    assert match.group(2) == "/home/a b/my data/.kubesvc/kubeconfig"
