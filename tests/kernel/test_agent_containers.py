"""Containers as upstream runs them and configuration into Pods, as a user sees them through
``kubectl`` on one ``kubesvc up`` (in a namespace of its own, shared by the module):

* ``args`` without ``command`` run ``args`` (busybox-style images have no entrypoint); a new
  image (``kubectl set image``) restarts the container with kuberuntime's Killing event;
  ``restartCount`` survives an agent restart (last: it restarts ``kubesvc up``);
* the environment from ConfigMaps, Secrets and the downward API, ``envFrom`` with its
  invalid-key event, ``$(VAR)`` expansion, and a missing ConfigMap holding the container in
  ``CreateContainerConfigError`` until it exists;
* volumes at their ``mountPath`` in the container's own mount namespace (nothing on the host),
  ``subPath``, ``readOnly``, and a ``kubectl edit`` of a mounted ConfigMap seen by the running
  container in one step (the atomic writer's ``..data`` swap);
* the Pod's hostname in its own UTS namespace, and ``runAsUser``/``runAsGroup``.

Every expected value (reasons, messages, numbers) is upstream kubelet's, written by hand.
"""

from __future__ import annotations

import os
import pwd
import secrets
import socket

import pytest
import yaml

from tests.support.netns import wait_until as poll
from tests.support.up import Machine, running_machine

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    with running_machine("ctrs", tmp_path_factory.mktemp("containers")) as machine:
        yield machine


def wait_until(predicate, timeout: float = 30.0, message: str = "condition"):
    return poll(predicate, timeout, message)


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def apply_pod(up: Machine, name: str, containers: list[dict], metadata: dict | None = None, **spec) -> None:
    up.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **(metadata or {})},
        "spec": {"containers": containers, "terminationGracePeriodSeconds": 1, **spec}}))


def status_of(up: Machine, pod: str, container: str | None = None) -> dict:
    statuses = up.get("pod", pod).get("status", {}).get("containerStatuses") or [{}]
    return next((s for s in statuses if container is None or s.get("name") == container), {})


def running(up: Machine, pod: str, container: str | None = None) -> dict | None:
    status = status_of(up, pod, container)
    return status if "running" in status.get("state", {}) else None


def waiting(up: Machine, pod: str, reason: str) -> dict | None:
    state = status_of(up, pod).get("state", {}).get("waiting") or {}
    return state if state.get("reason") == reason else None


def logs(up: Machine, pod: str, *args: str) -> str:
    return up.kubectl("logs", pod, *args, check=False).stdout


def logged(up: Machine, pod: str, last_line: str, *args: str, timeout: float = 30.0) -> list[str]:
    """The container's log lines once ``last_line`` is among them."""
    return wait_until(lambda: (lines := logs(up, pod, *args).splitlines()) and last_line in lines and lines, timeout,
                      f"{last_line!r} in the logs of {pod}")


def event_counts(up: Machine, pod: str) -> dict[tuple[str, str], int]:
    items = up.get("events", "--field-selector", f"involvedObject.name={pod}")["items"]
    return {(e["reason"], e["message"]): e.get("count") or 1 for e in items}


def events_of(up: Machine, pod: str) -> list[tuple[str, str]]:
    items = up.get("events", "--field-selector", f"involvedObject.name={pod}")["items"]
    return [(e["reason"], e["message"]) for e in items]


# ---- command line and restarts ----------------------------------------------------------------


def test_args_without_command_are_run(up):
    name = unique("args")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "args": ["sh", "-c", "echo started by args; sleep 1000"]}])
    assert logged(up, name, "started by args") == ["started by args"]
    assert running(up, name)


def test_neither_command_nor_args_is_a_config_error(up):
    name = unique("noargs")
    apply_pod(up, name, [{"name": "web", "image": "nginx:1.27"}])
    state = wait_until(lambda: waiting(up, name, "CreateContainerConfigError"), message="CreateContainerConfigError")
    message = ("kubesvc runs no images, so container 'web' needs a command: its image 'nginx:1.27' is recorded, not pulled, "
               "and has no entrypoint here")
    assert state["message"] == message
    assert ("Failed", f"Error: {message}") in events_of(up, name)


def test_a_new_image_restarts_the_container_whatever_the_restart_policy(up):
    name = unique("image")
    apply_pod(up, name, [{"name": "c", "image": "busybox:1.36", "command": ["sh", "-c", "echo run; sleep 1000"]}], restartPolicy="Never")
    wait_until(lambda: running(up, name), message="the container running")
    up.kubectl("set", "image", f"pod/{name}", "c=busybox:1.37")
    status = wait_until(lambda: (s := running(up, name)) and s.get("restartCount") == 1 and s, message="the restarted container running")
    assert status["image"] == "busybox:1.37"
    assert status["lastState"]["terminated"]["exitCode"] == 143  # sh got the SIGTERM
    assert ("Killing", "Container c definition changed, will be restarted") in events_of(up, name)
    assert logs(up, name, "--previous") == "run\n"
    assert logged(up, name, "run") == ["run"]


