"""Probes as the kubelet runs them: the worker's thresholds and holds (upstream
``prober/worker_test.go``, ported case by case), ports, URLs and headers (``probe/util_test.go``,
``probe/http/request_test.go``), and real checks: HTTP and TCP against servers on 127.0.0.1,
exec inside a network namespace this module creates (``ks-test-<random>``) and deletes.
Expected values are written out by hand from upstream."""

import asyncio
import json
import socket
import time

import pytest
from aiohttp import web

from kubesvc.agent.probes import (
    USER_AGENT, CheckOutcome, CheckResult, ExecAction, GRPCAction, HTTPGetAction, ProbeError, ProbeResult, ProbeSpec,
    ProbeTracker, TCPSocketAction, format_url, next_check_at, probe_event, probe_exec, probe_http, probe_tcp, request_headers,
    resolve_port, run_check, run_probe, worker_result,
)
from kubesvc.serving.pki import ephemeral_serving_context
from tests.support.netns import Netns, netns_pids

S, F, U = ProbeResult.SUCCESS, ProbeResult.FAILURE, ProbeResult.UNKNOWN

# ---- the spec ---------------------------------------------------------------------------------


def test_probe_spec_defaults():
    spec = ProbeSpec.from_dict({"httpGet": {"port": 8080}})
    assert spec == ProbeSpec(http_get=HTTPGetAction(port=8080, path="/", host="", scheme="HTTP", headers=()),
                             initial_delay_seconds=0, timeout_seconds=1, period_seconds=10, success_threshold=1,
                             failure_threshold=3, termination_grace_period_seconds=None)


def test_probe_spec_zero_values_take_defaults_and_the_rest_is_kept():
    spec = ProbeSpec.from_dict({
        "exec": {"command": ["cat", "/tmp/healthy"]}, "initialDelaySeconds": 5, "timeoutSeconds": 0, "periodSeconds": 0,
        "successThreshold": 0, "failureThreshold": 0, "terminationGracePeriodSeconds": 7,
    })
    assert spec == ProbeSpec(exec_action=ExecAction(("cat", "/tmp/healthy")), initial_delay_seconds=5, timeout_seconds=1,
                             period_seconds=10, success_threshold=1, failure_threshold=3, termination_grace_period_seconds=7)


def test_probe_spec_handlers():
    spec = ProbeSpec.from_dict({
        "httpGet": {"port": "http", "path": "/healthz", "host": "10.0.0.1", "scheme": "HTTPS",
                    "httpHeaders": [{"name": "X-A", "value": "1"}, {"name": "X-A", "value": "2"}]},
        "tcpSocket": {"port": 5432, "host": "db"}, "grpc": {"port": 9000, "service": "health"},
        "periodSeconds": 3, "successThreshold": 2, "failureThreshold": 6, "timeoutSeconds": 4,
    })
    assert spec.http_get == HTTPGetAction(port="http", path="/healthz", host="10.0.0.1", scheme="HTTPS",
                                          headers=(("X-A", "1"), ("X-A", "2")))
    assert spec.tcp_socket == TCPSocketAction(port=5432, host="db")
    assert spec.grpc == GRPCAction(port=9000, service="health")
    assert (spec.period_seconds, spec.success_threshold, spec.failure_threshold, spec.timeout_seconds) == (3, 2, 6, 4)


# ---- ports (util_test.go TestResolveContainerPort, TestFindPortByName) ------------------------

FOO_BAR_PORTS = {"ports": [{"name": "foo", "containerPort": 8080}, {"name": "bar", "containerPort": 9000}]}


@pytest.mark.parametrize("port,container,expected", [
    (443, {}, 443),
    ("foo", FOO_BAR_PORTS, 8080),
    ("bar", FOO_BAR_PORTS, 9000),
    ("8080", {}, 8080),
    ("+81", {}, 81),
], ids=["get port by int type", "get port by port name", "second port name", "a number written as a string",
        "Atoi takes a sign"])
def test_resolve_port(port, container, expected):
    assert resolve_port(port, container) == expected


