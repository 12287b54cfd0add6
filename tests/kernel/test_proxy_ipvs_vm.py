"""IPVS mode on a real kernel with IPVS: tests/kernel/vm/ run inside a throw-away VM.

This machine's kernel has no IPVS (``CONFIG_IP_VS`` unset). ``scripts/vm-ipvs.sh`` boots
Debian's stock kernel, which ships the ``ip_vs`` modules, under QEMU's software emulation, with
one link, to a namespace of the run's own on this host (nothing in it can reach any other
network), the host's ``/`` as its read-only root and a tmpfs over it; ``scripts/install.sh`` has
prepared it (``vm-ipvs.sh setup``). Inside, the same kernel-test harness as everywhere (node and
Pod namespaces, ``kubesvc proxy --proxy-mode ipvs``) runs ``tests/kernel/vm/``; its apiserver
and controller-manager run on this host, in a namespace of the run's own that the VM's only link
reaches; its JUnit report comes back through the run's shared out directory
(tests/support/ipvs_vm.py).

scripts/test.sh starts that run before the suite, so its minutes overlap the other tests; run
alone, this test boots the VM itself. Either way it checks that every test of tests/kernel/vm
ran in the VM and passed, none skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import ipvs_vm
from tests.support.netns import REPO_ROOT

pytestmark = pytest.mark.kernel


def _collected() -> set[str]:
    """The test ids pytest collects from tests/kernel/vm where they are enabled."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", ipvs_vm.VM_TESTS],
                         capture_output=True, text=True, cwd=REPO_ROOT, env={**os.environ, "KUBESVC_IPVS_TESTS": "1"}, timeout=120)
    ids = {line.split("::", 1)[1] for line in out.stdout.splitlines() if "::" in line}
    assert ids, f"no IPVS tests collected:\n{out.stdout}\n{out.stderr}"
    return ids


def _outcomes(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        bad = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = bad[0] if bad else "passed"
    return outcomes


@pytest.mark.timeout(ipvs_vm.VM_BUDGET + 120)
def test_ipvs_mode_on_a_kernel_with_ipvs(tmp_path):
    expected = _collected()
    shared = os.environ.get(ipvs_vm.RUN_ENV)
    run_dir = Path(shared) if shared and ipvs_vm.started(Path(shared)) else tmp_path
    if run_dir == tmp_path:
        ipvs_vm.start(run_dir)
    began = time.monotonic()
    try:
        result = ipvs_vm.wait(run_dir, ipvs_vm.VM_BUDGET + 60)
    finally:
        ipvs_vm.stop(run_dir)
    output = result.output[-20000:]
    assert result.exit_code is not None, f"the VM run gave no result within {time.monotonic() - began:.0f}s:\n{output}"
    assert result.junit.exists(), f"the VM produced no test report (exit {result.exit_code}):\n{output}"
    outcomes = _outcomes(result.junit)
    failed = {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}
    assert not failed and set(outcomes) == expected and result.exit_code == 0, (
        f"IPVS tests in the VM: exit {result.exit_code}; not passed: {failed}; never ran: {sorted(expected - set(outcomes))}\n{output}")
