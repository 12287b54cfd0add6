"""Can this kernel run the IPVS proxier, and what runs instead if not (upstream
``CanUseIPVSProxier`` and its fallback, as in ``cmd/kube-proxy/app/server_others.go`` up to about
v1.25).

IPVS mode needs three things from the host:

* the IPVS core and the schedulers kube-proxy relies on: the modules ``ip_vs``, ``ip_vs_rr``,
  ``ip_vs_wrr``, ``ip_vs_sh``, the configured scheduler's ``ip_vs_<scheduler>`` (``rr`` when
  unset) and ``nf_conntrack``. Each is loaded with ``modprobe -- <module>`` if possible; a module
  counts as present when ``/proc/modules`` lists it, the kernel's ``modules.builtin`` names it,
  or — on a kernel without loadable modules (no ``/proc/modules``) — the kernel configuration
  (``/boot/config-<release>`` or ``/proc/config.gz``) has ``CONFIG_<MODULE>=y``.
  ``/proc/net/ip_vs`` existing also proves ``ip_vs``;
* ``ipset`` version 6.0 or later (``MinIPSetCheckVersion``), for the sets the iptables rules match.

When something is missing the proxy logs ``Can't use the IPVS proxier: <reason>`` and runs the
iptables proxier instead, with the iptables section's sync periods (upstream constructs the
fallback ``iptables.NewProxier`` from ``config.IPTables``). ``/proxyMode`` then answers
``iptables`` — the mode actually running — while ``/configz`` keeps the configuration as given
(``mode: ipvs``). Newer upstream versions fail instead; the historical fallback is kept because a
node whose kernel lacks IPVS still gets working Services.

The decision (``unavailable_reason``) is pure over a ``KernelFacts`` snapshot; ``host_facts``
gathers the snapshot (and loads the modules) on this machine.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kubesvc.util.golang import parse_duration

log = logging.getLogger("kubesvc.proxy.ipvs")

DEFAULT_SCHEDULER = "rr"
# utilipvs.GetRequiredIPVSModules for kernels >= 4.19 (nf_conntrack_ipv4 merged into nf_conntrack)
REQUIRED_MODULES = ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack")
MIN_IPSET_VERSION = (6, 0)  # MinIPSetCheckVersion "6.0"

_IPSET_VERSION_RE = re.compile(r"v(\d+)\.(\d+)")


@dataclass(frozen=True)
class KernelFacts:
    """What the host offers: the modules present (loaded, built in or compiled in) and the
    ``ipset --version`` output, or the error getting it."""

    modules: frozenset[str]
    ipset_version: str | None = None
    ipset_error: str = ""


def scheduler_module(scheduler: str) -> str:
    return "ip_vs_" + (scheduler or DEFAULT_SCHEDULER)


def wanted_modules(scheduler: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*REQUIRED_MODULES, scheduler_module(scheduler))))


def ipset_version_ok(text: str) -> tuple[str, bool]:
    """(the version found, whether it is >= 6.0) in ``ipset --version`` output
    (``ipset v7.17, protocol version: 7``)."""
    m = _IPSET_VERSION_RE.search(text)
    if not m:
        return text.strip(), False
    return f"{m.group(1)}.{m.group(2)}", (int(m.group(1)), int(m.group(2))) >= MIN_IPSET_VERSION


def unavailable_reason(facts: KernelFacts, scheduler: str) -> str | None:
    """Why IPVS cannot be used (upstream's error text), or None when it can."""
    missing = [m for m in wanted_modules(scheduler) if m not in facts.modules]
    if missing:
        return ("IPVS proxier will not be used because the following required kernel modules are not loaded: "
                f"[{' '.join(missing)}]")
    if facts.ipset_version is None:
        return f"error getting ipset version, error: {facts.ipset_error or 'ipset not found'}"
    version, ok = ipset_version_ok(facts.ipset_version)
    if not ok:
        return f"ipset version: {version} is less than min required version: 6.0"
    return None


# ---- the host -----------------------------------------------------------------------------------


def _first_column(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def _builtin_names(text: str) -> set[str]:
    """Module names in ``modules.builtin`` (``kernel/net/netfilter/ipvs/ip_vs.ko`` lines)."""
    return {Path(line.strip()).name.removesuffix(".ko").replace("-", "_") for line in text.splitlines() if line.strip()}


def _config_builtins(text: str, modules: Iterable[str]) -> set[str]:
    return {m for m in modules if re.search(rf"^CONFIG_{m.upper()}=y$", text, re.M)}


def _read(path: Path) -> str | None:
    try:
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes()).decode(errors="replace")
        return path.read_text(errors="replace")
    except OSError:
        return None


def host_facts(scheduler: str, *, root: Path = Path("/"), run: Callable[[list[str]], int] | None = None) -> KernelFacts:
    """Load the wanted modules (best effort) and collect what is present. Blocking."""
    run = run or _run_quiet
    release = os.uname().release
    wanted = wanted_modules(scheduler)
    if shutil.which("modprobe"):
        for module in wanted:
            if run(["modprobe", "--", module]) != 0:
                log.debug("modprobe %s failed", module)
    present: set[str] = set()
    loaded = _read(root / "proc/modules")
    builtin = _read(root / f"lib/modules/{release}/modules.builtin")
    if builtin is not None:
        present |= _builtin_names(builtin) & set(wanted)
    if loaded is not None:
        present |= _first_column(loaded)
    else:  # no loadable modules: what is compiled in
        config = _read(root / f"boot/config-{release}") or _read(root / "proc/config.gz") or ""
        present |= _config_builtins(config, wanted)
    if (root / "proc/net/ip_vs").exists():
        present.add("ip_vs")
    version, error = None, ""
    if shutil.which("ipset") is None:
        error = 'executable file not found in $PATH: "ipset"'
    else:
        result = subprocess.run(["ipset", "--version"], capture_output=True, text=True)
        if result.returncode == 0:
            version = result.stdout
        else:
            error = (result.stderr or result.stdout).strip() or f"exit {result.returncode}"
    return KernelFacts(frozenset(present), version, error)


def _run_quiet(argv: list[str]) -> int:
    return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def can_use_ipvs(scheduler: str, facts: Callable[[str], KernelFacts] = host_facts) -> str | None:
    """None when the IPVS proxier can run here, else the reason (blocking: loads modules)."""
    return unavailable_reason(facts(scheduler), scheduler)


def iptables_fallback(settings):
    """``settings`` (a ``ProxySettings`` in ipvs mode) changed to run the iptables proxier:
    mode ``iptables`` and the ``iptables`` section's sync periods; ``configz`` (the configuration
    as given) unchanged."""
    section = (settings.config or {}).get("iptables") or {}

    def period(key: str, default: float) -> float:
        value = section.get(key)
        return parse_duration(value) if isinstance(value, str) and value else default

    return dataclasses.replace(settings, mode="iptables", sync_period=period("syncPeriod", 30.0),
                               min_sync_period=period("minSyncPeriod", 1.0))