@pytest.mark.parametrize("port,container,message", [
    (66666, {}, "invalid port number: 66666"),
    (0, {}, "invalid port number: 0"),
    ("foo", {"ports": [{"name": "bar", "containerPort": 9000}]}, 'strconv.Atoi: parsing "foo": invalid syntax'),
    ("http", FOO_BAR_PORTS, 'strconv.Atoi: parsing "http": invalid syntax'),
    ("70000", {}, "invalid port number: 70000"),
    ("99999999999999999999", {}, 'strconv.Atoi: parsing "99999999999999999999": value out of range'),
    (None, {}, "intOrString had no kind: None"),
], ids=["invalid port", "zero", "no port name", "get port from not exist port name", "string number out of range",
        "Atoi overflow", "invalid param type"])
def test_resolve_port_errors(port, container, message):
    with pytest.raises(ProbeError) as err:
        resolve_port(port, container)
    assert str(err.value) == message


# ---- URLs and headers (request_test.go) -------------------------------------------------------


@pytest.mark.parametrize("scheme,host,port,path,expected", [
    ("http", "localhost", 93, "", "http://localhost:93"),
    ("https", "localhost", 93, "/path", "https://localhost:93/path"),
    ("http", "localhost", 93, "?foo", "http://localhost:93?foo"),
    ("https", "localhost", 93, "/path?bar", "https://localhost:93/path?bar"),
    ("http", "fd00::1", 8080, "/healthz", "http://[fd00::1]:8080/healthz"),
    ("http", "10.0.0.1", 80, "healthz", "http://10.0.0.1:80/healthz"),
], ids=["empty path", "path", "query only", "path and query", "IPv6 host", "relative path"])
def test_format_url(scheme, host, port, path, expected):
    assert format_url(scheme, host, port, path) == expected


DEFAULTS = [("User-Agent", USER_AGENT), ("Accept", "*/*")]


@pytest.mark.parametrize("given,expected", [
    ([("Connection", "Keep-Alive"), ("Content-Type", "text/html"), ("Accept-Ranges", "bytes")],
     [("Connection", "Keep-Alive"), ("Content-Type", "text/html"), ("Accept-Ranges", "bytes"), *DEFAULTS]),
    ([("HOST", "example.com"), ("FOO-bAR", "value")], [("Host", "example.com"), ("Foo-Bar", "value"), *DEFAULTS]),
    ([], DEFAULTS),
    ([("user-agent", "foo/1.0")], [("User-Agent", "foo/1.0"), ("Accept", "*/*")]),
    ([("User-Agent", "")], [("Accept", "*/*")]),
    ([("accept", "text/plain")], [("Accept", "text/plain"), ("User-Agent", USER_AGENT)]),
    ([("Accept", "")], [("User-Agent", USER_AGENT)]),
    ([("X-Multi", "1"), ("x-multi", "2")], [("X-Multi", "1"), ("X-Multi", "2"), *DEFAULTS]),
    ([("Bad Name", "v")], [("Bad Name", "v"), *DEFAULTS]),
], ids=["not empty input", "case insensitive", "empty input", "user agent overridden", "empty user agent not sent",
        "accept overridden", "empty accept not sent", "repeated header", "non-token name kept as written"])
def test_request_headers(given, expected):
    assert request_headers(given) == expected


# ---- the worker (worker_test.go) --------------------------------------------------------------


def tracker(kind, **spec):
    return ProbeTracker(kind, ProbeSpec(exec_action=ExecAction(("true",)), **spec))


def feed(t, results):
    """Observe each result; what the tracker reports after each."""
    reported = []
    for result in results:
        t.observe(result)
        reported.append(t.result)
    return reported


def test_initial_results():
    assert [tracker(kind).result for kind in ("readiness", "liveness", "startup")] == [F, S, U]


def test_failure_threshold():
    """TestFailureThreshold: readiness, successThreshold 1, failureThreshold 3, twice over."""
    t = tracker("readiness", success_threshold=1, failure_threshold=3)
    for _ in range(2):
        assert feed(t, [S, S, S]) == [S, S, S]
        assert feed(t, [F, F]) == [S, S]  # next 2 probes should still be "success"
        assert feed(t, [F, F, F]) == [F, F, F]  # third & following fail


def test_success_threshold():
    """TestSuccessThreshold: readiness, successThreshold 3, failureThreshold 1, twice over."""
    t = tracker("readiness", success_threshold=3, failure_threshold=1)
    for _ in range(2):
        assert feed(t, [S, S]) == [F, F]
        assert feed(t, [S, S, S]) == [S, S, S]
        assert feed(t, [F]) == [F]  # prober flakes


