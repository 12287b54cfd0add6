"""The Pod's action subresources: binding a Pod to a Node, and where a container's log is.

**Binding** (upstream pkg/registry/core/pod/storage ``BindingREST``). A scheduler assigns a
Pod by POSTing ``{"kind": "Binding", "metadata": {"name": POD}, "target": {"kind": "Node",
"name": NODE}}`` to ``pods/POD/binding`` (or to the legacy ``bindings`` collection). The
apiserver then, in one storage update at the read revision (retried on a lost race):

* refuses a Pod being deleted, one already on a node, or one with scheduling gates, each as
  409 ``Operation cannot be fulfilled on pods/binding "POD": <why>``;
* sets ``spec.nodeName``, merges the Binding's annotations into the Pod's, and sets the
  ``PodScheduled`` condition True (``podutil.UpdatePodCondition``: a new transition time
  only when the status changes).

This bypasses the Pod strategy on purpose: a Pod update may never change ``spec.nodeName``.
The Binding's ``metadata.uid`` and ``resourceVersion``, when given, are preconditions on the
Pod. The answer is ``Status`` Success, code 201. Upstream validates the target after
decoding (``ValidatePodBinding``) and returns the field errors as a plain Go error, which the
apiserver turns into a 500 with no reason; that is kept.

**Logs** (``LogREST.Get`` in pkg/registry/core/pod/rest/log.go and ``LogLocation`` in
pkg/registry/core/pod/strategy.go). ``GET pods/POD/log`` reads ``PodLogOptions`` from the
query, validates them (422 ``PodLogOptions "POD" is invalid``), picks the container (the only
one, else the client must name one of the Pod's containers or init containers), and builds
the node agent's ``https://`` ``/containerLogs/NS/POD/CONTAINER`` URL with the options that
concern it (the apiserver reaches agents over HTTPS only: ``kubeletclient.py``).
A Pod not yet on a node has no log location: the answer is empty (204).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from yarl import URL

from kubesvc.api import errors
from kubesvc.api.errors import FieldError
from kubesvc.api.pods import POD_SCHEDULED, update_pod_condition
from kubesvc.util.golang import quote as go_quote
from kubesvc.apiserver.codec import int64_param, parameter_bool
from kubesvc.apiserver.kubeletclient import kubelet_address, unknown_error
from kubesvc.apiserver.registry.store import Store
from kubesvc.util import golang
from kubesvc.util.golang import rfc3339


# ---- binding ---------------------------------------------------------------------------------


class BindingRefused(Exception):
    """The Pod cannot take this binding (its text is upstream's reason)."""


def validate_pod_binding(binding: dict) -> list[FieldError]:
    """Upstream ``ValidatePodBinding``."""
    target = binding.get("target") or {}
    problems = []
    if target.get("kind") and target["kind"] != "Node":
        problems.append(errors.not_supported("target.kind", target["kind"], ["Node", "<empty>"]))
    if not target.get("name"):
        problems.append(errors.required("target.name"))
    return problems


def assign_pod(pod: dict, node: str, annotations: Mapping[str, str] | None, now: datetime) -> dict:
    """Upstream ``setPodNodeAndMetadata``'s change to the stored Pod; raises BindingRefused."""
    meta, spec = pod["metadata"], pod.setdefault("spec", {})
    name = meta.get("name", "")
    if meta.get("deletionTimestamp"):
        raise BindingRefused(f"pod {name} is being deleted, cannot be assigned to a host")
    if spec.get("nodeName"):
        raise BindingRefused(f"pod {name} is already assigned to node {go_quote(spec['nodeName'])}")
    if spec.get("schedulingGates"):  # a gated Pod is not ready to be scheduled
        raise BindingRefused(f"pod {name} has non-empty .spec.schedulingGates")
    spec["nodeName"] = node
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    status = pod.setdefault("status", {})
    status["conditions"], _ = update_pod_condition(status.get("conditions") or [], {"type": POD_SCHEDULED, "status": "True"}, now)
    return pod


async def bind_pod(pods: Store, namespace: str, name: str, binding: dict, *, dry_run: bool) -> None:
    """``BindingREST.Create``: ``name`` is the Pod's name from the URL (or, for the legacy
    ``bindings`` collection, the Binding's own name)."""
    meta = binding.get("metadata") or {}
    if name != meta.get("name", ""):
        raise errors.bad_request("name in URL does not match name in Binding object")
    problems = validate_pod_binding(binding)
    if problems:
        raise unknown_error(golang.aggregate(problems))
    if not name:
        raise errors.bad_request("Name parameter required.")
    node = binding["target"]["name"]
    now = pods.clock.now()
    preconditions = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    try:
        await pods.update_in_storage(namespace, name, lambda pod: assign_pod(pod, node, meta.get("annotations"), now),
                               preconditions=preconditions, dry_run=dry_run)
    except BindingRefused as refused:
        raise errors.conflict("pods/binding", name, "", str(refused)) from None


# ---- logs ------------------------------------------------------------------------------------

def _query_time(query: Mapping[str, str], name: str) -> datetime | None:
    """A metav1.Time query parameter (``Time.UnmarshalQueryParameter``): "" or "null" is unset,
    else ``time.Parse(time.RFC3339, …)`` with its error as the 400."""
    text = query.get(name, "")
    if text in ("", "null"):
        return None
    try:
        return golang.parse_rfc3339(text)
    except ValueError as err:
        raise errors.bad_request(str(err)) from None


@dataclass(frozen=True)
class PodLogOptions:
    """core/v1 PodLogOptions, as the query of ``GET pods/NAME/log`` carries them."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: datetime | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None
    insecure_skip_tls_verify_backend: bool = False  # accepted; node agents serve plain HTTP

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> "PodLogOptions":
        return cls(
            container=query.get("container", ""),
            follow=parameter_bool(query, "follow"),
            previous=parameter_bool(query, "previous"),
            timestamps=parameter_bool(query, "timestamps"),
            since_seconds=int64_param(query, "sinceSeconds"),
            since_time=_query_time(query, "sinceTime"),
            tail_lines=int64_param(query, "tailLines"),
            limit_bytes=int64_param(query, "limitBytes"),
            insecure_skip_tls_verify_backend=parameter_bool(query, "insecureSkipTLSVerifyBackend"),
        )

    def validate(self) -> list[FieldError]:
        """Upstream ``ValidatePodLogOptions``."""
        problems = []
        if self.tail_lines is not None and self.tail_lines < 0:
            problems.append(errors.invalid_value("tailLines", self.tail_lines, "must be greater than or equal to 0"))
        if self.limit_bytes is not None and self.limit_bytes < 1:
            problems.append(errors.invalid_value("limitBytes", self.limit_bytes, "must be greater than 0"))
        if self.since_seconds is not None and self.since_time is not None:
            problems.append(errors.forbidden_field("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
        elif self.since_seconds is not None and self.since_seconds < 1:
            problems.append(errors.invalid_value("sinceSeconds", self.since_seconds, "must be greater than 0"))
        return problems

    def kubelet_query(self) -> dict[str, str]:
        """What the node agent is told (the container is in its URL path)."""
        query = {}
        for name, on in (("follow", self.follow), ("previous", self.previous), ("timestamps", self.timestamps)):
            if on:
                query[name] = "true"
        if self.since_seconds is not None:
            query["sinceSeconds"] = str(self.since_seconds)
        if self.since_time is not None:
            query["sinceTime"] = rfc3339(self.since_time)
        if self.tail_lines is not None:
            query["tailLines"] = str(self.tail_lines)
        if self.limit_bytes is not None:
            query["limitBytes"] = str(self.limit_bytes)
        return query


def _names(containers: list[dict]) -> str:
    """Go's ``%s`` of a []string: ``[a b]``."""
    return "[" + " ".join(c.get("name", "") for c in containers) + "]"


def choose_container(pod: dict, requested: str) -> str:
    """The container whose log is asked for: the named one (a container or init container of
    the Pod), or the Pod's only container."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers, init_containers = spec.get("containers") or [], spec.get("initContainers") or []
    if requested:
        if not any(c.get("name") == requested for c in [*containers, *init_containers]):
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    if len(containers) == 1:
        return containers[0]["name"]
    if not containers:
        raise errors.bad_request(f"a container name must be specified for pod {name}")
    message = f"a container name must be specified for pod {name}, choose one of: {_names(containers)}"
    if init_containers:
        message += f" or one of the init containers: {_names(init_containers)}"
    raise errors.bad_request(message)


async def log_location(pods: Store, namespace: str, name: str, options: PodLogOptions) -> URL | None:
    """The node agent URL of the container's log; None when the Pod is on no node yet."""
    problems = options.validate()
    if problems:
        raise errors.invalid("PodLogOptions", name, problems)
    pod = await pods.get(namespace, name)
    container = choose_container(pod, options.container)
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return None
    node = await pods.registry.store("", "nodes").get(None, node_name)
    host, port = kubelet_address(node)
    return URL.build(scheme="https", host=host, port=port, path=f"/containerLogs/{namespace}/{name}/{container}",
                     query=options.kubelet_query())

