"""The pure parts of joining a server machine: cluster-info's detached JWS (checked against an
HS256 computed here by hand), what a wrong or unknown token says, and installing the bundle."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime, timezone

import pytest

from kubesvc.cluster import join, tokens

NOW = datetime(2026, 11, 27, 3, 0, 0, tzinfo=timezone.utc)
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_detached_jws_is_hs256_over_header_and_content():
    signature = join.detached_jws("content", "abcdef", "0123456789abcdef")
    header, payload, mac = signature.split(".")
    assert payload == ""
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "kid": "abcdef"}
    expected = hmac.new(b"0123456789abcdef", f"{header}.{b64url(b'content')}".encode(), hashlib.sha256).digest()
    assert mac == b64url(expected)


def cluster_info(*token_secrets: dict) -> dict:
    content = join.cluster_info_kubeconfig("https://192.168.77.11:6443", CA)
    return {"data": join.cluster_info_data(content, list(token_secrets), NOW)}


def test_cluster_info_signed_for_live_signing_tokens_only():
    good = tokens.token_secret("abcdef.0123456789abcdef", ttl=3600, now=NOW)
    auth_only = tokens.token_secret("bbbbbb.0123456789abcdef", ttl=3600, now=NOW, usages=["authentication"])
    expired = tokens.token_secret("cccccc.0123456789abcdef", ttl=3600, now=datetime(2020, 1, 1, tzinfo=timezone.utc))
    data = cluster_info(good, auth_only, expired)["data"]
    assert sorted(data) == ["jws-kubeconfig-abcdef", "kubeconfig"]


def test_the_right_token_proves_the_ca():
    info = cluster_info(tokens.token_secret("abcdef.0123456789abcdef", ttl=3600, now=NOW))
    assert join.trusted_ca(info, "abcdef", "0123456789abcdef", "https://s") == (CA, "https://192.168.77.11:6443")


@pytest.mark.parametrize("token_id, secret, words", [
    ("abcdef", "0123456789abcdeX", "does not match"),
    ("zzzzzz", "0123456789abcdef", "does not know token zzzzzz"),
], ids=["wrong-secret", "unknown-id"])
def test_a_wrong_token_is_one_line(token_id, secret, words):
    info = cluster_info(tokens.token_secret("abcdef.0123456789abcdef", ttl=3600, now=NOW))
    with pytest.raises(join.JoinFailed) as failed:
        join.trusted_ca(info, token_id, secret, "https://s")
    assert words in str(failed.value) and "\n" not in str(failed.value) and "kubesvc token create" in str(failed.value)


def test_install_refuses_a_data_dir_of_another_cluster(tmp_path):
    bundle = {"data": {key: base64.b64encode(f"{key} bytes".encode()).decode() for key in join.BUNDLE_FILES}}
    made = join.install(tmp_path / "fresh", join.Fetched(CA, bundle))
    assert (tmp_path / "fresh" / "pki" / "etcd" / "ca.key").read_bytes() == b"etcd-ca.key bytes"
    assert oct((tmp_path / "fresh" / "pki" / "sa.key").stat().st_mode & 0o777) == "0o600" and len(made) == 5
    (tmp_path / "other" / "pki").mkdir(parents=True)
    (tmp_path / "other" / "pki" / "ca.crt").write_bytes(b"another CA")
    with pytest.raises(join.JoinFailed, match="certificates of another cluster: join with a fresh --data-dir"):
        join.install(tmp_path / "other", join.Fetched(CA, bundle))
    assert not (tmp_path / "other" / "pki" / "sa.key").exists()


def test_etcd_endpoint_of_the_server():
    assert join.etcd_endpoint("https://192.168.77.11:6443") == "https://192.168.77.11:2379"


def test_fetch_against_a_real_apiserver(tmp_path):
    """``up --cluster-init``'s publish, ``token create``'s signature and a joiner's fetch, over
    HTTPS against a real apiserver: the right token gets the server's CA files, a wrong one, a
    node-only one and a deleted one each get one line."""
    import asyncio

    from click.testing import CliRunner

    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import RestClient
    from kubesvc.cluster import etcd_member
    from kubesvc.cmd import main
    from tests.support.apiserver import running_apiserver

    def kubesvc(*args):
        outcome = CliRunner().invoke(main, [str(a) for a in args])
        assert outcome.exit_code == 0, (outcome.output, outcome.exception)
        return outcome.stdout.strip()

    async def publish(server):
        async with RestClient(load_kubeconfig(server.kubeconfig)) as client:
            await join.publish(client, server.data_dir, server.url)

    with running_apiserver(tmp_path / "first", "--enable-bootstrap-token-auth=true") as server:
        etcd_member.etcd_ca(server.data_dir)
        before = kubesvc("token", "create", "--kubeconfig", server.kubeconfig, "--control-plane")  # signed by publish
        asyncio.run(publish(server))
        joining = kubesvc("token", "create", "--kubeconfig", server.kubeconfig, "--print-join-command", "--control-plane")  # signed by token create
        assert joining.startswith(f"kubesvc up --server {server.url} --token ")
        after = joining.rsplit(" ", 1)[1]
        node_only = kubesvc("token", "create", "--kubeconfig", server.kubeconfig, "--groups", "system:bootstrappers:kubeadm:default-node-token")
        for token in (before, after):
            fetched = asyncio.run(join.fetch(server.url, token))
            assert fetched.ca_pem == (server.data_dir / "pki" / "ca.crt").read_bytes()
            join.install(tmp_path / "second", fetched)
            for relative in join.BUNDLE_FILES.values():
                assert (tmp_path / "second" / relative).read_bytes() == (server.data_dir / relative).read_bytes()

        def line(token):
            with pytest.raises(join.JoinFailed) as failed:
                asyncio.run(join.fetch(server.url, token))
            assert "\n" not in str(failed.value)
            return str(failed.value)

        assert "does not match" in line(after.split(".")[0] + ".0000000000000000")
        assert "may not join servers" in line(node_only)
        kubesvc("token", "delete", "--kubeconfig", server.kubeconfig, after)
        assert "does not know token" in line(after)
        assert line("not-a-token").startswith("--token must be a bootstrap token")