def test_startup_probe_success_threshold():
    """TestStartupProbeSuccessThreshold: once successThreshold is met the worker holds."""
    t = tracker("startup", success_threshold=1, failure_threshold=3)
    assert not t.on_hold
    assert feed(t, [S]) == [S]
    assert (t.on_hold, t.result_run) == (True, 0)


def test_startup_probe_failure_threshold():
    """TestStartupProbeFailureThreshold: Unknown until failureThreshold, then Failure and hold."""
    t = tracker("startup", success_threshold=1, failure_threshold=3)
    runs = []
    for _ in range(3):
        assert not t.on_hold
        t.observe(F)
        runs.append((t.result, t.result_run))
    assert runs == [(U, 1), (U, 2), (F, 0)]
    assert (t.on_hold, t.result_run) == (True, 0)


@pytest.mark.parametrize("kind,on_hold_after_success", [("liveness", False), ("startup", True)])
def test_on_hold_on_liveness_or_startup_check_failure(kind, on_hold_after_success):
    """TestOnHoldOnLivenessOrStartupCheckFailure."""
    t = tracker(kind, success_threshold=1, failure_threshold=1)
    assert t.observe(F) is True
    assert (t.result, t.on_hold) == (F, True)
    assert t.observe(S) is False  # while on hold
    assert (t.result, t.on_hold) == (F, True)
    t.reset()  # a new container ID lifts the hold
    t.observe(S)
    assert (t.result, t.on_hold) == (S, on_hold_after_success)


def test_result_run_on_liveness_check_failure():
    """TestResultRunOnLivenessCheckFailure: a reported failure restarts the run at 0, so the
    restarted container gets failureThreshold attempts again."""
    t = tracker("liveness", success_threshold=1, failure_threshold=3)
    steps = []
    for result in (S, F, F, F):
        t.observe(result)
        steps.append((t.result, t.result_run))
    assert steps == [(S, 1), (S, 1), (S, 2), (F, 0)]


def test_result_run_on_startup_check_failure():
    """TestResultRunOnStartupCheckFailure."""
    t = tracker("startup", success_threshold=1, failure_threshold=3)
    steps = []
    for result in (F, F, F):
        t.observe(result)
        steps.append((t.result, t.result_run))
    assert steps == [(U, 1), (U, 2), (F, 0)]


@pytest.mark.parametrize("kind,initial", [("liveness", S), ("readiness", F), ("startup", U)])
def test_initial_delay(kind, initial):
    """TestInitialDelay: nothing is due during initialDelaySeconds; then the probe reports."""
    t = tracker(kind, initial_delay_seconds=10)
    started = kind != "startup"
    assert t.due(now=1000.0, container_started_at=1000.0, started=started) is False
    assert t.result is initial
    assert t.due(now=1100.0, container_started_at=1000.0, started=started) is True
    t.observe(S)
    assert t.result is S


def test_liveness_probe_disabled_by_started():
    """TestLivenessProbeDisabledByStarted: liveness is not due until the container started."""
    t = tracker("liveness", success_threshold=1, failure_threshold=1)
    assert t.due(now=50.0, container_started_at=0.0, started=False) is False
    assert t.result is S
    assert t.due(now=50.0, container_started_at=0.0, started=True) is True
    t.observe(F)
    assert t.result is F


def test_startup_probe_disabled_by_started():
    """TestStartupProbeDisabledByStarted."""
    t = tracker("startup", success_threshold=1, failure_threshold=2)
    assert feed(t, [F]) == [U]
    assert feed(t, [S]) == [S]
    assert t.due(now=50.0, container_started_at=0.0, started=True) is False


@pytest.mark.parametrize("kind,expected_changed", [("liveness", True), ("readiness", True), ("startup", True)])
def test_container_not_running_reports_failure(kind, expected_changed):
    """TestDoProbe "Container waiting" / "Container terminated": the worker sets Failure."""
    t = tracker(kind)
    t.result = S
    assert t.container_not_running() is expected_changed
    assert t.result is F


