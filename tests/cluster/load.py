"""A steady write load and a moving watch for the several-apiserver tests, through the official
``kubernetes`` Python client as a user's program would drive it.

Each :class:`Writer` is one client with an ordered list of apiservers: it writes through the
first, and when a write fails there for the server's reasons (no connection, a 5xx Status) it
moves on to the next, as a client with several server URLs would. It remembers only what the
apiserver acknowledged (a 2xx with the object): those writes, and their contents, must be in
the store afterwards. A write that failed may or may not have committed (the answer was lost
with the server), so every attempt uses a new name and a new static ClusterIP: a retry can
never collide with its own lost first try.

The writes cycle through the kinds the done-when names: a Service with a dynamic ClusterIP
(every other one of type NodePort, so a NodePort is allocated too), a Pod (one no node matches:
it stays Pending), a Service with a static ClusterIP from the writer's own slice of the
Service range's lower band, an EndpointSlice, and a patch of an annotation of the writer's
previous Service.

:class:`MovingWatch` watches the Services of the namespace through one apiserver, and when that
stream fails (its apiserver died), continues through the next one from the last
resourceVersion it received, as client-go's reflector does: nothing may be missing, nothing
may come twice or out of order. It starts from a revision N, as a reflector starts from its
list's: a watch without one (``""`` or ``"0"``) begins with the current state as synthetic
ADDED events in key order, whose revisions are in no order (the Services w0-0, w1-0, w2-0
written at 274, 268, 270 come as 274, 268, 270). ``kubectl get -o json`` prints its own
``List`` with ``resourceVersion: ""``, so a start taken from it is no revision: MovingWatch
refuses one. Each stream it opened is recorded (:class:`Stream`: apiserver, start, every line,
bookmarks too, how it ended), and :meth:`MovingWatch.describe` prints them for a failure.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import urllib3
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

NAMESPACE = "load"
REQUEST_TIMEOUT = 15
STATIC_BASE = 20  # writer w's static ClusterIPs: 10.96.0.(STATIC_BASE + w * STATIC_PER_WRITER + n)
STATIC_PER_WRITER = 50  # four writers: 10.96.0.20-219, below the race test's .250


def server_failed(exc: BaseException) -> bool:
    """A failure of the apiserver, not of the request (no connection, a 5xx, 429 Too Many
    Requests): the request may go to another apiserver."""
    if isinstance(exc, ApiException):
        return exc.status is None or exc.status in (0, 429) or exc.status >= 500
    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))


def body_of(response) -> dict:
    return json.loads(response.data)


@dataclass
class Acked:
    """What a writer was told: each object's content as acknowledged, the Services' annotation
    values that may be stored (a failed patch may have committed), and each acknowledged
    Service write's resourceVersion (the watch must deliver each)."""

    objects: dict[tuple[str, str], dict] = field(default_factory=dict)  # (kind, name) -> the object as answered
    annotations: dict[str, set] = field(default_factory=dict)  # Service name -> possible values of the "round" annotation
    service_writes: set[tuple[str, str]] = field(default_factory=set)  # (name, resourceVersion)
    failures: list[str] = field(default_factory=list)  # server failures seen (expected around the kill)
    moves: list[str] = field(default_factory=list)  # the apiservers the writer moved to


