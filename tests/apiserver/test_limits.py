"""Slow clients and too many requests, against a real apiserver over TLS (issue 15, Deliver 1).

The server runs with short timeouts and in-flight limits of 1 (flags), and the tests hold
requests in flight deterministically: a POST whose body is half-sent keeps its handler waiting,
and so its slot taken.

* half-sent or trickled headers, and a connection that never starts TLS, are dropped after
  ``--read-header-timeout``; an idle keep-alive connection after ``--idle-connection-timeout``;
  a connection in use is kept;
* over ``--max-mutating-requests-inflight``: 429, ``Retry-After: 1``, upstream's words; reads
  have their own bucket; ``system:masters`` is always served; a watch takes no slot.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from urllib.parse import urlparse

import pytest
import requests

from tests.support.slowdown import scaled

HEADER_TIMEOUT, IDLE_TIMEOUT = 1.0, 2.5


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    from tests.support.apiserver import running_apiserver

    with running_apiserver(tmp_path_factory.mktemp("limited"), f"--read-header-timeout={HEADER_TIMEOUT}s",
                           f"--idle-connection-timeout={IDLE_TIMEOUT}s", "--max-requests-inflight=1",
                           "--max-mutating-requests-inflight=1") as server:
        yield server


def address(server) -> tuple[str, int]:
    url = urlparse(server.url)
    return url.hostname, url.port


def tls_connection(server, *, admin: bool = False) -> ssl.SSLSocket:
    """A TLS connection to ``server``, anonymous or (``admin``) with the admin's client certificate."""
    context = server.tls_context(admin=admin)
    return context.wrap_socket(socket.create_connection(address(server)), server_hostname=address(server)[0])


def seconds_until_closed(sock: socket.socket, limit: float) -> float:
    """Read until the server closes the connection; how long that took."""
    started = time.monotonic()
    sock.settimeout(limit)
    with contextlib.suppress(ssl.SSLError, ConnectionError):
        while sock.recv(65536):
            pass
    return time.monotonic() - started


def http_request(method: str, path: str, body: bytes = b"", content_length: int | None = None) -> bytes:
    headers = [f"{method} {path} HTTP/1.1", "Host: kubesvc", "Content-Type: application/json",
               f"Content-Length: {len(body) if content_length is None else content_length}"]
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def response_of(sock: ssl.SSLSocket) -> tuple[int, dict, bytes]:
    """Status, headers and body of one response on ``sock`` (Content-Length framed)."""
    sock.settimeout(scaled(10))
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


# ---- connections --------------------------------------------------------------------------------


def test_half_sent_headers_are_closed_after_the_header_timeout(limited):
    sock = tls_connection(limited)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: kubesvc\r\n")
    took = seconds_until_closed(sock, scaled(10))
    assert HEADER_TIMEOUT - 0.2 <= took <= HEADER_TIMEOUT + scaled(1.0)


def test_trickled_headers_are_closed_after_the_header_timeout(limited):
    """Slowloris: a byte every 0.1 s keeps the connection busy but never finishes the headers."""
    sock = tls_connection(limited)
    started = time.monotonic()
    with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout)):
        for byte in b"GET /healthz HTTP/1.1\r\nHost: kubesvc\r\nX-Slow: " + b"x" * 1000:
            sock.sendall(bytes([byte]))
            time.sleep(0.1)
            if time.monotonic() - started > scaled(10):
                break
    assert time.monotonic() - started <= HEADER_TIMEOUT + scaled(1.0)


def test_a_later_requests_half_sent_headers_are_closed_a_header_timeout_after_its_first_byte(limited):
    """On a kept-alive connection the deadline runs from the new request's first byte: not from
    the connection's start nor the previous request's, and it is not lost when the connection's
    earlier requests finished in time."""
    sock = tls_connection(limited)
    for _ in range(3):  # requests finishing in time, the last well into a header timeout
        sock.sendall(http_request("GET", "/healthz"))
        assert response_of(sock)[0] == 200
        time.sleep(HEADER_TIMEOUT * 0.4)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: kubesvc\r\n")
    took = seconds_until_closed(sock, scaled(10))
    assert HEADER_TIMEOUT - 0.2 <= took <= HEADER_TIMEOUT + scaled(1.0)


def test_a_connection_that_never_starts_tls_is_closed(limited):
    took = seconds_until_closed(socket.create_connection(address(limited)), scaled(10))
    assert HEADER_TIMEOUT - 0.2 <= took <= HEADER_TIMEOUT + scaled(1.0)


def test_idle_keep_alive_connection_is_closed_after_the_idle_timeout(limited):
    sock = tls_connection(limited)
    sock.sendall(http_request("GET", "/healthz"))
    sock.settimeout(scaled(10))
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    took = seconds_until_closed(sock, scaled(10))
    assert IDLE_TIMEOUT - 0.5 <= took <= IDLE_TIMEOUT + scaled(1.5)  # the idle timeout, not the header one


