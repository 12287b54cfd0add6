"""How much slower than native the tests' machine runs: ``KUBESVC_TEST_SLOWDOWN`` (default 1).

The IPVS tests run inside a software-emulated VM (scripts/vm-ipvs.sh), where starting a Python
process costs 15-25 times what it does natively; the VM runner sets the factor so that waits
for processes to start and for the data plane to converge stretch with it. The checks
themselves never change: only how long the harness is willing to wait.
"""

from __future__ import annotations

import os

SLOWDOWN = float(os.environ.get("KUBESVC_TEST_SLOWDOWN") or 1)


def scaled(seconds: float) -> float:
    """``seconds`` of native waiting, on this machine."""
    return seconds * SLOWDOWN
