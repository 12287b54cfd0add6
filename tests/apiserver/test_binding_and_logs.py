"""``pods/binding`` and ``pods/log`` against the real server, driven by the real kubectl and the
official Python client, with a real node agent log server (``KubeletServer``) as the node.

The "node" runs in a thread of its own (its own event loop), so kubectl and the Python client
can be called synchronously. Its Node object reports ``InternalIP 127.0.0.1`` and the log
server's port in ``status.daemonEndpoints.kubeletEndpoint.Port``, as an agent's does.
"""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesvc.agent.kubeletauth import SubjectAccessReviewAuthorizer, serving_context
from kubesvc.agent.kubeletserver import KubeletServer, PodLogInfo
from kubesvc.agent.logs import ContainerLogFile, container_log_path
from kubesvc.api.scheme import all_kinds
from kubesvc.serving import pki
from kubesvc.apiserver.discovery import Discovery
from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import RestClient
from kubesvc.util.clock import FakeClock

LOG_START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class NodeAgent:
    """A KubeletServer on 127.0.0.1 in a thread, serving the Pods in ``pods`` over HTTPS with a
    serving certificate from the cluster CA, authorizing callers as an agent does (access
    reviews asked with the node's own kubeconfig)."""

    NAME = "log-node"

    def __init__(self, apiserver, log_root: Path):
        self.log_root = log_root
        self.pods: dict[tuple[str, str], PodLogInfo] = {}
        self._apiserver = apiserver
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="node-agent", daemon=True)
        self.server: KubeletServer | None = None
        self._client: RestClient | None = None

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(15)

    async def _start(self) -> None:
        serving = self._apiserver.ca.node_serving(self.NAME, ["127.0.0.1"])
        self._client = RestClient(load_kubeconfig(self._apiserver.node_kubeconfig(self.NAME)), field_manager="kubelet")
        self.server = KubeletServer("127.0.0.1", 0, self.log_root, lambda ns, name: self.pods.get((ns, name)), node_name=self.NAME,
                                    tls=serving_context(serving.cert, serving.key, self._apiserver.ca_file),
                                    authorizer=SubjectAccessReviewAuthorizer(self._client))
        await self.server.start()

    async def _stop(self) -> None:
        await self.server.stop()
        await self._client.close()

    def start(self) -> None:
        self._thread.start()
        self._run(self._start())

    def stop(self) -> None:
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture(scope="module")
def agent(apiserver, tmp_path_factory):
    node_agent = NodeAgent(apiserver, tmp_path_factory.mktemp("pod-logs"))
    node_agent.start()
    yield node_agent
    node_agent.stop()


@pytest.fixture(scope="module")
def core(apiserver) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(apiserver.kubeconfig)))


def node_object(core: client.CoreV1Api, port: int) -> str:
    """A Node whose agent is at 127.0.0.1:port, as the agent reports itself."""
    name = f"node-{uuid.uuid4().hex[:8]}"
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    core.patch_node_status(name, {"status": {"addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": "127.0.0.1"}],
                                             "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
    return name


@pytest.fixture(scope="module")
def node(core, agent) -> str:
    return node_object(core, agent.port)


@pytest.fixture
def ns(core) -> str:
    name = f"bl-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def new_pod(core, ns: str, name: str, containers=("app",), init_containers=(), **spec) -> client.V1Pod:
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers], **spec}}
    if init_containers:
        body["spec"]["initContainers"] = [{"name": c, "image": "busybox"} for c in init_containers]
    return core.create_namespaced_pod(ns, body)


def binding(pod: str, node: str) -> client.V1Binding:
    return client.V1Binding(metadata=client.V1ObjectMeta(name=pod), target=client.V1ObjectReference(kind="Node", name=node))


def bind(core, ns: str, pod: str, node: str):
    """The Python client's create_namespaced_pod_binding. Its generated model cannot read the
    Status upstream answers with (V1Binding requires ``target``), hence ``_preload_content=False``."""
    return core.create_namespaced_pod_binding(pod, ns, binding(pod, node), _preload_content=False)


