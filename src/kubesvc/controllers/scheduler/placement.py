"""Where a Pod may run, and where it goes: the scheduler's decision as pure functions.

kube-scheduler filters every Node through its filter plugins and scores the survivors. The
filters kept here are the ones that matter without resource accounting, in upstream's order
(pkg/scheduler/framework/plugins); a Node is rejected by the first that fails, with that
plugin's reason:

1. **NodeUnschedulable**: ``spec.unschedulable`` (``kubectl cordon``) rejects the Pod unless it
   tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint —
   "node(s) were unschedulable".
2. **TaintToleration**: every ``NoSchedule``/``NoExecute`` taint of the Node must be
   tolerated (``Toleration.ToleratesTaint``: effect and key match when set; ``Equal``, the
   default operator, compares values, ``Exists`` does not) —
   "node(s) had untolerated taint {key: value}". A Node that is not Ready also carries the
   taint the node lifecycle controller would give it (``node.kubernetes.io/not-ready`` for
   Ready=False, ``node.kubernetes.io/unreachable`` for Unknown or no Ready condition), so a
   Pod lands on a not-Ready node only if it tolerates that, as upstream.
3. **NodeAffinity**: every ``spec.nodeSelector`` label, and one of the required node
   affinity terms (``requiredDuringSchedulingIgnoredDuringExecution``) —
   "node(s) didn't match Pod's node affinity/selector".

Scoring is one rule, spreading: the feasible Node running the fewest non-terminal Pods wins,
ties broken by name. When no Node fits, the reasons are counted into upstream's ``FitError``
text: ``0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2
node(s) were unschedulable.`` (reasons sorted as text), or "no nodes available to schedule
pods" when there is no Node at all.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping, NamedTuple

DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = ("Succeeded", "Failed")

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
FILTERED_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule only scores

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
NO_NODES = "no nodes available to schedule pods"


class Placement(NamedTuple):
    node: str | None  # None: nowhere
    reason: str  # why nowhere (empty when placed)


def needs_scheduling(pod: dict, scheduler_name: str = DEFAULT_SCHEDULER) -> bool:
    """A Pod this scheduler should place: no node yet, ours by ``spec.schedulerName``, not
    being deleted, not finished, and not held by scheduling gates."""
    spec = pod.get("spec") or {}
    return (not spec.get("nodeName")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == scheduler_name
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
            and not spec.get("schedulingGates"))


def is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


# ---- taints and tolerations ------------------------------------------------------------------


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """Upstream ``Toleration.ToleratesTaint``."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: Iterable[Mapping], taint: Mapping) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def condition_taints(node: dict) -> list[dict]:
    """The NoSchedule taint the node lifecycle controller puts on a Node that is not Ready."""
    ready = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    status = (ready or {}).get("status", "Unknown")
    if status == "True":
        return []
    return [{"key": TAINT_NOT_READY if status == "False" else TAINT_UNREACHABLE, "effect": "NoSchedule"}]


def untolerated_taint(pod: dict, node: dict) -> dict | None:
    """The first NoSchedule/NoExecute taint of the Node the Pod does not tolerate (upstream
    ``FindMatchingUntoleratedTaint``), the Node's own before the implied ones."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    own = (node.get("spec") or {}).get("taints") or []
    taints = own + [t for t in condition_taints(node) if not any(o.get("key") == t["key"] and o.get("effect") == t["effect"] for o in own)]
    return next((t for t in taints if t.get("effect") in FILTERED_EFFECTS and not tolerated(tolerations, t)), None)


# ---- node selector and node affinity ----------------------------------------------------------


def _requirement_matches(requirement: Mapping, values_by_key: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against labels (or fields); an unknown operator or a
    malformed Gt/Lt matches nothing."""
    key, operator, values = requirement.get("key", ""), requirement.get("operator"), requirement.get("values") or []
    present = key in values_by_key
    if operator == "In":
        return present and values_by_key[key] in values
    if operator == "NotIn":
        return not present or values_by_key[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(values_by_key[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_matches(term: Mapping, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    expressions, field_expressions = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term selects no node
    return (all(_requirement_matches(r, labels) for r in expressions)
            and all(_requirement_matches(r, fields) for r in field_expressions))


def matches_node_affinity(pod: dict, node: dict) -> bool:
    """Upstream ``GetRequiredNodeAffinity(pod).Match(node)``: all of ``nodeSelector`` and, if
    required node affinity is given, at least one of its terms."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return any(_term_matches(term, labels, fields) for term in required.get("nodeSelectorTerms") or [])


# ---- the decision ----------------------------------------------------------------------------


def filter_node(pod: dict, node: dict) -> str | None:
    """Why the Pod cannot go to the Node (the first failing filter's reason), or None."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not tolerated(tolerations, {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}):
        return REASON_UNSCHEDULABLE
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    if not matches_node_affinity(pod, node):
        return REASON_AFFINITY
    return None


def fit_error(total: int, reasons: Counter) -> str:
    """Upstream ``FitError.Error()``: each reason with its node count, sorted as text."""
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} nodes are available: {', '.join(histogram)}."


def pick_node(pod: dict, nodes: Iterable[dict], pod_counts: Mapping[str, int]) -> Placement:
    """The Node for ``pod`` among ``nodes`` (``pod_counts``: non-terminal Pods per Node name),
    or None and the reason."""
    nodes = list(nodes)
    if not nodes:
        return Placement(None, NO_NODES)
    reasons: Counter = Counter()
    feasible = []
    for node in nodes:
        why = filter_node(pod, node)
        if why is None:
            feasible.append(node["metadata"]["name"])
        else:
            reasons[why] += 1
    if not feasible:
        return Placement(None, fit_error(len(nodes), reasons))
    return Placement(min(feasible, key=lambda name: (pod_counts.get(name, 0), name)), "")