# ---- environment ------------------------------------------------------------------------------


ENV_NAMES = ["LEVEL", "PASSWORD", "MISSING", "MY_NAME", "MY_NS", "MY_UID", "MY_APP", "MY_TEAM", "MY_NODE", "MY_SA", "MY_IP",
             "HOST_IP", "MEM_MI", "CPU_M", "GREETING", "LOG_LEVEL", "color", "CFG_LOG_LEVEL", "CFG_color", "CFG_1bad"]


def key_ref(kind: str, name: str, key: str, **extra) -> dict:
    return {kind: {"name": name, "key": key, **extra}}


def test_environment_from_config_maps_secrets_and_the_downward_api(up):
    config, secret, name = unique("app-config"), unique("app-secret"), unique("env")
    up.kubectl("create", "configmap", config, "--from-literal=LOG_LEVEL=debug", "--from-literal=color=blue", "--from-literal=1bad=x")
    up.kubectl("create", "secret", "generic", secret, "--from-literal=password=s3cret")
    env = [
        {"name": "LEVEL", "valueFrom": key_ref("configMapKeyRef", config, "LOG_LEVEL")},
        {"name": "PASSWORD", "valueFrom": key_ref("secretKeyRef", secret, "password")},
        {"name": "MISSING", "valueFrom": key_ref("configMapKeyRef", "no-such-config", "k", optional=True)},
        *({"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}} for var, path in [
            ("MY_NAME", "metadata.name"), ("MY_NS", "metadata.namespace"), ("MY_UID", "metadata.uid"),
            ("MY_APP", "metadata.labels['app']"), ("MY_TEAM", "metadata.annotations['team']"), ("MY_NODE", "spec.nodeName"),
            ("MY_SA", "spec.serviceAccountName"), ("MY_IP", "status.podIP"), ("HOST_IP", "status.hostIP")]),
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
        {"name": "GREETING", "value": "level=$(LEVEL) pod=$(MY_NAME) $(UNDEFINED)"},
    ]
    script = f"echo 'arg=$(GREETING)'; for v in {' '.join(ENV_NAMES)}; do eval \"echo $v=\\${{$v-unset}}\"; done; echo end; sleep 1000"
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", script], "env": env,
                          "envFrom": [{"configMapRef": {"name": config}}, {"prefix": "CFG_", "configMapRef": {"name": config}}],
                          "resources": {"limits": {"memory": "64Mi", "cpu": "1"}, "requests": {"cpu": "250m", "memory": "32Mi"}}}],
              metadata={"labels": {"app": "web"}, "annotations": {"team": "blue"}})
    lines = logged(up, name, "end")
    pod = up.get("pod", name)
    assert lines == [
        f"arg=level=debug pod={name} $(UNDEFINED)",
        "LEVEL=debug", "PASSWORD=s3cret", "MISSING=unset", f"MY_NAME={name}", "MY_NS=default", f"MY_UID={pod['metadata']['uid']}",
        "MY_APP=web", "MY_TEAM=blue", f"MY_NODE={pod['spec']['nodeName']}", "MY_SA=default", f"MY_IP={pod['status']['podIP']}",
        f"HOST_IP={pod['status']['hostIP']}", "MEM_MI=64", "CPU_M=250", f"GREETING=level=debug pod={name} $(UNDEFINED)",
        "LOG_LEVEL=debug", "color=blue", "CFG_LOG_LEVEL=debug", "CFG_color=blue", "CFG_1bad=x", "end"]
    assert ("InvalidEnvironmentVariableNames", f"Keys [1bad] from the EnvFrom configMap default/{config} were skipped since they are "
            "considered invalid environment variable names.") in events_of(up, name)


def test_a_missing_config_map_holds_the_container_until_it_exists(up):
    config, name = unique("late"), unique("waits")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo value=$VALUE; sleep 1000"],
                          "env": [{"name": "VALUE", "valueFrom": key_ref("configMapKeyRef", config, "k")}]}])
    state = wait_until(lambda: waiting(up, name, "CreateContainerConfigError"), message="CreateContainerConfigError")
    assert state["message"] == f'configmap "{config}" not found'
    assert ("Failed", f'Error: configmap "{config}" not found') in events_of(up, name)
    assert up.get("pod", name)["status"]["phase"] == "Pending"
    up.kubectl("create", "configmap", config, "--from-literal=other=1")
    state = wait_until(lambda: (s := waiting(up, name, "CreateContainerConfigError")) and "couldn't" in s.get("message", "") and s,
                       message="the missing key reported")
    assert state["message"] == f"couldn't find key k in ConfigMap default/{config}"
    up.kubectl("patch", "configmap", config, "-p", '{"data": {"k": "here"}}')
    # the node's watch of the ConfigMap retries the container at once, not after a back-off
    assert logged(up, name, "value=here", timeout=8) == ["value=here"]
    assert status_of(up, name)["restartCount"] == 0