def running_pod(core, agent: NodeAgent, node: str, ns: str, name: str, containers=("app",), restarts: dict | None = None,
                running: bool = True, **spec) -> str:
    """A Pod bound to the agent's node and known to the agent; returns its uid."""
    uid = new_pod(core, ns, name, containers, **spec).metadata.uid
    bind(core, ns, name, node)
    state = {"running": running}
    agent.pods[(ns, name)] = PodLogInfo(uid, {c: (restarts or {}).get(c, 0) for c in containers}, lambda c: state["running"])
    return uid


def write_log(agent: NodeAgent, ns: str, pod: str, uid: str, container: str, lines: list[bytes], restart: int = 0,
              stream: str = "stdout") -> ContainerLogFile:
    """A container log with one line a second from LOG_START."""
    clock = FakeClock(LOG_START)
    log = ContainerLogFile(container_log_path(agent.log_root, ns, pod, uid, container, restart), clock)
    for line in lines:
        log.write(stream, line)
        clock.advance(1)
    return log


def raw(apiserver, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    """One HTTPS request as the admin (client certificate): (status, body), errors included."""
    context = apiserver.tls_context()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(apiserver.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def status_of(body: bytes) -> tuple[int, str, str]:
    status = json.loads(body)
    return status["code"], status["reason"], status["message"]


# ---- discovery ------------------------------------------------------------------------------------


def test_discovery_lists_the_binding_and_log_subresources_and_bindings(apiserver):
    resources = {r["name"]: r for r in json.loads(apiserver.kubectl("get", "--raw", "/api/v1").stdout)["resources"]}
    assert resources["pods/binding"] == {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
    assert resources["pods/log"] == {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
    assert resources["bindings"] == {"name": "bindings", "singularName": "binding", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
    rows = {line.split()[0]: line.split() for line in apiserver.kubectl("api-resources", "--no-headers").stdout.splitlines()}
    assert rows["bindings"] == ["bindings", "v1", "true", "Binding"]


def test_aggregated_discovery_lists_them_as_upstream():
    core_v1 = Discovery(all_kinds(), "127.0.0.1:6443").aggregated(core=True)["items"][0]["versions"][0]["resources"]
    by_name = {r["resource"]: r for r in core_v1}
    assert by_name["bindings"] == {"resource": "bindings", "responseKind": {"group": "", "version": "v1", "kind": "Binding"},
                                   "scope": "Namespaced", "singularResource": "binding", "verbs": ["create"]}
    assert by_name["pods"]["subresources"] == [
        {"subresource": "attach", "responseKind": {"group": "", "version": "v1", "kind": "PodAttachOptions"}, "verbs": ["create", "get"]},
        {"subresource": "binding", "responseKind": {"group": "", "version": "v1", "kind": "Binding"}, "verbs": ["create"]},
        {"subresource": "eviction", "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}, "verbs": ["create"]},
        {"subresource": "exec", "responseKind": {"group": "", "version": "v1", "kind": "PodExecOptions"}, "verbs": ["create", "get"]},
        {"subresource": "log", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}, "verbs": ["get"]},
        {"subresource": "portforward", "responseKind": {"group": "", "version": "v1", "kind": "PodPortForwardOptions"},
         "verbs": ["create", "get"]},
        {"subresource": "status", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}, "verbs": ["get", "patch", "update"]},
    ]
    assert [r["resource"] for r in core_v1] == sorted(by_name)


# ---- binding ----------------------------------------------------------------------------------------


def test_python_client_binds_a_pod_and_a_second_binding_conflicts(core, ns, node):
    new_pod(core, ns, "web")
    answer = bind(core, ns, "web", node)
    assert answer.status == 201
    assert json.loads(answer.data) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    pod = core.read_namespaced_pod("web", ns)
    assert pod.spec.node_name == node
    [scheduled] = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert scheduled.status == "True" and scheduled.last_transition_time is not None
    with pytest.raises(ApiException) as again:
        bind(core, ns, "web", "elsewhere")
    assert again.value.status == 409
    body = json.loads(again.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == f'Operation cannot be fulfilled on pods/binding "web": pod web is already assigned to node "{node}"'
    assert body["details"] == {"name": "web", "kind": "pods/binding"}
    assert core.read_namespaced_pod("web", ns).spec.node_name == node


def test_kubectl_create_of_a_binding_manifest_uses_the_bindings_collection(apiserver, core, ns, node):
    """``--validate=false``: a Binding has no PATCH operation in OpenAPI v3, so kubectl wants
    to validate it against OpenAPI v2, which this server does not serve. The answer is a Status,
    as upstream's, which kubectl prints as it does against a real cluster (no name, kind status)."""
    new_pod(core, ns, "manual")
    manifest = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "manual"}, "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
    result = apiserver.kubectl("create", "--validate=false", "-n", ns, "-f", "-", input=json.dumps(manifest))
    assert result.stdout.strip() == "status/<unknown> created"
    assert core.read_namespaced_pod("manual", ns).spec.node_name == node


def test_binding_merges_annotations_and_a_watch_sees_one_change(apiserver, core, ns, node):
    new_pod(core, ns, "annotated")
    version = core.read_namespaced_pod("annotated", ns).metadata.resource_version
    status, _ = raw(apiserver, "POST", f"/api/v1/namespaces/{ns}/pods/annotated/binding",
                    {"metadata": {"name": "annotated", "annotations": {"scheduler.example/why": "test"}}, "target": {"name": node}})
    assert status == 201
    status, body = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={version}&timeoutSeconds=1")
    events = [json.loads(line) for line in body.splitlines()]
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert events[0]["object"]["metadata"]["annotations"] == {"scheduler.example/why": "test"}
    assert events[0]["object"]["spec"]["nodeName"] == node


def _delete_marked(core, ns, name):
    new_pod(core, ns, name)
    core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": ["example.com/hold"]}})
    core.delete_namespaced_pod(name, ns)


BINDING_ERRORS = [
    ("being deleted", _delete_marked, {"metadata": {"name": "p"}, "target": {"name": "n1"}}, "",
     (409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": pod p is being deleted, cannot be assigned to a host')),
    ("scheduling gates", lambda core, ns, name: new_pod(core, ns, name, schedulingGates=[{"name": "wait"}]),
     {"metadata": {"name": "p"}, "target": {"name": "n1"}}, "",
     (409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": pod p has non-empty .spec.schedulingGates')),
    ("no target name", new_pod, {"metadata": {"name": "p"}, "target": {"kind": "Node"}}, "", (500, "", "target.name: Required value")),
    ("target not a node", new_pod, {"metadata": {"name": "p"}, "target": {"kind": "Pod"}}, "",
     (500, "", '[target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>", target.name: Required value]')),
    ("name differs from the url", new_pod, {"metadata": {"name": "q"}, "target": {"name": "n1"}}, "",
     (400, "BadRequest", "name in URL does not match name in Binding object")),
    ("no such pod", lambda core, ns, name: None, {"metadata": {"name": "p"}, "target": {"name": "n1"}}, "",
     (404, "NotFound", 'pods "p" not found')),
    ("uid precondition", new_pod, {"metadata": {"name": "p", "uid": "not-the-uid"}, "target": {"name": "n1"}}, "",
     (409, "Conflict", 'Operation cannot be fulfilled on pods "p": Precondition failed: UID in precondition: not-the-uid, UID in object meta: ')),
    ("unknown field, strict", new_pod, {"metadata": {"name": "p"}, "target": {"name": "n1"}, "spec": {}}, "?fieldValidation=Strict",
     (400, "BadRequest", 'Binding in version "v1" cannot be handled as a Binding: strict decoding error: unknown field "spec"')),
]


@pytest.mark.parametrize("prepare, body, query, expected", [case[1:] for case in BINDING_ERRORS], ids=[case[0] for case in BINDING_ERRORS])
def test_binding_errors_are_upstreams(apiserver, core, ns, prepare, body, query, expected):
    prepare(core, ns, "p")
    status, answer = raw(apiserver, "POST", f"/api/v1/namespaces/{ns}/pods/p/binding{query}", body)
    code, reason, message = status_of(answer)
    assert status == code
    assert (code, reason) == expected[:2]
    assert message.startswith(expected[2]) if expected[2].endswith(": ") else message == expected[2]
    if status != 404:
        assert core.read_namespaced_pod("p", ns).spec.node_name is None


def test_binding_dry_run_changes_nothing_and_only_post_is_allowed(apiserver, core, ns):
    new_pod(core, ns, "p")
    status, _ = raw(apiserver, "POST", f"/api/v1/namespaces/{ns}/pods/p/binding?dryRun=All", {"metadata": {"name": "p"}, "target": {"name": "n1"}})
    assert status == 201
    assert core.read_namespaced_pod("p", ns).spec.node_name is None
    status, answer = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/p/binding")
    assert status == 405 and status_of(answer)[1] == "MethodNotAllowed"
    status, _ = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/bindings")
    assert status == 405


# ---- logs -------------------------------------------------------------------------------------------


def test_kubectl_logs_of_the_only_container(apiserver, core, agent, node, ns):
    uid = running_pod(core, agent, node, ns, "web")
    write_log(agent, ns, "web", uid, "app", [b"hello\n", b"wor", b"ld\n"])
    assert apiserver.kubectl("logs", "-n", ns, "web").stdout == "hello\nworld\n"


def test_kubectl_logs_container_tail_and_timestamps(apiserver, core, agent, node, ns):
    uid = running_pod(core, agent, node, ns, "two", containers=("a", "b"))
    write_log(agent, ns, "two", uid, "a", [b"from a\n"])
    write_log(agent, ns, "two", uid, "b", [b"one\n", b"two\n", b"three\n"], stream="stderr")
    assert apiserver.kubectl("logs", "-n", ns, "two", "-c", "a").stdout == "from a\n"
    assert apiserver.kubectl("logs", "-n", ns, "two", "-c", "b", "--tail=2").stdout == "two\nthree\n"
    assert apiserver.kubectl("logs", "-n", ns, "two", "-c", "b", "--tail=1", "--timestamps").stdout == "2026-01-01T00:00:02.000000000Z three\n"


def test_multi_container_pod_needs_a_container_kubectl_picks_the_first(apiserver, core, agent, node, ns):
    """The server refuses to guess; kubectl 1.32 picks the first container itself and says so."""
    uid = running_pod(core, agent, node, ns, "two", containers=("a", "b"))
    write_log(agent, ns, "two", uid, "a", [b"from a\n"])
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log("two", ns)
    assert refused.value.status == 400
    assert json.loads(refused.value.body)["message"] == "a container name must be specified for pod two, choose one of: [a b]"
    result = apiserver.kubectl("logs", "-n", ns, "two")
    assert result.stdout == "from a\n"
    assert 'Defaulted container "a" out of: a, b' in result.stderr
    result = apiserver.kubectl("logs", "-n", ns, "two", "-c", "c", check=False)
    assert result.returncode != 0
    assert "container c is not valid for pod two" in result.stderr


def test_server_names_init_containers_too(apiserver, core, ns):
    new_pod(core, ns, "init", containers=("a", "b"), init_containers=("setup",))
    status, answer = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/init/log")
    assert status_of(answer)[2] == "a container name must be specified for pod init, choose one of: [a b] or one of the init containers: [setup]"
    status, _ = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/init/log?container=setup")
    assert status == 204  # a valid container, but the Pod is on no node: nothing to show


def test_kubectl_logs_previous(apiserver, core, agent, node, ns):
    uid = running_pod(core, agent, node, ns, "again", restarts={"app": 1})
    write_log(agent, ns, "again", uid, "app", [b"before the restart\n"], restart=0)
    write_log(agent, ns, "again", uid, "app", [b"after the restart\n"], restart=1)
    assert apiserver.kubectl("logs", "-n", ns, "again").stdout == "after the restart\n"
    assert apiserver.kubectl("logs", "-n", ns, "again", "--previous").stdout == "before the restart\n"
    uid = running_pod(core, agent, node, ns, "fresh")
    write_log(agent, ns, "fresh", uid, "app", [b"first life\n"])
    result = apiserver.kubectl("logs", "-n", ns, "fresh", "--previous", check=False)
    assert result.returncode != 0
    assert 'Error from server (BadRequest): previous terminated container "app" in pod "fresh" not found' in result.stderr


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_kubectl_logs_follow_streams_until_the_container_stops(apiserver, core, agent, node, ns):
    uid = running_pod(core, agent, node, ns, "tail")
    log = write_log(agent, ns, "tail", uid, "app", [b"first\n"])
    cmd = ["kubectl", f"--kubeconfig={apiserver.kubeconfig}", f"--cache-dir={apiserver.cache_dir}", "logs", "-f", "-n", ns, "tail"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = _lines(process.stdout)
        assert lines.get(timeout=20) == "first\n"
        log.write("stdout", b"second\n")
        assert lines.get(timeout=10) == "second\n"
        assert process.poll() is None  # still following
        log.write("stderr", b"last words\n")
        agent.pods[(ns, "tail")].running = lambda container: False
        assert lines.get(timeout=10) == "last words\n"
        assert lines.get(timeout=10) is None
        assert process.wait(timeout=10) == 0, process.stderr.read()
    finally:
        process.kill()
        process.wait()


def test_a_follower_that_hangs_up_is_let_go_on_both_hops(apiserver, core, agent, node, ns):
    """kubectl killed mid-follow: the apiserver notices and drops its agent connection, the agent
    notices and stops reading the file (it stops asking whether the container still runs)."""
    uid = running_pod(core, agent, node, ns, "quiet")
    write_log(agent, ns, "quiet", uid, "app", [b"only line\n"])
    asked = []
    agent.pods[(ns, "quiet")].running = lambda container: asked.append(container) or True
    cmd = ["kubectl", f"--kubeconfig={apiserver.kubeconfig}", f"--cache-dir={apiserver.cache_dir}", "logs", "-f", "-n", ns, "quiet"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert _lines(process.stdout).get(timeout=20) == "only line\n"
        deadline = time.monotonic() + 10
        while len(asked) < 2 and time.monotonic() < deadline:  # following: it keeps asking
            time.sleep(0.1)
        assert len(asked) >= 2, "the agent never polled whether the container still runs"
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        before = len(asked)
        time.sleep(1.0)
        if len(asked) == before:
            return
    raise AssertionError("the agent is still following a log nobody reads")


def test_python_client_reads_logs(core, agent, node, ns):
    uid = running_pod(core, agent, node, ns, "py")
    write_log(agent, ns, "py", uid, "app", [b"a\n", b"b\n", b"c\n"])
    assert core.read_namespaced_pod_log("py", ns) == "a\nb\nc\n"
    assert core.read_namespaced_pod_log("py", ns, container="app", tail_lines=1) == "c\n"
    assert core.read_namespaced_pod_log("py", ns, timestamps=True, limit_bytes=33) == "2026-01-01T00:00:00.000000000Z a\n"
    with pytest.raises(ApiException) as invalid:
        core.read_namespaced_pod_log("py", ns, tail_lines=-1)
    assert invalid.value.status == 422
    assert json.loads(invalid.value.body)["message"] == 'PodLogOptions "py" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0'


LOG_OPTION_ERRORS = [
    ("both sinces", "sinceSeconds=10&sinceTime=2026-01-01T00:00:00Z",
     (422, "Invalid", 'PodLogOptions "p" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified')),
    ("zero sinceSeconds", "sinceSeconds=0", (422, "Invalid", 'PodLogOptions "p" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0')),
    ("zero limitBytes", "limitBytes=0", (422, "Invalid", 'PodLogOptions "p" is invalid: limitBytes: Invalid value: 0: must be greater than 0')),
    ("several at once", "tailLines=-2&limitBytes=-1",
     (422, "Invalid", 'PodLogOptions "p" is invalid: [tailLines: Invalid value: -2: must be greater than or equal to 0, '
                      'limitBytes: Invalid value: -1: must be greater than 0]')),
    ("not a number", "tailLines=ten", (400, "BadRequest", 'strconv.ParseInt: parsing "ten": invalid syntax')),
]


@pytest.mark.parametrize("query, expected", [case[1:] for case in LOG_OPTION_ERRORS], ids=[case[0] for case in LOG_OPTION_ERRORS])
def test_log_options_are_validated_as_upstream(apiserver, core, ns, query, expected):
    new_pod(core, ns, "p")
    status, answer = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/p/log?{query}")
    assert status == expected[0]
    assert status_of(answer) == expected


def test_log_of_a_pod_on_no_node_is_empty(apiserver, core, ns):
    new_pod(core, ns, "pending")
    assert raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/pending/log") == (204, b"")
    assert apiserver.kubectl("logs", "-n", ns, "pending").stdout == ""


AGENT_ERRORS = [
    ("container not started", {"app": 0}, "app", (400, "BadRequest", 'container "app" in pod "p" is waiting to start: ContainerCreating')),
    ("agent does not know the container", {"app": 0}, "side",
     (404, "NotFound", "the server could not find the requested resource ( pods/log p)")),
]


@pytest.mark.parametrize("restarts, container, expected", [case[1:] for case in AGENT_ERRORS], ids=[case[0] for case in AGENT_ERRORS])
def test_agent_errors_reach_the_client_as_upstream_words_them(apiserver, core, agent, node, ns, restarts, container, expected):
    running_pod(core, agent, node, ns, "p", containers=("app", "side"))
    agent.pods[(ns, "p")].restart_counts = restarts
    status, answer = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/p/log?container={container}")
    assert status == expected[0]
    assert status_of(answer) == expected


def test_unreachable_agent_is_a_dial_error(apiserver, core, ns):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    node = node_object(core, closed_port)
    new_pod(core, ns, "lost")
    bind(core, ns, "lost", node)
    result = apiserver.kubectl("logs", "-n", ns, "lost", "--tail=3", check=False)
    assert result.returncode != 0
    url = f"https://127.0.0.1:{closed_port}/containerLogs/{ns}/lost/app?tailLines=3"
    assert f'Error from server: Get "{url}": dial tcp 127.0.0.1:{closed_port}: connect: connection refused' in result.stderr


def test_node_without_a_kubelet_port_is_an_error(apiserver, core, ns):
    node = node_object(core, 0)
    new_pod(core, ns, "portless")
    bind(core, ns, "portless", node)
    status, answer = raw(apiserver, "GET", f"/api/v1/namespaces/{ns}/pods/portless/log")
    assert status == 500
    assert "reports no kubelet port" in status_of(answer)[2]


def agent_get(apiserver, agent: NodeAgent, path: str, client: pki.KeyPair | None = None, headers: dict | None = None) -> tuple[int, str]:
    """One HTTPS GET to the agent, verifying its certificate against the cluster CA, presenting
    ``client`` if given: (status, body)."""
    context = ssl.create_default_context(cafile=str(apiserver.ca_file))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    request = urllib.request.Request(f"https://127.0.0.1:{agent.port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_agent_serves_its_node_certificate_from_the_cluster_ca(apiserver, agent):
    context = ssl.create_default_context(cafile=str(apiserver.ca_file))
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as raw_sock, \
            context.wrap_socket(raw_sock, server_hostname="127.0.0.1") as tls:
        peer = tls.getpeercert()
    assert dict(x[0] for x in peer["subject"]) == {"organizationName": "system:nodes", "commonName": "system:node:log-node"}
    assert ("IP Address", "127.0.0.1") in peer["subjectAltName"]


@pytest.mark.parametrize("credential, headers", [
    (None, {}),
    (None, {"Authorization": "Bearer wrong"}),
    ("token", {}),
], ids=["nothing", "a-wrong-token", "a-token-the-apiserver-accepts"])
def test_agent_refuses_callers_without_a_client_certificate(apiserver, agent, ns, credential, headers):
    if credential == "token":
        apiserver.kubectl("-n", ns, "create", "serviceaccount", "caller")
        headers = {"Authorization": f"Bearer {apiserver.kubectl('-n', ns, 'create', 'token', 'caller').stdout.strip()}"}
        assert apiserver.session(admin=False).get(apiserver.url + "/apis", headers=headers, timeout=10).status_code == 200
    for path in ("/healthz", "/containerLogs/ns/p/c"):
        assert agent_get(apiserver, agent, path, headers=headers) == (401, "Unauthorized")


def test_agent_forbids_a_certificate_that_is_not_the_apiservers(apiserver, agent):
    proxy = apiserver.ca.client("kube-proxy", pki.PROXY)
    assert agent_get(apiserver, agent, "/containerLogs/ns/p/c", proxy) == (
        403, "Forbidden (user=system:kube-proxy, verb=get, resource=nodes, subresource(s)=[proxy])\n")


def test_agent_admits_the_apiservers_kubelet_client(apiserver, agent):
    kubelet_client = apiserver.ca.client("apiserver-kubelet-client", pki.KUBELET_CLIENT)
    assert agent_get(apiserver, agent, "/healthz", kubelet_client) == (200, "ok")


def test_agent_handshake_fails_for_a_certificate_of_another_ca(apiserver, agent, tmp_path):
    stranger = pki.ClusterCA(tmp_path / "other-pki").client("kube-apiserver-kubelet-client", pki.KUBELET_CLIENT)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        status, _ = agent_get(apiserver, agent, "/healthz", stranger)
        raise AssertionError(f"answered {status}")


class PlainHTTPDecoy:
    """A plain-HTTP listener posing as a node's agent: it records every byte it is sent and
    answers like an HTTP server would."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                conn.settimeout(5)
                try:
                    chunk = conn.recv(65536)
                    self.received += chunk
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    while chunk:
                        chunk = conn.recv(65536)
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_a_plain_http_listener_posing_as_a_node_receives_no_credential(apiserver, core, ns):
    decoy = PlainHTTPDecoy()
    try:
        node = node_object(core, decoy.port)
        new_pod(core, ns, "decoyed")
        bind(core, ns, "decoyed", node)
        result = apiserver.kubectl("logs", "-n", ns, "decoyed", check=False)
    finally:
        decoy.close()
    assert result.returncode != 0
    url = f"https://127.0.0.1:{decoy.port}/containerLogs/{ns}/decoyed/app"
    assert f'Error from server: Get "{url}": http: server gave HTTP response to HTTPS client' in result.stderr
    received = bytes(decoy.received)
    assert decoy.connections >= 1 and received[:1] == b"\x16", received[:64]  # a TLS handshake record, not an HTTP request
    kubelet_client = x509.load_pem_x509_certificate(apiserver.ca.client("apiserver-kubelet-client", pki.KUBELET_CLIENT).cert.read_bytes())
    admin = x509.load_pem_x509_certificate(Path(apiserver.admin_cert[0]).read_bytes())
    for secret in (b"Authorization", b"Bearer", b"containerLogs", b"kube-apiserver-kubelet-client",
                   kubelet_client.public_bytes(serialization.Encoding.DER), admin.public_bytes(serialization.Encoding.DER)):
        assert secret not in received