@pytest.mark.parametrize("kind,expected", [("liveness", S), ("startup", S), ("readiness", F)])
def test_pod_deletion(kind, expected):
    """TestDoProbe "Pod deletion": liveness and startup report Success and stop; readiness goes on."""
    t = tracker(kind)
    t.result = F
    t.pod_deletion_requested()
    assert t.result is expected
    assert t.due(now=100.0, container_started_at=0.0, started=kind != "startup") is (kind == "readiness")


def test_errored_checks_count_for_nothing():
    t = tracker("readiness", success_threshold=1, failure_threshold=2)
    assert feed(t, [F, U, U, F]) == [F, F, F, F]
    assert t.result_run == 2
    t2 = tracker("readiness", success_threshold=2, failure_threshold=1)
    assert feed(t2, [S, U, S]) == [F, F, S]


def test_observe_says_when_the_report_changed():
    t = tracker("readiness", success_threshold=1, failure_threshold=2)
    assert [t.observe(r) for r in (S, S, F, F, F, S)] == [True, False, False, True, False, True]


def test_due_follows_the_period_and_truncates_the_initial_delay():
    t = tracker("readiness", initial_delay_seconds=5, period_seconds=10)
    assert t.due(now=4.99, container_started_at=0.0) is False  # int32(4.99 s) = 4 < 5
    assert t.due(now=5.0, container_started_at=0.0) is True
    t.observe(S, at=5.0)
    assert t.due(now=14.9, container_started_at=0.0) is False
    assert t.due(now=15.0, container_started_at=0.0) is True
    t.reset()  # a new container: due as soon as its own delay has passed
    assert t.due(now=20.0, container_started_at=15.0) is True


# ---- from a check to the worker and its events (prober.go) ------------------------------------


@pytest.mark.parametrize("kind,outcome,result,event", [
    ("readiness", CheckOutcome(CheckResult.SUCCESS, "ok"), S, None),
    ("readiness", CheckOutcome(CheckResult.WARNING, "Probe terminated redirects, Response body: moved"), S,
     ("ProbeWarning", "Readiness probe warning: Probe terminated redirects, Response body: moved")),
    ("liveness", CheckOutcome(CheckResult.FAILURE, "HTTP probe failed with statuscode: 500"), F,
     ("Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500")),
    ("liveness", CheckOutcome(CheckResult.UNKNOWN, ""), F, None),
    ("startup", CheckOutcome(CheckResult.UNKNOWN, "", 'strconv.Atoi: parsing "http": invalid syntax'), U,
     ("Unhealthy", 'Startup probe errored and resulted in unknown state: strconv.Atoi: parsing "http": invalid syntax')),
    ("readiness", CheckOutcome(CheckResult.FAILURE, "", "context deadline exceeded"), U,
     ("Unhealthy", "Readiness probe errored and resulted in failure state: context deadline exceeded")),
], ids=["success", "warning is a success", "failure", "unknown without error is a failure", "error is thrown away",
        "error with a failure result"])
def test_worker_result_and_event(kind, outcome, result, event):
    assert worker_result(outcome) is result
    assert probe_event(kind, outcome) == event


# ---- HTTP checks against a real server ---------------------------------------------------------


class HTTPServer:
    def __init__(self, port, hits):
        self.port = port
        self.hits = hits

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"


async def _serve(app, ssl_context=None):
    runner = web.AppRunner(app, shutdown_timeout=0.2, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    return runner, runner.addresses[0][1]


def _app(hits):
    async def ok(request):
        hits[request.path] = hits.get(request.path, 0) + 1
        return web.Response(text="ok body")

    async def status(request):
        code = int(request.match_info["code"])
        return web.Response(status=code, text="boom" if code >= 400 else None)

    async def redirect(request):
        hits[request.path] = hits.get(request.path, 0) + 1
        target = request.query["to"].replace("PORT", str(request.url.port))
        return web.Response(status=int(request.query.get("code", "302")), headers={"Location": target}, text="elsewhere")

    async def loop(request):
        hits[request.path] = hits.get(request.path, 0) + 1
        return web.Response(status=302, headers={"Location": "/loop"})

    async def slow(request):
        await asyncio.sleep(3)
        return web.Response(text="late")

    async def slow_body(request):
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"partial")
        await asyncio.sleep(3)
        return response

    async def big(request):
        return web.Response(body=b"x" * 20000)

    async def echo(request):
        return web.json_response({"headers": list(request.headers.items()), "query": request.query_string})

    app = web.Application()
    app.add_routes([web.get("/ok", ok), web.get("/status/{code}", status), web.get("/redirect", redirect),
                    web.get("/loop", loop),
                    web.get("/slow", slow), web.get("/slow-body", slow_body), web.get("/big", big), web.get("/echo", echo)])
    return app


