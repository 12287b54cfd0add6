"""A node's TLS bootstrap against a real apiserver and controller-manager (no kernel: the
join's first half, run in process): discovery of the CA with a node token and its pin, the CSR
approved and signed, the credential files (0600) working as ``system:node:<name>``, and the
refusals: a wrong token, an expired one, a token without the node group, a wrong pin; each
one line, and none of them leaves a file or a CertificateSigningRequest. Also the rotation
deadline (70-90 % of the lifetime) and that a default token cannot read the CA keys."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import RestClient
from kubesvc.cluster import etcd_member, join
from kubesvc.nodejoin import discovery, serverside, tlsbootstrap
from tests.support.apiserver import running_apiserver, start_controller_manager


def kubesvc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "kubesvc", *args], capture_output=True, text=True, timeout=60)
    assert not check or result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("bootstrap")
    with running_apiserver(data / "server", "--enable-bootstrap-token-auth=true") as server:
        etcd_member.etcd_ca(server.data_dir)  # what up --cluster-init has beside the cluster CA

        async def publish():
            async with RestClient(load_kubeconfig(server.kubeconfig)) as client:
                await join.publish(client, server.data_dir, server.url)
                await serverside.publish_node_bootstrap(client)

        asyncio.run(publish())
        manager = start_controller_manager(server, data / "cm.log", "--cluster-signing-cert-file", str(server.ca.cert_path),
                                           "--cluster-signing-key-file", str(server.ca.key_path), "--leader-elect=false", "--secure-port=0",
                                           "--controllers=*,-pod-scheduler,-garbage-collector-controller")
        try:
            yield server
        finally:
            manager.stop()


def csr_names(server) -> set[str]:
    return set(server.kubectl("get", "csr", "-o", "name").stdout.split())


async def bootstrap(server, token: str, node: str, pins=()) -> tuple[bytes, bytes, bytes]:
    found = await discovery.discover(server.url, token, pins)
    async with tlsbootstrap.bootstrap_client(server.url, found.ca_pem, token) as client:
        key, cert = await tlsbootstrap.request_certificate(client, node, timeout=60, server=server.url, token_id=found.token_id)
    return found.ca_pem, key, cert


def test_a_node_token_bootstraps_a_working_node_credential(server, tmp_path):
    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    pin = discovery.ca_cert_hash(server.ca.pem)
    ca, key, cert = asyncio.run(bootstrap(server, token, "joiner-1", (pin,)))
    assert ca == server.ca.pem
    paths = tlsbootstrap.Paths(tmp_path / "node")
    made = tlsbootstrap.write_credentials(paths, server.url, ca, key, cert, "joiner-1")
    assert sorted(made) == sorted(paths.all())
    for path in paths.all():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(paths.key.parent.stat().st_mode) == 0o700
    whoami = json.loads(server.kubectl("auth", "whoami", "-o", "json", kubeconfig=paths.kubeconfig).stdout)["status"]["userInfo"]
    assert whoami["username"] == "system:node:joiner-1" and "system:nodes" in whoami["groups"]
    assert tlsbootstrap.usable(paths, "joiner-1", datetime.now(timezone.utc))
    assert not tlsbootstrap.usable(paths, "joiner-2", datetime.now(timezone.utc))
    # the request is recorded as the bootstrap identity's, approved and issued
    rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
    token_id = token.split(".")[0]
    assert any(r[3] == f"system:bootstrap:{token_id}" and r[-1] == "Approved,Issued" for r in rows)


def test_the_print_join_command_pins_the_ca(server):
    line = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig), "--print-join-command").stdout.split()
    assert line[:2] == ["kubesvc", "join"] and line[2] == server.url
    assert line[line.index("--discovery-token-ca-cert-hash") + 1] == discovery.ca_cert_hash(server.ca.pem)


def refusal(server, token: str, pins=()) -> str:
    before = csr_names(server)
    with pytest.raises(join.JoinFailed) as failed:
        asyncio.run(bootstrap(server, token, "joiner-x", pins))
    assert csr_names(server) == before  # nothing made on the cluster
    assert "\n" not in str(failed.value)
    return str(failed.value)


def test_refusals_are_one_line_and_make_nothing(server):
    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    assert "the token's secret does not match" in refusal(server, token.split(".")[0] + ".0000000000000000")
    assert "does not know token" in refusal(server, "zzzzzz.0000000000000000")
    assert "does not match --discovery-token-ca-cert-hash" in refusal(server, token, ("sha256:" + "0" * 64,))
    # expired: its signature is still published, the apiserver refuses it
    expired = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig), "--ttl", "1s").stdout.strip()
    import time

    time.sleep(2)
    assert "refused token" in refusal(server, expired) and "expired or deleted" in refusal(server, expired)
    # a token outside the node group may not ask for a node certificate
    other = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig), "--groups", "system:bootstrappers:other").stdout.strip()
    assert "may not request node certificates" in refusal(server, other)


def test_a_default_token_cannot_read_the_ca_keys_but_a_control_plane_one_can(server):
    node_token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    with pytest.raises(join.JoinFailed, match="may not join servers"):
        asyncio.run(join.fetch(server.url, node_token))
    server_token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig), "--control-plane").stdout.strip()
    assert asyncio.run(join.fetch(server.url, server_token)).bundle["data"]["ca.key"]


@pytest.mark.parametrize("rand, fraction", [(0.0, 0.7), (0.5, 0.8), (0.999, 0.8998)], ids=["earliest", "middle", "latest"])
def test_rotation_deadline_is_70_to_90_percent_of_the_lifetime(rand, fraction):
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    deadline = tlsbootstrap.next_rotation_deadline(start, start + timedelta(days=100), rand)
    assert abs((deadline - start) - timedelta(days=100 * fraction)) < timedelta(minutes=1)


def test_an_expired_certificate_is_not_rotated_but_said_once(server, tmp_path, caplog):
    """Past NotAfter the apiserver refuses the node's own certificate: no retry every minute
    for ever, but one error saying to join again (the kubelet falls back to its bootstrap
    credential; a joined node holds none)."""
    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    ca, key, cert = asyncio.run(bootstrap(server, token, "expired"))
    paths = tlsbootstrap.Paths(tmp_path / "node")
    tlsbootstrap.write_credentials(paths, server.url, ca, key, cert, "expired")

    async def on_rotated():
        raise AssertionError("an expired certificate was renewed")

    after_expiry = tlsbootstrap.current_certificate(paths).not_valid_after_utc + timedelta(seconds=1)
    asyncio.run(asyncio.wait_for(tlsbootstrap.rotate_forever(paths, server.url, "expired", on_rotated, now=lambda: after_expiry), 5))
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "join again with a token" in errors[0], errors


def test_rotation_renews_with_the_nodes_own_credential(server, tmp_path):
    """At the deadline (here: a clock far in the future) the node asks with its current
    certificate; the approver's selfnodeclient rule approves it and the files hold the new pair."""
    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    ca, key, cert = asyncio.run(bootstrap(server, token, "rotator"))
    paths = tlsbootstrap.Paths(tmp_path / "node")
    tlsbootstrap.write_credentials(paths, server.url, ca, key, cert, "rotator")
    first_serial = tlsbootstrap.current_certificate(paths).serial_number

    async def rotate_once():
        rotated = asyncio.Event()

        async def on_rotated():
            rotated.set()

        current = tlsbootstrap.current_certificate(paths)
        past_every_deadline = current.not_valid_before_utc + (current.not_valid_after_utc - current.not_valid_before_utc) * 0.95
        task = asyncio.create_task(tlsbootstrap.rotate_forever(paths, server.url, "rotator", on_rotated, timeout=60,
                                                                now=lambda: past_every_deadline))
        try:
            await asyncio.wait_for(rotated.wait(), 60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(rotate_once())
    renewed = tlsbootstrap.current_certificate(paths)
    assert renewed.serial_number != first_serial and renewed.subject.rfc4514_string() == "CN=system:node:rotator,O=system:nodes"
    rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
    assert any(r[3] == "system:node:rotator" and r[-1] == "Approved,Issued" for r in rows)
    message = {json.loads(server.kubectl("get", "csr", r[0], "-o", "json").stdout)["status"]["conditions"][0]["message"]
               for r in rows if r[3] == "system:node:rotator"}
    assert message == {"Auto approving self kubelet client certificate after SubjectAccessReview."}
    whoami = json.loads(server.kubectl("auth", "whoami", "-o", "json", kubeconfig=paths.kubeconfig).stdout)
    assert whoami["status"]["userInfo"]["username"] == "system:node:rotator"


def test_the_serving_certificate_is_asked_for_then_renewed_at_its_deadline_each_once_approved(server, tmp_path):
    """The join's serving certificate manager: without a serving certificate it asks at once; at
    the rotation deadline of the one it holds it asks again; each request waits for an
    administrator's approval (no controller approves kubelet-serving) and the files then hold
    the new pair, which the agent takes in place."""
    from kubesvc.cmd.supervisor import Supervisor
    from kubesvc.nodejoin.system import JoinOptions, JoinSystem

    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    ca, key, cert = asyncio.run(bootstrap(server, token, "servant"))
    system = JoinSystem(JoinOptions(server=server.url, token=token, data_dir=tmp_path / "node", node_name="servant",
                                    node_ips=["192.0.2.7"]), supervisor=Supervisor(tmp_path / "logs", echo=lambda text: None))
    tlsbootstrap.write_credentials(system.paths, server.url, ca, key, cert, "servant")

    def approve_the_pending_request() -> str:
        for _ in range(600):
            rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
            pending = [r[0] for r in rows if r[2] == "kubernetes.io/kubelet-serving" and r[3] == "system:node:servant" and r[-1] == "Pending"]
            if pending:
                server.kubectl("certificate", "approve", pending[0])
                return pending[0]
            time.sleep(0.1)
        raise AssertionError("no pending serving request of servant")

    async def one_issuance(now) -> None:
        before = system.paths.serving_cert.read_bytes() if system.paths.serving_cert.exists() else b""
        task = asyncio.create_task(system.keep_serving_certificate(now=now))
        try:
            await asyncio.to_thread(approve_the_pending_request)
            for _ in range(300):
                if system.paths.serving_cert.exists() and system.paths.serving_cert.read_bytes() != before:
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("the serving certificate was not written")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(one_issuance(lambda: datetime.now(timezone.utc)))  # none yet: asked for at once
    first = tlsbootstrap.certificate_at(system.paths.serving_cert)
    assert tlsbootstrap.serving_usable(system.paths, ["192.0.2.7"], datetime.now(timezone.utc))
    past_every_deadline = first.not_valid_before_utc + (first.not_valid_after_utc - first.not_valid_before_utc) * 0.95
    asyncio.run(one_issuance(lambda: past_every_deadline))
    renewed = tlsbootstrap.certificate_at(system.paths.serving_cert)
    assert renewed.serial_number != first.serial_number
    assert tlsbootstrap.key_matches(renewed, system.paths.serving_key)
    assert stat.S_IMODE(system.paths.serving_key.stat().st_mode) == 0o600


def test_failed_requests_are_retried_after_client_gos_backoff():
    """certificate_manager.go: ExponentialBackoff{2s, x2, jitter 0.1, 5 steps}, then every 32 s."""
    from itertools import islice

    assert list(islice(tlsbootstrap.retry_delays(lambda: 0.0), 7)) == [2, 4, 8, 16, 32, 32, 32]
    assert list(islice(tlsbootstrap.retry_delays(lambda: 0.99), 5)) == pytest.approx([2.198, 4.396, 8.792, 17.584, 32])


def test_one_serving_request_is_waited_for_and_a_new_one_filed_only_once_it_is_deleted_or_denied(server, tmp_path):
    """The serving certificate manager files one CSR and waits for it; an administrator's
    ``kubectl delete csr`` or ``kubectl certificate deny`` ends that wait, and one new request
    follows after the back-off's first step (before, a deleted request was polled for 24 h and
    a denied one re-filed only after a minute)."""
    from kubesvc.cmd.supervisor import Supervisor
    from kubesvc.nodejoin.system import JoinOptions, JoinSystem

    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    ca, key, cert = asyncio.run(bootstrap(server, token, "refiler"))
    system = JoinSystem(JoinOptions(server=server.url, token=token, data_dir=tmp_path / "node", node_name="refiler",
                                    node_ips=["192.0.2.8"]), supervisor=Supervisor(tmp_path / "logs", echo=lambda text: None))
    tlsbootstrap.write_credentials(system.paths, server.url, ca, key, cert, "refiler")

    def serving_requests() -> dict[str, str]:
        rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
        return {r[0]: r[-1] for r in rows if r[2] == "kubernetes.io/kubelet-serving" and r[3] == "system:node:refiler"}

    def a_new_pending_request(known: set[str], within: float = 30.0) -> str:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            new = {name for name, condition in serving_requests().items() if name not in known and condition == "Pending"}
            if new:
                assert len(new) == 1, new
                return new.pop()
            time.sleep(0.2)
        raise AssertionError(f"no new serving request of refiler within {within:g}s: {serving_requests()}")

    async def scenario() -> None:
        task = asyncio.create_task(system.keep_serving_certificate())
        try:
            first = await asyncio.to_thread(a_new_pending_request, set())
            await asyncio.to_thread(server.kubectl, "delete", "csr", first)
            second = await asyncio.to_thread(a_new_pending_request, {first})
            await asyncio.to_thread(server.kubectl, "certificate", "deny", second)
            third = await asyncio.to_thread(a_new_pending_request, {first, second})
            assert serving_requests() == {second: "Denied", third: "Pending"}
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_a_node_gets_kube_proxys_client_certificate_and_a_bootstrap_token_does_not(server, tmp_path):
    """After its own certificate, the node asks (as itself) for ``system:kube-proxy``'s: the
    approver's nodekubeproxyclient rule approves it after a SubjectAccessReview, with its own
    message; the files are 0600 and the kubeconfig works as kube-proxy (no group but
    system:authenticated); it rotates as the node's does, asked for as the node. The same request
    from a bootstrap token (not a node) stays pending."""
    token = kubesvc("token", "create", "--kubeconfig", str(server.kubeconfig)).stdout.strip()
    ca, key, cert = asyncio.run(bootstrap(server, token, "proxied"))
    paths = tlsbootstrap.Paths(tmp_path / "node")
    tlsbootstrap.write_credentials(paths, server.url, ca, key, cert, "proxied")
    proxy = tlsbootstrap.kube_proxy_identity(paths)
    assert not tlsbootstrap.identity_usable(paths, proxy, datetime.now(timezone.utc))

    async def ask() -> tuple[bytes, bytes]:
        async with RestClient(load_kubeconfig(paths.kubeconfig)) as client:
            return await tlsbootstrap.request_certificate(client, "proxied", timeout=60, server=server.url, identity=proxy)

    made = tlsbootstrap.write_identity(paths, proxy, server.url, ca, *asyncio.run(ask()))
    assert sorted(made) == sorted(proxy.files())
    for path in proxy.files():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert tlsbootstrap.identity_usable(paths, proxy, datetime.now(timezone.utc))
    whoami = json.loads(server.kubectl("auth", "whoami", "-o", "json", kubeconfig=proxy.kubeconfig).stdout)["status"]["userInfo"]
    assert (whoami["username"], whoami["groups"]) == ("system:kube-proxy", ["system:authenticated"])
    assert server.kubectl("auth", "can-i", "list", "endpointslices.discovery.k8s.io", kubeconfig=proxy.kubeconfig).stdout.strip() == "yes"
    rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
    mine = [r for r in rows if r[2] == "kubernetes.io/kube-apiserver-client" and r[3] == "system:node:proxied"]
    assert len(mine) == 1 and mine[0][-1] == "Approved,Issued", rows
    condition = json.loads(server.kubectl("get", "csr", mine[0][0], "-o", "json").stdout)["status"]["conditions"][0]
    assert condition["reason"] == "AutoApproved" and "kube-proxy client certificate for a node" in condition["message"]

    # rotated as the node's is (past every deadline), asked for again with the node's credential
    first = tlsbootstrap.certificate_at(proxy.cert)

    async def rotate_once():
        rotated = asyncio.Event()

        async def on_rotated():
            rotated.set()

        later = first.not_valid_before_utc + (first.not_valid_after_utc - first.not_valid_before_utc) * 0.95
        task = asyncio.create_task(tlsbootstrap.rotate_forever(paths, server.url, "proxied", on_rotated, timeout=60, now=lambda: later,
                                                                identity=proxy))
        try:
            await asyncio.wait_for(rotated.wait(), 60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(rotate_once())
    renewed = tlsbootstrap.certificate_at(proxy.cert)
    assert renewed.serial_number != first.serial_number and renewed.subject.rfc4514_string() == "CN=system:kube-proxy"
    assert tlsbootstrap.current_certificate(paths).subject.rfc4514_string() == "CN=system:node:proxied,O=system:nodes"  # untouched
    rows = [line.split() for line in server.kubectl("get", "csr", "--no-headers").stdout.splitlines()]
    assert len([r for r in rows if r[2] == "kubernetes.io/kube-apiserver-client" and r[3] == "system:node:proxied"]) == 2

    async def ask_with_the_token() -> str:
        from kubesvc.nodejoin.csr import kube_proxy_csr_object, new_key

        async with tlsbootstrap.bootstrap_client(server.url, ca, token) as client:
            return (await client.create(tlsbootstrap.CSR_PATH, kube_proxy_csr_object(new_key())))["metadata"]["name"]

    pending = asyncio.run(ask_with_the_token())
    import time

    time.sleep(3)  # the approver saw it (it approved the node's within this time above)
    assert server.kubectl("get", "csr", pending, "--no-headers").stdout.split()[-1] == "Pending"


def test_a_key_that_is_not_the_certificates_is_not_usable(tmp_path):
    """A join stopped between writing a rotated key and its certificate holds a new key and the
    old, unexpired certificate: it must ask again, not start its components with a pair that
    fails TLS until the certificate expires (review 20)."""
    from kubesvc.serving import pki

    ca = pki.ClusterCA(tmp_path / "pki")
    mine, other = ca.node_client("joiner-k"), ca.node_client("joiner-other")
    paths = tlsbootstrap.Paths(tmp_path / "node")
    now = datetime.now(timezone.utc)
    tlsbootstrap.write_credentials(paths, "https://127.0.0.1:6443", ca.pem, mine.key.read_bytes(), mine.cert.read_bytes(), "joiner-k")
    assert tlsbootstrap.usable(paths, "joiner-k", now)
    pki.write_private(paths.key, other.key.read_bytes())  # the rotation's new key, its certificate not yet written
    assert not tlsbootstrap.usable(paths, "joiner-k", now)
    paths.key.write_bytes(b"not a key")
    assert not tlsbootstrap.usable(paths, "joiner-k", now)