# ---- volumes ----------------------------------------------------------------------------------


VOLUME_SCRIPT = """
cat /etc/kubesvc-test/app/app.conf; echo
cat /etc/kubesvc-test/single.conf; echo
echo hi > /work-data/f && cat /work-ro/f
touch /work-ro/g 2>/dev/null || echo read-only emptyDir mount refused
touch /etc/kubesvc-test/app/new 2>/dev/null || echo configMap volume refused
echo ready
last=alpha
while true; do
  now=$(cat /etc/kubesvc-test/app/app.conf)
  if [ "$now" != "$last" ]; then echo "changed to [$now]; subPath file [$(cat /etc/kubesvc-test/single.conf)]"; last=$now; fi
  sleep 0.05
done
"""


def test_volumes_at_their_mount_paths_and_a_config_map_edit_seen_live(up, monkeypatch):
    config, name = unique("files"), unique("vols")
    up.kubectl("create", "configmap", config, "--from-literal=app.conf=alpha", "--from-literal=other=x")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", VOLUME_SCRIPT], "volumeMounts": [
        {"name": "files", "mountPath": "/etc/kubesvc-test/app"},
        {"name": "files", "mountPath": "/etc/kubesvc-test/single.conf", "subPath": "app.conf"},
        {"name": "scratch", "mountPath": "/work-data"},
        {"name": "scratch", "mountPath": "/work-ro", "readOnly": True}]}],
              volumes=[{"name": "files", "configMap": {"name": config}}, {"name": "scratch", "emptyDir": {}}])
    assert logged(up, name, "ready") == ["alpha", "alpha", "hi", "read-only emptyDir mount refused", "configMap volume refused", "ready"]
    assert not os.path.exists("/etc/kubesvc-test") and not os.path.exists("/work-data")  # nothing on the host
    monkeypatch.setenv("KUBE_EDITOR", "sed -i s/alpha/beta/")
    up.kubectl("edit", "configmap", config)
    lines = logged(up, name, "changed to [beta]; subPath file [alpha]", timeout=15)
    # one step from the old content to the new (the ..data swap), never an empty or partial file;
    # a subPath mount keeps the file it was given, as upstream's does
    assert lines[6:] == ["changed to [beta]; subPath file [alpha]"]


def test_a_volume_waiting_for_its_config_map_mounts_once_it_is_created(up):
    config, name = unique("later"), unique("mountwait")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", "cat /config/k; echo; sleep 1000"],
                          "volumeMounts": [{"name": "config", "mountPath": "/config"}]}],
              volumes=[{"name": "config", "configMap": {"name": config}}])
    failure = ("FailedMount", f'MountVolume.SetUp failed for volume "config" : configmap "{config}" not found')
    # the retries back off (0.5 s doubling): after four failures the next one is 8 s away
    wait_until(lambda: sum(count for (reason, message), count in event_counts(up, name).items() if (reason, message) == failure) >= 4,
               message="four FailedMount retries")
    assert up.get("pod", name)["status"]["phase"] == "Pending"
    up.kubectl("create", "configmap", config, "--from-literal=k=arrived")
    # the node's watch of the ConfigMap ends the back-off at once
    assert logged(up, name, "arrived", timeout=6) == ["arrived"]


# ---- hostname and user ------------------------------------------------------------------------


def home_of(uid: int) -> str:
    """runc's HOME for a user: its /etc/passwd home (the container sees the host's), else /."""
    try:
        return pwd.getpwuid(uid).pw_dir or "/"
    except KeyError:
        return "/"


