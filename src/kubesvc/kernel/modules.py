"""Kernel modules: loading them (``modprobe -- <module>``, best effort, as upstream's
``utilipvs`` / ``CanUseIPVSProxier`` does) and telling which are present.

A module counts as present when ``/proc/modules`` lists it (loaded), the kernel's
``/lib/modules/<release>/modules.builtin`` names it (built in), or — on a kernel without loadable
modules (no ``/proc/modules``) — the kernel configuration (``/boot/config-<release>`` or
``/proc/config.gz``) has ``CONFIG_<MODULE>=y``. ``/proc/net/ip_vs`` existing also proves
``ip_vs``. ``root`` lets tests lay out a fake ``/``; the parsing helpers are pure. ``Modules`` is
the one interface; ``kernel/fake/modules.py`` its stateful fake.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from kubesvc.kernel.exec import run_sync

log = logging.getLogger("kubesvc.kernel.modules")


def loaded_names(text: str) -> set[str]:
    """Module names in ``/proc/modules`` (the first column)."""
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def builtin_names(text: str) -> set[str]:
    """Module names in ``modules.builtin`` (``kernel/net/netfilter/ipvs/ip_vs.ko`` lines)."""
    return {Path(line.strip()).name.removesuffix(".ko").replace("-", "_") for line in text.splitlines() if line.strip()}


def config_builtins(text: str, modules: Iterable[str]) -> set[str]:
    """Those of ``modules`` compiled in (``CONFIG_<MODULE>=y``) according to a kernel config."""
    return {m for m in modules if re.search(rf"^CONFIG_{m.upper()}=y$", text, re.M)}


def _read(path: Path) -> str | None:
    try:
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes()).decode(errors="replace")
        return path.read_text(errors="replace")
    except OSError:
        return None


def _modprobe(argv: list[str]) -> int:
    return run_sync(argv, check=False).returncode


def load(modules: Iterable[str], *, run: Callable[[list[str]], int] | None = None) -> list[str]:
    """``modprobe -- <module>`` for each (when modprobe exists); the ones that failed. Blocking."""
    run = run or _modprobe
    failed: list[str] = []
    if shutil.which("modprobe") is None:
        return list(modules)
    for module in modules:
        if run(["modprobe", "--", module]) != 0:
            log.debug("modprobe %s failed", module)
            failed.append(module)
    return failed


def present(wanted: Iterable[str], *, root: Path = Path("/")) -> set[str]:
    """The modules present here: every loaded one, and those of ``wanted`` built or compiled in."""
    wanted = tuple(wanted)
    release = os.uname().release
    found: set[str] = set()
    loaded = _read(root / "proc/modules")
    builtin = _read(root / f"lib/modules/{release}/modules.builtin")
    if builtin is not None:
        found |= builtin_names(builtin) & set(wanted)
    if loaded is not None:
        found |= loaded_names(loaded)
    else:  # no loadable modules: what is compiled in
        config = _read(root / f"boot/config-{release}") or _read(root / "proc/config.gz") or ""
        found |= config_builtins(config, wanted)
    if (root / "proc/net/ip_vs").exists():
        found.add("ip_vs")
    return found


def ipvs_present(root: Path = Path("/")) -> bool:
    """Whether the kernel's IPVS table exists (``ip_vs`` loaded); loads nothing."""
    return (root / "proc/net/ip_vs").exists()


class Modules:
    """The host's kernel modules as one interface (``load``, ``present``, ``ipvs_present``);
    ``root`` and ``run`` as for the functions above. Its stateful fake is
    ``kernel.fake.modules.FakeModules``."""

    def __init__(self, *, root: Path = Path("/"), run: Callable[[list[str]], int] | None = None):
        self.root = root
        self.run = run

    def load(self, modules: Iterable[str]) -> list[str]:
        return load(modules, run=self.run)

    def present(self, wanted: Iterable[str]) -> set[str]:
        return present(wanted, root=self.root)

    def ipvs_present(self) -> bool:
        return ipvs_present(self.root)
