"""Can this kernel run the IPVS proxier, and what runs instead if not (upstream
``CanUseIPVSProxier`` and its fallback, as in ``cmd/kube-proxy/app/server_others.go`` up to about
v1.25).

IPVS mode needs three things from the host:

* the IPVS core and the schedulers kube-proxy relies on: the modules ``ip_vs``, ``ip_vs_rr``,
  ``ip_vs_wrr``, ``ip_vs_sh``, the configured scheduler's ``ip_vs_<scheduler>`` (``rr`` when
  unset) and ``nf_conntrack``. Each is loaded with ``modprobe -- <module>`` if possible, and
  counts as present when loaded, built in or compiled in (``kernel.modules``);
* ``ipset`` version 6.0 or later (``MinIPSetCheckVersion``), for the sets the iptables rules match.

When something is missing the proxy logs ``Can't use the IPVS proxier: <reason>`` and runs the
iptables proxier instead, with the iptables section's sync periods (upstream constructs the
fallback ``iptables.NewProxier`` from ``config.IPTables``). ``/proxyMode`` then answers
``iptables`` — the mode actually running — while ``/configz`` keeps the configuration as given
(``mode: ipvs``). Newer upstream versions fail instead; the historical fallback is kept because a
node whose kernel lacks IPVS still gets working Services.

The decision (``unavailable_reason``) is pure over a ``KernelFacts`` snapshot; ``host_facts``
gathers the snapshot (and loads the modules) on this machine through ``kernel.modules`` and
``kernel.ipset``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubesvc.kernel import ipset, modules
from kubesvc.kernel.exec import CommandFailed

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


# ---- the host (through kernel.modules and kernel.ipset) ------------------------------------------


def host_facts(scheduler: str, *, root: Path = Path("/"), run: Callable[[list[str]], int] | None = None) -> KernelFacts:
    """Load the wanted modules (best effort) and collect what is present. Blocking."""
    wanted = wanted_modules(scheduler)
    modules.load(wanted, run=run)
    version, error = None, ""
    try:
        version = ipset.version_sync()
    except CommandFailed as err:
        error = (err.stderr or err.stdout).strip() or f"exit {err.returncode}"
    return KernelFacts(frozenset(modules.present(wanted, root=root)), version, error)


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
