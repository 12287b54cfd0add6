"""``kubesvc up`` in a network namespace whose loopback is down (``ip netns add`` without
``ip link set lo up``, the README's first step): the apiserver cannot be reached on 127.0.0.1
and never will be, so ``up`` stops at once with one line saying what to do, and leaves nothing."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.support.agent import nsenter_argv
from tests.support.netns import REPO_ROOT, remove_netns

pytestmark = pytest.mark.kernel


def test_up_with_loopback_down_says_so_in_one_line(tmp_path):
    name = f"ks-lo-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        result = subprocess.run(nsenter_argv(name, sys.executable, "-m", "kubesvc", "up", "--data-dir", str(tmp_path / "data"),
                                             "--secure-port", "0"), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    finally:
        remove_netns(name)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == ("Error: cannot start: cannot reach the apiserver at 127.0.0.1: the loopback "
                                              "interface is down in this network namespace (ip link set lo up)")
    assert result.stdout == ""
