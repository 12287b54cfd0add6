"""``kubectl exec`` and ``kubectl port-forward`` (kubectl 1.32, unchanged) through the apiserver
to the node agent, on ``kubesvc up`` in a namespace of its own (one per module).

What a user sees is asserted: the Pod's environment printed by ``env``, the command's exit code
as kubectl's own (``command terminated with exit code 3``, exit 3), stdin piped through ``-i``,
a terminal with ``-it`` (the size kubectl sends arriving as the terminal's size), a Pod's server
listening on the Pod's *loopback* reached through ``port-forward`` from the machine's side, and
upstream's refusals (403 for a user without ``create`` on ``pods/exec``, 400 for a container the
Pod does not have). Expected strings are kubectl's and kube-apiserver's, written by hand.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
import yaml

from tests.support.agent import http_request, nsenter_argv
from tests.support.netns import REPO_ROOT, call_in_netns
from tests.support.netns import wait_until
from tests.support.up import Machine, running_machine

pytestmark = pytest.mark.kernel

SERVER = "import http.server, os; os.chdir(os.environ['SITE']); http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=80, bind='127.0.0.1')"


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    with running_machine("xstream", tmp_path_factory.mktemp("exec")) as machine:
        yield machine


@pytest.fixture(scope="module")
def pod(up: Machine, tmp_path_factory) -> str:
    """A running Pod whose one container serves its site directory on 127.0.0.1:80 (inside the
    Pod's network namespace only) and carries an env var of its own."""
    site = tmp_path_factory.mktemp("site")
    (site / "index.html").write_text("hello from the pod\n")
    name = f"web-{secrets.token_hex(3)}"
    container = {"name": "web", "image": "python", "command": [sys.executable, "-c", SERVER],
                 "env": [{"name": "GREETING", "value": "hello-exec"}, {"name": "SITE", "value": str(site)}],
                 "readinessProbe": {"tcpSocket": {"port": 80, "host": "127.0.0.1"}, "periodSeconds": 1}}
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
                                                         "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}))
    wait_until(lambda: up.get("pod", name).get("status", {}).get("phase") == "Running", 60, f"{name} running")
    return name


def test_exec_prints_the_pods_environment(up, pod):
    result = up.kubectl("exec", pod, "--", "env")
    lines = result.stdout.splitlines()
    assert "GREETING=hello-exec" in lines
    assert any(line.startswith("KUBERNETES_SERVICE_HOST=") for line in lines)  # the Service variables, as in the container


def test_streams_are_counted_as_connect_requests(up, pod):
    up.kubectl("exec", pod, "--", "true")
    metrics = up.kubectl("get", "--raw", "/metrics").stdout.splitlines()
    assert any(line.startswith("apiserver_request_total{") and 'verb="CONNECT"' in line and 'subresource="exec"' in line
               and 'code="101"' in line for line in metrics)


def test_exec_returns_the_exit_code(up, pod):
    result = up.kubectl("exec", pod, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert result.returncode == 3
    assert result.stdout == "out\n"
    assert "err\n" in result.stderr
    assert "command terminated with exit code 3" in result.stderr


def test_exec_runs_in_the_pods_network_namespace(up, pod):
    """The Pod's server listens on its own loopback: only a command inside its namespace reaches it."""
    fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:80/index.html').read().decode(), end='')"
    assert up.kubectl("exec", pod, "--", sys.executable, "-c", fetch).stdout == "hello from the pod\n"


def test_exec_keeps_the_containers_capabilities(up, pod):
    """The Pod's container runs with the runtime's default bounding set (Docker's and
    containerd's: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE
    NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP, a80425fb); a command exec'd into it has no more."""
    lines = up.kubectl("exec", pod, "--", "grep", "-E", "^Cap(Bnd|Eff):", "/proc/self/status").stdout.splitlines()
    assert lines == ["CapEff:\t00000000a80425fb", "CapBnd:\t00000000a80425fb"]


def test_exec_pipes_stdin(up, pod):
    text = "".join(f"line {i}\n" for i in range(2000))
    result = up.kubectl("exec", "-i", pod, "--", "sh", "-c", "tr a-z A-Z; echo done", input=text)
    assert result.stdout == text.upper() + "done\n"


def test_exec_with_a_terminal(up, pod):
    """``-it`` from a terminal of 33 rows x 101 columns: the command's stdin is a terminal of that size."""
    argv = kubectl_argv(up, "exec", "-it", pod, "--", "sh", "-c", "test -t 0 && echo is-a-tty; stty size; read line; echo got-$line; exit 4")
    code, text = _on_a_terminal(argv, [(b"33 101", b"typed\r")])
    assert "is-a-tty" in text
    assert "33 101" in text
    assert "got-typed" in text
    assert code == 4, text


def test_exec_into_a_missing_container_is_a_bad_request(up, pod):
    result = up.kubectl("exec", pod, "-c", "nope", "--", "env", check=False)
    assert result.returncode != 0
    assert f"Error from server (BadRequest): container nope is not valid for pod {pod}" in result.stderr


def test_exec_needs_create_on_pods_exec(up, pod):
    """A user allowed to read Pods and only ``get`` ``pods/exec`` is refused (403), the
    WebSocket and the SPDY fallback alike; granting ``create`` lets the same user in."""
    user = f"reader-{secrets.token_hex(3)}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": user},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                      {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    result = up.kubectl("--as", user, "exec", pod, "--", "true", check=False)
    assert result.returncode != 0
    assert (f'Error from server (Forbidden): pods "{pod}" is forbidden: User "{user}" cannot create resource "pods/exec" '
            f'in API group "" in the namespace "default"') in result.stderr
    role["rules"][1]["verbs"] = ["get", "create"]
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    wait_until(lambda: up.kubectl("--as", user, "exec", pod, "--", "true", check=False).returncode == 0, 20, "exec allowed")


def upgrade_as(up: Machine, user: str, path: str, method: str, upgrade: str, protocol: str) -> str:
    """The status line the apiserver answers to a raw upgrade request made as ``user``
    (impersonated by the admin), sent from the machine's namespace."""
    import socket
    import ssl

    from kubesvc.client.kubeconfig import load_kubeconfig

    context = load_kubeconfig(up.kubeconfig).ssl_context()

    def ask() -> str:
        with socket.create_connection(("127.0.0.1", up.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall((f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{up.port}\r\nConnection: Upgrade\r\n"
                              f"Upgrade: {upgrade}\r\nX-Stream-Protocol-Version: {protocol}\r\n"
                              f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                              f"Sec-WebSocket-Protocol: {protocol}\r\nImpersonate-User: {user}\r\nContent-Length: 0\r\n\r\n").encode())
                return sock.recv(65536).split(b"\r\n", 1)[0].decode()

    assert isinstance(context, ssl.SSLContext)
    return call_in_netns(up.ns.name, ask)


def test_a_get_only_user_cannot_upgrade_a_get_to_spdy(up, pod):
    """``get`` on ``pods/exec`` or ``pods/portforward`` streams nothing, whatever the upgrade a GET
    asks for: a SPDY upgrade on a GET (kubectl sends it as POST, which is ``create``) is refused
    as the WebSocket GET is, before anything reaches the agent."""
    user = f"getter-{secrets.token_hex(3)}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": user},
            "rules": [{"apiGroups": [""], "resources": ["pods", "pods/exec", "pods/portforward", "pods/attach"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, binding]))
    wait_until(lambda: up.kubectl("--as", user, "get", "pod", pod, check=False).returncode == 0, 20, "the role in force")
    exec_path = f"/api/v1/namespaces/default/pods/{pod}/exec?command=true&stdout=true"
    for path, protocol in ((exec_path, "v4.channel.k8s.io"), (f"/api/v1/namespaces/default/pods/{pod}/portforward", "portforward.k8s.io"),
                           (f"/api/v1/namespaces/default/pods/{pod}/attach?stdout=true", "v4.channel.k8s.io")):
        assert upgrade_as(up, user, path, "GET", "SPDY/3.1", protocol) == "HTTP/1.1 403 Forbidden", path
        assert upgrade_as(up, user, path, "GET", "websocket", protocol) == "HTTP/1.1 403 Forbidden", path


def kubectl_argv(up: Machine, *args: str, env: tuple[str, ...] = ()) -> list[str]:
    return nsenter_argv(up.ns.name, "env", *env, "kubectl", f"--kubeconfig={up.kubeconfig}", f"--cache-dir={up.cache_dir}", *args)


# kubectl's switches for its SPDY fallback (pkg/cmd/util/helpers.go IsDisabled): what it does
# when the WebSocket upgrade is refused, forced
NO_WEBSOCKETS = ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false")


def test_exec_over_spdy(up, pod):
    def run(*args, input=None):
        return subprocess.run(kubectl_argv(up, *args, env=NO_WEBSOCKETS), input=input, capture_output=True, text=True, timeout=60,
                              cwd=REPO_ROOT)

    first = run("-v=6", "exec", pod, "--", "env")
    assert "GREETING=hello-exec" in first.stdout.splitlines()
    assert any(" POST https://" in line and "/exec?" in line and "101 Switching Protocols" in line
               for line in first.stderr.splitlines()), first.stderr  # the SPDY upgrade it was
    result = run("exec", pod, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout) == (3, "out\n")
    assert "err\n" in result.stderr and "command terminated with exit code 3" in result.stderr
    text = "".join(f"line {i}\n" for i in range(2000))
    assert run("exec", "-i", pod, "--", "sh", "-c", "tr a-z A-Z; echo done", input=text).stdout == text.upper() + "done\n"
    refused = run("exec", pod, "-c", "nope", "--", "env")
    assert refused.returncode != 0
    assert f"Error from server (BadRequest): container nope is not valid for pod {pod}" in refused.stderr


@pytest.mark.parametrize("env", [(), NO_WEBSOCKETS], ids=["websocket", "spdy"])
def test_port_forward_reaches_the_pods_loopback(up, pod, env):
    process = subprocess.Popen(kubectl_argv(up, "port-forward", f"pod/{pod}", "18080:80", env=env), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=REPO_ROOT, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("Forwarding from 127.0.0.1:18080 -> 80"), first + process.stderr.read() if process.poll() is not None else first
        for _ in range(3):  # a connection each, one after another
            status, body = call_in_netns(up.ns.name, http_request, "127.0.0.1", 18080, "/index.html", "GET", 10.0)
            assert (status, body) == (200, "hello from the pod\n")
    finally:
        process.terminate()
        process.wait(timeout=10)


# ---- the official Python client (channel protocol v4, offered with v5) ------------------------


def _python_client(up: Machine):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(config_file=str(up.kubeconfig)))


def test_python_client_exec_gets_output_and_exit_code(up, pod):
    from kubernetes.stream import stream

    def run():
        resp = stream(_python_client(up).connect_get_namespaced_pod_exec, pod, "default",
                      command=["sh", "-c", "echo $GREETING; echo oops >&2; exit 5"],
                      stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
        resp.run_forever(timeout=20)
        return resp.read_stdout(), resp.read_stderr(), resp.returncode

    assert call_in_netns(up.ns.name, run) == ("hello-exec\n", "oops\n", 5)


def test_python_client_port_forward(up, pod):
    from kubernetes.stream import portforward

    def fetch():
        forward = portforward(_python_client(up).connect_get_namespaced_pod_portforward, pod, "default", ports="80")
        sock = forward.socket(80)
        sock.setblocking(True)
        sock.settimeout(10)
        sock.sendall(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        return answer.decode(), forward.error(80)

    answer, error = call_in_netns(up.ns.name, fetch)
    assert answer.startswith("HTTP/1.0 200 OK")
    assert answer.endswith("\r\n\r\nhello from the pod\n")
    assert error is None


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (a Pod's processes are host processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_client_that_goes_away_takes_its_command_along(up, pod, tmp_path):
    # the shell computes the sleep's argument, so only the command's own command line holds the
    # marker, not kubectl's (a host process too: it would otherwise be found instead)
    offset = secrets.randbelow(10**8)
    marker = f"sleep\0{10**9 + offset}"
    errors = tmp_path / "kubectl.err"
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(kubectl_argv(up, "exec", pod, "--", "sh", "-c", f"exec sleep $((1000000000 + {offset}))"),
                                   stdout=subprocess.DEVNULL, stderr=stderr, cwd=REPO_ROOT, start_new_session=True)
    try:
        wait_until(lambda: _processes_with(marker) or (process.poll() is not None and pytest.fail(
            f"kubectl exec exited {process.returncode}: {errors.read_text()!r}")), 20, "the command running")
    finally:
        os.killpg(process.pid, 9)
        process.wait(timeout=10)
    wait_until(lambda: not _processes_with(marker), 20, "the command gone with its client")


def test_exec_of_a_missing_command(up, pod):
    result = up.kubectl("exec", pod, "--", "no-such-command", check=False)
    assert result.returncode != 0
    assert 'exec: "no-such-command": executable file not found in $PATH' in result.stderr


def test_exec_into_an_unscheduled_pod(up):
    name = f"nowhere-{secrets.token_hex(3)}"
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeSelector": {"no-such-label": "x"}, "containers": [{"name": "c", "image": "x", "command": ["sleep", "60"]}]}}))
    result = up.kubectl("exec", name, "--", "true", check=False)
    assert result.returncode != 0
    assert f"Error from server (BadRequest): pod {name} does not have a host assigned" in result.stderr


def test_port_forward_to_a_port_nobody_listens_on(up, pod):
    process = subprocess.Popen(kubectl_argv(up, "port-forward", f"pod/{pod}", "18081:81"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=REPO_ROOT, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("Forwarding from 127.0.0.1:18081 -> 81")
        with pytest.raises(OSError):  # the connection is closed without an answer
            call_in_netns(up.ns.name, http_request, "127.0.0.1", 18081, "/", "GET", 10.0)
        process.wait(timeout=20)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert "an error occurred forwarding 18081 -> 81: error forwarding port 81 to pod " in err
    assert "connect: connection refused" in err


@pytest.mark.parametrize("env", [(), NO_WEBSOCKETS], ids=["websocket", "spdy"])
def test_attach_to_a_container_with_stdin(up, env):
    """``stdin: true, stdinOnce: true``: what kubectl attach -i sends reaches the container's own
    stdin, its output comes back, and the end of kubectl's stdin is the end of the container's."""
    name = f"reader-{secrets.token_hex(3)}"
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "c", "image": "busybox", "stdin": True, "stdinOnce": True,
                        "command": ["sh", "-c", 'while read line; do echo "got $line"; done; echo "stdin closed"']}]}}))
    wait_until(lambda: up.get("pod", name).get("status", {}).get("phase") == "Running", 60, f"{name} running")
    result = subprocess.run(kubectl_argv(up, "attach", "-i", name, env=env), input="one\ntwo\n", capture_output=True, text=True,
                            timeout=60, cwd=REPO_ROOT)
    assert (result.returncode, result.stdout) == (0, "got one\ngot two\nstdin closed\n"), result.stderr
    wait_until(lambda: up.get("pod", name).get("status", {}).get("phase") == "Succeeded", 30, f"{name} done")
    assert up.kubectl("logs", name).stdout == "got one\ngot two\nstdin closed\n"  # the log has it too


def _on_a_terminal(argv: list[str], keys: list[tuple[bytes, bytes]], rows: int = 33, columns: int = 101, timeout: float = 60) -> tuple[int, str]:
    """``argv`` (kubectl) on a pseudo-terminal of ``rows`` x ``columns``: each ``(wait_for, typed)``
    types ``typed`` once ``wait_for`` has appeared in the output; (exit code, output)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=REPO_ROOT, start_new_session=True)
    os.close(slave)
    output, pending = b"", list(keys)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if pending and pending[0][0] in output:
                os.write(master, pending.pop(0)[1])
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: kubectl exited
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kubectl still running {timeout:.0f} s after it started; its terminal showed: {output.decode(errors='replace')!r}")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    return code, output.decode(errors="replace")


def test_kubectl_run_it_rm(up):
    """``kubectl run -it --rm``: a Pod with stdin and a terminal, attached to at once; the size
    of the user's terminal reaches the container's; the Pod is deleted after the shell exits.

    kubectl attach sends the size plus one row and column first, then the size itself, to make
    a running program redraw (pkg/cmd/attach: ``sizePlusOne``), on its own goroutine beside
    stdin's; so a command typed at once may run between the two. The shell waits (up to 5 s)
    for the terminal to settle at the user's size: what the user sees is that size."""
    name = f"shell-{secrets.token_hex(3)}"
    argv = kubectl_argv(up, "run", name, "-it", "--rm", "--restart=Never", "--image=busybox", "--", "sh")
    settle = b'i=0; while [ "$(stty size)" != "33 101" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; '
    code, text = _on_a_terminal(argv, [(b"If you don't see a command prompt", settle + b"echo size-$(stty size | tr ' ' x); echo sum-$((6*7))\r"),
                                       (b"sum-42\r", b"exit\r")])
    assert "size-33x101" in text, text
    assert "sum-42" in text
    assert f'pod "{name}" deleted' in text
    assert code == 0, text


def test_an_exec_ends_with_its_container(up):
    """Deleting the Pod stops its container, and what was exec'd in it goes too: kubectl says
    ``command terminated with exit code 137`` (SIGKILL), as with a container runtime."""
    name = f"brief-{secrets.token_hex(3)}"
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "600"]}]}}))
    wait_until(lambda: up.get("pod", name).get("status", {}).get("phase") == "Running", 60, f"{name} running")
    process = subprocess.Popen(kubectl_argv(up, "exec", name, "--", "sh", "-c", "echo started; exec sleep 300"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=REPO_ROOT, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "started\n"
        up.kubectl("delete", "pod", name, "--wait=false")
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 137, err
    assert "command terminated with exit code 137" in err


def test_exec_into_a_container_not_running_yet(up):
    """The container exists in the spec but has not started (its init container still runs): the
    agent refuses as kubelet does, and kubectl prints it after its own words."""
    name = f"waiting-{secrets.token_hex(3)}"
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "initContainers": [{"name": "first", "image": "busybox", "command": ["sleep", "600"]}],
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"]}]}}))
    wait_until(lambda: (up.get("pod", name).get("status", {}).get("initContainerStatuses") or [{}])[0].get("state", {}).get("running"),
               60, f"{name}'s init container running")
    result = up.kubectl("exec", name, "-c", "main", "--", "true", check=False)
    assert result.returncode != 0
    assert 'unable to upgrade connection: container not found ("main")' in result.stderr
    assert up.kubectl("exec", name, "-c", "first", "--", "true").returncode == 0  # the one that runs takes execs
    up.kubectl("delete", "pod", name, "--wait=false")


def test_port_forward_to_a_service(up, pod):
    """``kubectl port-forward svc/NAME 18082:8080``: kubectl picks a Pod behind the Service and
    forwards to the Service port's targetPort (80) there."""
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "Service", "metadata": {"name": pod}, "spec": {
        "selector": {"app": pod}, "ports": [{"port": 8080, "targetPort": 80}]}}))
    process = subprocess.Popen(kubectl_argv(up, "port-forward", f"svc/{pod}", "18082:8080"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=REPO_ROOT, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("Forwarding from 127.0.0.1:18082 -> 80"), first
        assert call_in_netns(up.ns.name, http_request, "127.0.0.1", 18082, "/index.html", "GET", 10.0) == (200, "hello from the pod\n")
    finally:
        process.terminate()
        process.wait(timeout=10)
        up.kubectl("delete", "service", pod)


def test_kubectl_cp_both_ways(up, pod, tmp_path):
    """``kubectl cp`` is tar through exec, binary both ways (stdin into the Pod, stdout out of it)."""
    site = next(line.split("=", 1)[1] for line in up.kubectl("exec", pod, "--", "env").stdout.splitlines() if line.startswith("SITE="))
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    (tmp_path / "blob.bin").write_bytes(payload)
    up.kubectl("cp", str(tmp_path / "blob.bin"), f"{pod}:{site}/blob.bin")
    assert up.kubectl("exec", pod, "--", "sha256sum", f"{site}/blob.bin").stdout.split()[0] == hashlib.sha256(payload).hexdigest()
    up.kubectl("cp", f"{pod}:{site}/index.html", str(tmp_path / "copied.html"))
    assert (tmp_path / "copied.html").read_text() == "hello from the pod\n"
