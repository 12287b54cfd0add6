"""``--enable-admission-plugins`` / ``--disable-admission-plugins`` (upstream
``k8s.io/apiserver/pkg/server/options/admission.go``): which admission plugins run.

kubesvc's plugins: ``NamespaceLifecycle`` (always on), ``ServiceAccount`` (on by default, as in
kube-apiserver) and ``NodeRestriction`` (on with the ``Node`` authorization mode, as kubeadm
and k3s run it). Naming any other plugin is upstream's error (``enable-admission-plugins plugin
"X" is unknown``), naming one in both lists is too (``[X] in enable-admission-plugins and
disable-admission-plugins overlapped``); only ``ServiceAccount`` can be turned off (an
apiserver without a controller-manager, whose ServiceAccount controller makes ``default``).
"""

from __future__ import annotations

NAMESPACE_LIFECYCLE, SERVICE_ACCOUNT, NODE_RESTRICTION = "NamespaceLifecycle", "ServiceAccount", "NodeRestriction"
KNOWN = (NAMESPACE_LIFECYCLE, SERVICE_ACCOUNT, NODE_RESTRICTION)
DEFAULT_ENABLED = frozenset({NAMESPACE_LIFECYCLE, SERVICE_ACCOUNT})
SWITCHABLE = frozenset({SERVICE_ACCOUNT})


def _names(text: str) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def resolve_admission_plugins(enable: str, disable: str) -> tuple[frozenset[str], list[str]]:
    """The plugins that run, and the flags' problems (upstream ``AdmissionOptions.Validate``)."""
    enabled, disabled = _names(enable), _names(disable)
    problems = [f"enable-admission-plugins plugin {name!r} is unknown".replace("'", '"') for name in enabled if name not in KNOWN]
    problems += [f"disable-admission-plugins plugin {name!r} is unknown".replace("'", '"') for name in disabled if name not in KNOWN]
    both = sorted(set(enabled) & set(disabled))
    if both:
        problems.append(f"[{' '.join(both)}] in enable-admission-plugins and disable-admission-plugins overlapped")
    problems += [f"disable-admission-plugins plugin \"{name}\" cannot be turned off in kubesvc" for name in disabled
                 if name in KNOWN and name not in SWITCHABLE]
    return frozenset((DEFAULT_ENABLED | set(enabled)) - set(disabled)), problems