@pytest.fixture
async def http_server():
    hits = {}
    runner, port = await _serve(_app(hits))
    yield HTTPServer(port, hits)
    await runner.cleanup()


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(path, port="PORT", **kw):
    return HTTPGetAction(port=port, path=path, **kw)


async def check_http(server, action, timeout=1.0, container=None):
    if action.port == "PORT":
        action = HTTPGetAction(port=server.port, path=action.path, host=action.host, scheme=action.scheme,
                               headers=action.headers)
    return await probe_http(action, pod_ip="127.0.0.1", container=container or {}, timeout=timeout)


@pytest.mark.parametrize("path,expected", [
    ("/ok", CheckOutcome(CheckResult.SUCCESS, "ok body")),
    ("/status/204", CheckOutcome(CheckResult.SUCCESS, "")),
    ("/status/404", CheckOutcome(CheckResult.FAILURE, "HTTP probe failed with statuscode: 404")),
    ("/status/500", CheckOutcome(CheckResult.FAILURE, "HTTP probe failed with statuscode: 500")),
    ("/status/304", CheckOutcome(CheckResult.WARNING, "Probe terminated redirects, Response body: ")),
    ("/redirect?to=/ok&code=301", CheckOutcome(CheckResult.SUCCESS, "ok body")),
    ("/redirect?to=http://127.0.0.1:PORT/ok&code=307", CheckOutcome(CheckResult.SUCCESS, "ok body")),
    ("/redirect?to=http://localhost:PORT/ok&code=302",
     CheckOutcome(CheckResult.WARNING, "Probe terminated redirects, Response body: elsewhere")),
    ("/loop", CheckOutcome(CheckResult.FAILURE, 'Get "/loop": stopped after 10 redirects')),
], ids=["200", "204", "404", "500", "304 not followed", "301 to the same host followed",
        "307 to the same host by absolute URL followed", "302 to another host not followed",
        "redirect loop stops after 10"])
async def test_http_probe(http_server, path, expected):
    assert await check_http(http_server, get(path)) == expected


async def test_http_probe_redirect_loop_sends_ten_requests(http_server):
    await check_http(http_server, get("/loop"))
    assert http_server.hits["/loop"] == 10