def test_hostname_in_its_own_uts_namespace_and_the_user_it_runs_as(up):
    name = unique("ident") + "-" + "x" * 49 + "-" + "y" * 7  # 70 characters: the hostname is cut to 63, its trailing '-' dropped
    script = "cat /proc/sys/kernel/hostname; echo $HOSTNAME; id -u; id -g; id -G; echo HOME=$HOME; echo end; sleep 1000"
    hostname = name[:62]
    # an exec probe runs where the container runs, as its user (upstream: ExecSync in the container)
    probe = {"exec": {"command": ["sh", "-c", f'test "$(id -u):$(id -G)" = "2000:3000 4000" && test "$(cat /proc/sys/kernel/hostname)" = {hostname}']},
             "periodSeconds": 1}
    apply_pod(up, name, [{"name": "a", "image": "busybox", "command": ["sh", "-c", script], "securityContext": {"runAsUser": 2000},
                          "readinessProbe": probe},
                         {"name": "b", "image": "busybox", "command": ["sh", "-c", script]}],
              securityContext={"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000]})
    assert len(name) == 70 and name[62] == "-" and len(hostname) == 62
    assert logged(up, name, "end", "-c", "a") == [hostname, hostname, "2000", "3000", "3000 4000", f"HOME={home_of(2000)}", "end"]
    assert logged(up, name, "end", "-c", "b") == [hostname, hostname, "1000", "3000", "3000 4000", f"HOME={home_of(1000)}", "end"]
    assert socket.gethostname() != hostname  # the host's own name is untouched
    wait_until(lambda: status_of(up, name, "a").get("ready"), message="the exec readiness probe passing as uid 2000 in the Pod's UTS namespace")

    named = unique("named")
    apply_pod(up, named, [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}], hostname="db-0", subdomain="db")
    assert logged(up, named, "end") == ["db-0", "db-0", "0", "0", "0", f"HOME={home_of(0)}", "end"]


FS_GROUP_SCRIPT = """
cat /etc/kubesvc-secret/key; echo
stat -L -c '%a %g' /etc/kubesvc-secret/key
touch /scratch/made && stat -c '%a %g' /scratch /scratch/made
echo end; sleep 1000
"""


def test_fs_group_owns_the_volumes_a_non_root_user_reads_and_writes(up):
    secret, name = unique("owned"), unique("fsgroup")
    up.kubectl("create", "secret", "generic", secret, "--from-literal=key=only-for-the-group")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", FS_GROUP_SCRIPT], "volumeMounts": [
        {"name": "secret", "mountPath": "/etc/kubesvc-secret"}, {"name": "scratch", "mountPath": "/scratch"}]}],
              securityContext={"runAsUser": 2000, "runAsGroup": 3000, "fsGroup": 5000},
              volumes=[{"name": "secret", "secret": {"secretName": secret, "defaultMode": 0o400}}, {"name": "scratch", "emptyDir": {}}])
    # 0400 root-owned would be unreadable for uid 2000: the group gets r (0440) and owns the file;
    # the emptyDir is group-owned with the setgid bit, so new files belong to the group
    assert logged(up, name, "end") == ["only-for-the-group", "440 5000", "2777 5000", "644 5000", "end"]


def test_capabilities_are_the_runtimes_default_set_unless_asked(up):
    name = unique("caps")
    script = "grep -E '^Cap(Bnd|Eff):' /proc/self/status; echo end; sleep 1000"
    apply_pod(up, name, [
        {"name": "default", "image": "busybox", "command": ["sh", "-c", script]},
        {"name": "tuned", "image": "busybox", "command": ["sh", "-c", script],
         "securityContext": {"capabilities": {"add": ["NET_ADMIN"], "drop": ["NET_RAW"]}}},
        {"name": "privileged", "image": "busybox", "command": ["sh", "-c", script], "securityContext": {"privileged": True}}])
    # Docker's and containerd's default bounding set, as `grep Cap /proc/self/status` shows it in any
    # container: CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE
    # NET_RAW SYS_CHROOT MKNOD AUDIT_WRITE SETFCAP
    assert logged(up, name, "end", "-c", "default") == ["CapEff:\t00000000a80425fb", "CapBnd:\t00000000a80425fb", "end"]
    # + NET_ADMIN (bit 12, 0x1000), - NET_RAW (bit 13, 0x2000)
    assert logged(up, name, "end", "-c", "tuned") == ["CapEff:\t00000000a80415fb", "CapBnd:\t00000000a80415fb", "end"]
    agent_set = next(line for line in open("/proc/self/status").read().splitlines() if line.startswith("CapBnd:")).split()[1]
    assert logged(up, name, "end", "-c", "privileged") == [f"CapEff:\t{agent_set}", f"CapBnd:\t{agent_set}", "end"]


# ---- last: restarts kubesvc up ----------------------------------------------------------------


def test_restart_count_survives_an_agent_restart(up):
    name = unique("count")
    apply_pod(up, name, [{"name": "c", "image": "busybox", "command": ["sh", "-c", "echo run; sleep 1000"]}])
    wait_until(lambda: running(up, name), message="the container running")
    code, _ = up.interrupt(timeout=60)
    assert code == 0, up.log()
    up.up(timeout=90)
    status = wait_until(lambda: (s := running(up, name)) and s, timeout=60, message="the container running again")
    assert status["restartCount"] == 1  # the attempt the node's log directory shows (0.log) came before
    assert logs(up, name, "--previous") == "run\n"
    assert logged(up, name, "run") == ["run"]
