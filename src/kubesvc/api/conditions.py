"""A condition's ``lastTransitionTime``: when its ``status`` last changed, not when it was last
written. Every writer of conditions keeps it the same way upstream:
``meta.SetStatusCondition`` (apimachinery pkg/api/meta/conditions.go, for ``metav1.Condition``
such as a ServiceCIDR's Ready), the kubelet's node status setters (``NodeReady`` and the
pressure conditions: a new transition time only when the status flips, the heartbeat every
report) and its pod status (``generateAPIPodStatus`` keeps the old condition's time while the
status holds). A condition seen for the first time, or one whose old copy has no time, gets now.

(``podutil.UpdatePodCondition``, in :mod:`kubesvc.api.pods`, is the one variant: it copies the
old time even when that is unset, as Go copies a zero ``metav1.Time``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from kubesvc.util.golang import rfc3339


def transition_time(previous: Mapping | None, status: str, now: datetime) -> str:
    """The ``lastTransitionTime`` of a condition now ``status``, whose last copy was ``previous``."""
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        return previous["lastTransitionTime"]
    return rfc3339(now)