async def test_http_probe_refused():
    port = closed_port()
    outcome = await probe_http(get("/", port=port), pod_ip="127.0.0.1", container={}, timeout=1.0)
    assert outcome == CheckOutcome(CheckResult.FAILURE,
                                   f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: connect: connection refused')


async def test_http_probe_timeout_awaiting_headers(http_server):
    began = time.monotonic()
    outcome = await check_http(http_server, get("/slow"), timeout=1.0)
    assert time.monotonic() - began < 2.5
    assert outcome == CheckOutcome(CheckResult.FAILURE, f'Get "{http_server.url("/slow")}": context deadline exceeded '
                                                        "(Client.Timeout exceeded while awaiting headers)")


async def test_http_probe_timeout_reading_body_is_an_error(http_server):
    outcome = await check_http(http_server, get("/slow-body"), timeout=1.0)
    assert outcome == CheckOutcome(CheckResult.FAILURE, "",
                                   "context deadline exceeded (Client.Timeout or context cancellation while reading body)")
    assert worker_result(outcome) is U


async def test_http_probe_reads_at_most_10_kib(http_server):
    outcome = await check_http(http_server, get("/big"))
    assert outcome == CheckOutcome(CheckResult.SUCCESS, "x" * 10240)


async def test_http_probe_request_headers(http_server):
    action = get("/echo?a=1", headers=(("x-custom", "v"), ("Host", "probe.example")))
    outcome = await check_http(http_server, action)
    seen = json.loads(outcome.output)
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert seen["query"] == "a=1"
    assert headers["user-agent"] == "kube-probe/1.32"
    assert headers["accept"] == "*/*"
    assert headers["x-custom"] == "v"
    assert headers["host"] == "probe.example"
    assert "accept-encoding" not in headers


async def test_http_probe_named_port(http_server):
    container = {"ports": [{"name": "http", "containerPort": http_server.port}]}
    outcome = await check_http(http_server, get("/ok", port="http"), container=container)
    assert outcome == CheckOutcome(CheckResult.SUCCESS, "ok body")


async def test_http_probe_unknown_port_name_errors():
    result, message = await run_probe(ProbeSpec.from_dict({"httpGet": {"port": "metrics"}}), pod_ip="127.0.0.1",
                                      container={"name": "c"}, env={}, netns=None)
    assert (result, message) == (U, 'strconv.Atoi: parsing "metrics": invalid syntax')


async def test_http_probe_unsupported_scheme():
    outcome = await probe_http(get("/", port=1, scheme="FTP"), pod_ip="127.0.0.1", container={}, timeout=1.0)
    assert outcome == CheckOutcome(CheckResult.FAILURE, 'Get "ftp://127.0.0.1:1/": unsupported protocol scheme "ftp"')


async def test_https_probe_does_not_verify_the_certificate():
    runner, port = await _serve(_app({}), ssl_context=ephemeral_serving_context("probe-test", "127.0.0.1"))
    try:
        outcome = await probe_http(get("/ok", port=port, scheme="HTTPS"), pod_ip="127.0.0.1", container={}, timeout=2.0)
    finally:
        await runner.cleanup()
    assert outcome == CheckOutcome(CheckResult.SUCCESS, "ok body")


async def test_run_probe_http_defaults_host_to_pod_ip(http_server):
    spec = ProbeSpec.from_dict({"httpGet": {"port": http_server.port, "path": "/status/503"}})
    assert await run_probe(spec, pod_ip="127.0.0.1", container={}, env={}, netns=None) == (F, "HTTP probe failed with statuscode: 503")


# ---- TCP checks --------------------------------------------------------------------------------


async def test_tcp_probe_open():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        outcome = await probe_tcp(TCPSocketAction(port=port), pod_ip="127.0.0.1", container={}, timeout=1.0)
    finally:
        server.close()
        await server.wait_closed()
    assert outcome == CheckOutcome(CheckResult.SUCCESS, "")


async def test_tcp_probe_closed():
    port = closed_port()
    outcome = await probe_tcp(TCPSocketAction(port=port), pod_ip="127.0.0.1", container={}, timeout=1.0)
    assert outcome == CheckOutcome(CheckResult.FAILURE, f"dial tcp 127.0.0.1:{port}: connect: connection refused")


async def test_tcp_probe_timeout():
    """A listener whose accept queue is full drops further SYNs: the connect hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(2):  # backlog 0 still queues one; fill it
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await asyncio.sleep(0.1)
        began = time.monotonic()
        outcome = await probe_tcp(TCPSocketAction(port=port), pod_ip="127.0.0.1", container={}, timeout=1.0)
        assert time.monotonic() - began < 2.5
    finally:
        for sock in (*fillers, listener):
            sock.close()
    assert outcome == CheckOutcome(CheckResult.FAILURE, f"dial tcp 127.0.0.1:{port}: i/o timeout")


# ---- exec checks in a network namespace (kernel tests: tests/support/netns.py) ----------------


@pytest.fixture(scope="module")
def netns():
    ns = Netns.create("probes")
    try:
        yield ns.name
    finally:
        ns.close()


@pytest.mark.parametrize("command,env,expected", [
    (["sh", "-c", "exit 1"], {}, CheckOutcome(CheckResult.FAILURE, "")),
    (["sh", "-c", "echo out; echo err >&2; exit 3"], {}, CheckOutcome(CheckResult.FAILURE, "out\nerr\n")),
    (["sh", "-c", "echo healthy"], {}, CheckOutcome(CheckResult.SUCCESS, "healthy\n")),
    (["sh", "-c", "echo $GREETING"], {"GREETING": "hi"}, CheckOutcome(CheckResult.SUCCESS, "hi\n")),
    (["sh", "-c", "ip -o link show | cut -d: -f2"], {}, CheckOutcome(CheckResult.SUCCESS, " lo\n")),
    (["sh", "-c", "head -c 20000 /dev/zero | tr '\\0' x"], {}, CheckOutcome(CheckResult.SUCCESS, "x" * 10240)),
    (["no-such-binary"], {}, CheckOutcome(CheckResult.UNKNOWN, "", 'exec: "no-such-binary": executable file not found in $PATH')),
], ids=["exit 1", "combined output of a failure", "exit 0", "container environment", "inside the namespace: only lo",
        "output cut at 10 KiB", "missing executable is an error"])
@pytest.mark.kernel
async def test_exec_probe(netns, command, env, expected):
    assert await probe_exec(command, env=env, netns=netns, timeout=5.0) == expected


@pytest.mark.kernel
async def test_exec_probe_timeout_kills_the_command(netns):
    began = time.monotonic()
    outcome = await probe_exec(["sleep", "5"], env={}, netns=netns, timeout=1.0)
    assert time.monotonic() - began < 3
    assert outcome == CheckOutcome(CheckResult.FAILURE, 'command "sleep 5" timed out')
    assert netns_pids(netns) == []


@pytest.mark.kernel
async def test_exec_probe_timeout_kills_what_the_command_started(netns):
    outcome = await probe_exec(["sh", "-c", "sleep 30 & sleep 30"], env={}, netns=netns, timeout=1.0)
    assert outcome == CheckOutcome(CheckResult.FAILURE, 'command "sh -c sleep 30 & sleep 30" timed out')
    assert netns_pids(netns) == []


@pytest.mark.parametrize("command,expected", [
    (["sh", "-c", "exit $(CODE)"], (F, "")),
    (["sh", "-c", "test -z '$(POD_NAME)' && test \"$POD_NAME\" = web-0"], (S, "")),
    (["sh", "-c", "echo '$$(CODE)'"], (S, "$(CODE)\n")),
], ids=["static env values expand", "valueFrom variables expand empty, the process still has them", "escaped"])
@pytest.mark.kernel
async def test_run_probe_exec_expands_only_static_env(netns, command, expected):
    """ExpandContainerCommandOnlyStatic: $(VAR) in an exec probe sees the container's literal
    env values only; the command runs with the full environment."""
    container = {"name": "c", "env": [{"name": "CODE", "value": "3"},
                                      {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}
    spec = ProbeSpec.from_dict({"exec": {"command": command}, "timeoutSeconds": 5})
    assert await run_probe(spec, pod_ip="", container=container, env={"CODE": "3", "POD_NAME": "web-0"}, netns=netns) == expected


# ---- handlers kubesvc lacks --------------------------------------------------------------------


async def test_grpc_probe_fails():
    outcome = await run_check(ProbeSpec.from_dict({"grpc": {"port": 9000}}), pod_ip="127.0.0.1", container={}, env={}, netns=None)
    assert outcome == CheckOutcome(CheckResult.FAILURE, "gRPC probe on port 9000 unsupported: kubesvc has no gRPC health client")


async def test_missing_handler_errors():
    assert await run_probe(ProbeSpec.from_dict({}), pod_ip="", container={"name": "c"}, env={}, netns=None) == (
        U, "missing probe handler for container c")


# ---- the worker's cadence (worker.go: a time.Ticker of periodSeconds) ----------------------------


@pytest.mark.parametrize("last_started, now, expected", [
    (0.0, 0.3, 1.0),  # a 300 ms check does not stretch a 1 s period to 1.3 s
    (1.0, 1.0, 2.0),  # an instant check on a tick: the next tick
    (2.9999999999, 3.01, 4.0),  # started on tick 3 (float error): the next is tick 4, not 3 again
    (1.0, 2.5, 2.5),  # the check outlasted tick 2: that tick is kept, the next check starts at once
    (0.0, 2.2, 2.2),  # ticks 1 and 2 passed during it: one is kept, the other dropped
    (2.2, 2.3, 3.0),  # after the late check, back on the grid
    (0.4, 0.5, 1.0),  # a check off the grid (waited for the container to start): the next tick
])
def test_next_check_keeps_the_ticker_cadence(last_started, now, expected):
    assert next_check_at(0.0, 1.0, last_started, now) == pytest.approx(expected)


def test_next_check_grid_starts_at_the_origin():
    assert next_check_at(100.0, 10.0, 100.0, 100.02) == pytest.approx(110.0)
    assert next_check_at(100.0, 10.0, 110.0, 113.0) == pytest.approx(120.0)
