"""The modules fake (``kernel/fake/modules.py``) against this host's kernel, where that changes
nothing: the fake is given the host's sets (loaded, built in as ``kernel.modules.present`` finds
them, whether ``/lib/modules/<release>`` exists), then ``modprobe`` of a module that does not
exist and of every module already present goes to both (neither loads anything new): the same
failures, and the same modules present afterwards. Loading a module the host does not have yet
is not tried (modules are the host's, not a namespace's).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubesvc.kernel import modules
from kubesvc.kernel.fake.modules import IPVS_SCHEDULERS, FakeModules

pytestmark = pytest.mark.kernel

WANTED = ("ip_vs", *IPVS_SCHEDULERS, "nf_conntrack", "ip_tables", "ip6_tables", "nf_nat", "br_netfilter")


def test_modprobe_of_present_and_missing_modules_alike():
    real = modules.Modules()
    text = Path("/proc/modules").read_text() if Path("/proc/modules").exists() else ""
    loaded = modules.loaded_names(text)
    present = real.present(WANTED)
    fake = FakeModules(loaded=loaded, builtin=present - loaded, has_modules_dir=Path(f"/lib/modules/{os.uname().release}").is_dir())
    assert fake.present(WANTED) == present and fake.ipvs_present() == real.ipvs_present()
    attempt = ["ks_no_such_module", *sorted(present & set(WANTED))]
    assert fake.load(attempt) == real.load(attempt)
    assert fake.present(WANTED) == real.present(WANTED) == present