class Writer:
    def __init__(self, index: int, clients: list[tuple[str, k8s.ApiClient]], stop: threading.Event, pause: float = 0.05):
        self.index = index
        self.clients = list(clients)  # (name, client), the first one first
        self.stop = stop
        self.pause = pause
        self.acked = Acked()
        self.statics = 0
        self.previous_service: str | None = None
        self.error: BaseException | None = None

    @property
    def current(self) -> tuple[str, k8s.ApiClient]:
        return self.clients[0]

    def run(self) -> Acked:
        try:
            round_ = 0
            while not self.stop.is_set():
                self.one_write(round_)
                round_ += 1
                time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc
        return self.acked

    def one_write(self, round_: int) -> None:
        name_of_server, api = self.current
        step = round_ % 5
        name = f"w{self.index}-{round_}"
        try:
            if step == 0:
                self._service(api, name, None, "NodePort" if round_ % 10 == 0 else "ClusterIP")
            elif step == 1:
                self._pod(api, name)
            elif step == 2 and self.statics < STATIC_PER_WRITER:
                ip = f"10.96.0.{STATIC_BASE + self.index * STATIC_PER_WRITER + self.statics}"
                self.statics += 1  # a new IP per attempt, acknowledged or not
                self._service(api, name, ip, "ClusterIP")
            elif step == 3:
                self._slice(api, name, round_)
            elif step == 4 and self.previous_service:
                self._patch(api, self.previous_service, round_)
        except Exception as exc:
            if not server_failed(exc):
                raise AssertionError(f"writer {self.index} through {name_of_server}: {exc}") from exc
            self.acked.failures.append(f"{name_of_server}: {type(exc).__name__}")
            self.clients.append(self.clients.pop(0))  # the next apiserver
            self.acked.moves.append(self.current[0])

    def _service(self, api, name: str, ip: str | None, type_: str) -> None:
        spec = {"type": type_, "selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
        if ip:
            spec["clusterIP"] = ip
        body = {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "labels": {"writer": str(self.index)}, "annotations": {"round": "0"}}, "spec": spec}
        created = body_of(k8s.CoreV1Api(api).create_namespaced_service(NAMESPACE, body, _preload_content=False,
                                                                         _request_timeout=REQUEST_TIMEOUT))
        if ip:
            assert created["spec"]["clusterIP"] == ip, created
        self.acked.objects[("Service", name)] = created
        self.acked.annotations[name] = {"0"}
        self.acked.service_writes.add((name, created["metadata"]["resourceVersion"]))
        self.previous_service = name

    def _pod(self, api, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"writer": str(self.index)}},
                "spec": {"nodeSelector": {"load-test": "nowhere"},  # stays Pending: no Pod process on the machines
                         "containers": [{"name": "main", "image": "busybox", "command": ["sleep", name]}]}}
        created = body_of(k8s.CoreV1Api(api).create_namespaced_pod(NAMESPACE, body, _preload_content=False,
                                                                     _request_timeout=REQUEST_TIMEOUT))
        self.acked.objects[("Pod", name)] = created

    def _slice(self, api, name: str, round_: int) -> None:
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name,
                                                      "endpointslice.kubernetes.io/managed-by": "load-test"}},
                "endpoints": [{"addresses": [f"10.244.{self.index}.{round_ % 250 + 1}"], "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": 8000 + round_, "protocol": "TCP"}]}
        created = body_of(k8s.DiscoveryV1Api(api).create_namespaced_endpoint_slice(NAMESPACE, body, _preload_content=False,
                                                                                     _request_timeout=REQUEST_TIMEOUT))
        self.acked.objects[("EndpointSlice", name)] = created

    def _patch(self, api, name: str, round_: int) -> None:
        value = str(round_)
        possible = self.acked.annotations[name]
        possible.add(value)  # stored if the patch committed, answered or not
        patched = body_of(k8s.CoreV1Api(api).patch_namespaced_service(name, NAMESPACE, {"metadata": {"annotations": {"round": value}}},
                                                                        _preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        self.acked.annotations[name] = {value}  # acknowledged: nothing older may be stored
        self.acked.objects[("Service", name)] = patched
        self.acked.service_writes.add((name, patched["metadata"]["resourceVersion"]))
        self.previous_service = None  # one patch per Service


@dataclass
class Stream:
    """One watch request of a :class:`MovingWatch`: the apiserver, the resourceVersion it was
    opened from, every line read (BOOKMARKs too) and how it ended."""

    server: str
    start: str
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (type, name ("" for a BOOKMARK), resourceVersion)
    end: str = "open"  # "ended" (the server closed it: its timeoutSeconds), or the failure that ended it

    def __str__(self) -> str:
        lines = " ".join(f"{kind[0]}:{name}@{rv}" if name else f"{kind[0]}@{rv}" for kind, name, rv in self.lines)
        return f"{self.server} from {self.start}: [{lines}] {self.end}"


class MovingWatch:
    """A watch of the load namespace's Services, through the first apiserver of ``clients``,
    moved to the next one (from the last resourceVersion received) whenever its stream fails,
    and after every stream when ``hop`` is set (a watch moved between live apiservers)."""

    def __init__(self, clients: list[tuple[str, k8s.ApiClient]], resource_version: str, stop: threading.Event, *,
                 hop: bool = False, timeout_seconds: int = 3):
        if not resource_version.isdigit() or int(resource_version) == 0:
            raise ValueError(f"a watch from a revision needs one, not {resource_version!r}: a watch without one starts with "
                             "the current objects in key order (take it from the API's list, not kubectl -o json's List)")
        self.clients = list(clients)
        self.resource_version = resource_version
        self.stop = stop
        self.hop = hop
        self.timeout_seconds = timeout_seconds
        self.events: list[tuple[str, str, str]] = []  # (type, name, resourceVersion)
        self.streams: list[Stream] = []
        self.error: BaseException | None = None

    @property
    def served_by(self) -> list[str]:
        """The apiserver of each stream opened, in order."""
        return [stream.server for stream in self.streams]

    def describe(self) -> str:
        """Every stream, one a line: what a failure of the watch's assertions prints."""
        return "\n".join(str(stream) for stream in self.streams)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                name, api = self.clients[0]
                try:
                    self._one_stream(name, api)
                    if self.hop:
                        self.clients.append(self.clients.pop(0))
                except Exception as exc:
                    if not server_failed(exc):
                        raise
                    self.clients.append(self.clients.pop(0))
                    time.sleep(0.2)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc

    def _one_stream(self, name: str, api) -> None:
        """One watch request (a short server-side timeout, so ``stop`` is seen), its events
        recorded; a 5xx ERROR event ends it (the server's failure: re-watched from the last
        resourceVersion), any other ERROR, 410 Expired among them, fails the test (no relist
        may hide a gap)."""
        stream = Stream(name, self.resource_version)
        self.streams.append(stream)
        try:
            response = k8s.CoreV1Api(api).list_namespaced_service(
                NAMESPACE, watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.timeout_seconds, _preload_content=False, _request_timeout=(5, 10))
        except Exception as exc:
            stream.end = f"not opened: {type(exc).__name__}"
            raise
        try:
            for line in iter_resp_lines(response):  # whole lines, whatever the chunks
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    code = event["object"].get("code") or 0
                    stream.lines.append(("ERROR", "", str(code)))
                    if code >= 500:  # the server's trouble (its etcd member had no leader a moment): re-watch, as client-go does
                        raise ApiException(status=code, reason=event["object"].get("message"))
                    raise AssertionError(f"watch through {name} from {self.resource_version}: {event['object']}")
                rv = event["object"]["metadata"]["resourceVersion"]
                stream.lines.append((event["type"], event["object"]["metadata"].get("name", ""), rv))
                if event["type"] != "BOOKMARK":
                    self.events.append((event["type"], event["object"]["metadata"]["name"], rv))
                self.resource_version = rv
            stream.end = "ended"
        except Exception as exc:
            stream.end = f"failed: {type(exc).__name__}: {exc}"[:200]
            response.close()  # read part way: its connection must not go back to the pool
            raise
        finally:
            response.release_conn()
