"""The host's kernel modules, stateful, behind the interface of ``kernel.modules.Modules``
(``load``, ``present``, ``ipvs_present``), for tests.

Three sets, as the kernel and ``modprobe`` see them: ``loaded`` (``/proc/modules``),
``builtin`` (``modules.builtin``: always there, never listed as loaded) and ``available``
(``.ko`` files under ``/lib/modules``: loadable). ``modprobe`` of a loaded or built-in module
succeeds and changes nothing; of an available one loads it with what it depends on
(``depends``: ``ip_vs_rr`` needs ``ip_vs``, which needs ``nf_conntrack``); of anything else fails
("Module x not found"), and so does every load without ``modprobe`` (``has_modprobe``), and
every ``modprobe`` where the kernel has no ``/lib/modules/<release>`` (``has_modules_dir``: a
kernel whose built-ins only its config names; modprobe cannot find even those).
``present(wanted)`` is every loaded module and those of ``wanted`` built in, as
``kernel.modules.present`` reads it; ``ipvs_present`` is ``/proc/net/ip_vs``: ``ip_vs`` loaded or built in.
"""

from __future__ import annotations

from collections.abc import Iterable

IPVS_SCHEDULERS = ("ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "ip_vs_lc", "ip_vs_wlc", "ip_vs_lblc", "ip_vs_lblcr", "ip_vs_sed", "ip_vs_nq",
                   "ip_vs_dh", "ip_vs_mh")
DEPENDS = {**{s: ("ip_vs",) for s in IPVS_SCHEDULERS}, "ip_vs": ("nf_conntrack",), "nf_conntrack": ("nf_defrag_ipv4", "nf_defrag_ipv6"),
           "nf_nat": ("nf_conntrack",)}


class FakeModules:
    def __init__(self, *, loaded: Iterable[str] = (), builtin: Iterable[str] = (), available: Iterable[str] = (),
                 depends: dict[str, tuple[str, ...]] | None = None, has_modprobe: bool = True, has_modules_dir: bool = True):
        self.loaded, self.builtin, self.available = set(loaded), set(builtin), set(available)
        self.depends = DEPENDS if depends is None else depends
        self.has_modprobe, self.has_modules_dir = has_modprobe, has_modules_dir
        self.modprobes: list[str] = []  # each module modprobe was run for

    def load(self, modules: Iterable[str]) -> list[str]:
        modules = list(modules)
        if not self.has_modprobe:
            return modules
        failed = []
        for module in modules:
            self.modprobes.append(module)
            if not self._modprobe(module.replace("-", "_")):
                failed.append(module)
        return failed

    def _modprobe(self, module: str) -> bool:
        if not self.has_modules_dir:
            return False
        if module in self.loaded or module in self.builtin:
            return True
        if module not in self.available:
            return False
        if not all(self._modprobe(dep) for dep in self.depends.get(module, ())):
            return False
        self.loaded.add(module)
        return True

    def present(self, wanted: Iterable[str]) -> set[str]:
        found = set(self.loaded) | (self.builtin & set(wanted))
        if self.ipvs_present():
            found.add("ip_vs")
        return found

    def ipvs_present(self) -> bool:
        return "ip_vs" in self.loaded or "ip_vs" in self.builtin