def test_a_connection_in_use_is_kept(limited):
    sock = tls_connection(limited)
    started = time.monotonic()
    while time.monotonic() - started < IDLE_TIMEOUT + HEADER_TIMEOUT:
        sock.sendall(http_request("GET", "/healthz"))
        status, _, _ = response_of(sock)
        assert status == 200
        time.sleep(HEADER_TIMEOUT / 2)


# ---- in-flight limits ---------------------------------------------------------------------------


@contextlib.contextmanager
def mutating_request_in_flight(server):
    """An admin POST whose body is half-sent: its handler waits for the rest, holding the slot.
    On exit the body is completed and the answer read."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"held-{time.monotonic_ns()}"}}
    body = json.dumps(namespace).encode()
    sock = tls_connection(server, admin=True)
    sock.sendall(http_request("POST", "/api/v1/namespaces", body[:10], content_length=len(body)))
    time.sleep(0.3)  # the headers are in: the handler runs, reading the body
    try:
        yield
    finally:
        sock.sendall(body[10:])
        status, _, created = response_of(sock)
        assert status == 201, created
        sock.close()


def anonymous(server) -> requests.Session:
    return server.session(admin=False)


def test_over_the_mutating_limit_is_429_with_retry_after(limited):
    session = anonymous(limited)
    with mutating_request_in_flight(limited):
        refused = session.post(limited.url + "/api/v1/namespaces", json={"metadata": {"name": "x"}}, timeout=scaled(10))
        read = session.get(limited.url + "/healthz", timeout=scaled(10))
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"
    assert refused.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
                              "details": {"retryAfterSeconds": 1}, "code": 429}
    assert read.status_code == 200  # reads have a bucket of their own
    after = session.post(limited.url + "/api/v1/namespaces", json={"metadata": {"name": "x"}}, timeout=scaled(10))
    assert after.status_code == 403  # the slot is free again: authorization answers


def test_system_masters_are_always_served(limited):
    with mutating_request_in_flight(limited):
        result = limited.kubectl("create", "namespace", f"admin-{time.monotonic_ns()}")
    assert "created" in result.stdout


def test_a_watch_takes_no_slot(limited):
    admin = limited.session()
    with admin.get(limited.url + "/api/v1/namespaces?watch=true&timeoutSeconds=30", stream=True, timeout=scaled(10)) as watch:
        assert watch.status_code == 200
        next(watch.iter_lines())  # the watch is being served
        for _ in range(3):
            assert anonymous(limited).get(limited.url + "/healthz", timeout=scaled(10)).status_code == 200


# ---- which requests count -------------------------------------------------------------------------


@pytest.mark.parametrize("method, path, query, long_running, mutating", [
    pytest.param("GET", "/api/v1/namespaces/d/services", {"watch": "true"}, True, False, id="watch"),
    pytest.param("GET", "/api/v1/namespaces/d/pods/p/log", {}, True, False, id="pods-log"),
    pytest.param("GET", "/api/v1/namespaces/d/pods/p/exec", {}, True, False, id="pods-exec"),
    pytest.param("POST", "/api/v1/namespaces/d/pods/p/portforward", {}, True, True, id="pods-portforward"),
    pytest.param("GET", "/api/v1/namespaces/d/services/s/proxy/x", {}, True, False, id="proxy"),
    pytest.param("GET", "/api/v1/namespaces/d/services", {}, False, False, id="list"),
    pytest.param("GET", "/healthz", {}, False, False, id="non-resource"),
    pytest.param("POST", "/api/v1/namespaces/d/services", {}, False, True, id="create"),
    pytest.param("PATCH", "/api/v1/namespaces/d/services/s", {}, False, True, id="patch"),
    pytest.param("DELETE", "/api/v1/namespaces/d/services", {}, False, True, id="deletecollection"),
])
def test_which_requests_count_against_which_limit(method, path, query, long_running, mutating):
    from kubesvc.apiserver.auth.attributes import request_info
    from kubesvc.apiserver.limits import is_long_running, is_mutating

    info = request_info(method, path, query)
    assert (is_long_running(info), is_mutating(info)) == (long_running, mutating)


def test_buckets_are_separate_and_zero_is_no_limit():
    from kubesvc.apiserver.limits import InFlight

    buckets = InFlight(max_requests=1, max_mutating=0)
    assert buckets.try_acquire(mutating=False)
    assert not buckets.try_acquire(mutating=False)
    assert all(buckets.try_acquire(mutating=True) for _ in range(1000))
    buckets.release(mutating=False)
    assert buckets.try_acquire(mutating=False)
