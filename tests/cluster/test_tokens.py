"""``kubesvc token create|list|delete`` as ``kubeadm token``: the Secret it writes, the table it
prints, and the token authenticating against a real apiserver (``--enable-bootstrap-token-auth``)."""

from __future__ import annotations

import base64
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from kubesvc.cluster import tokens
from kubesvc.cmd import main
from tests.support.apiserver import running_apiserver

NOW = datetime(2026, 11, 27, 3, 0, 0, tzinfo=timezone.utc)


def decoded(secret: dict) -> dict:
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def test_secret_of_a_token_is_kubeadms():
    secret = tokens.token_secret("abcdef.0123456789abcdef", ttl=24 * 3600, now=NOW, description="second server")
    assert secret["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    assert decoded(secret) == {"token-id": "abcdef", "token-secret": "0123456789abcdef", "description": "second server",
                               "expiration": "2026-11-28T03:00:00Z", "usage-bootstrap-signing": "true",
                               "usage-bootstrap-authentication": "true",
                               "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}
    forever = decoded(tokens.token_secret("abcdef.0123456789abcdef", ttl=0, now=NOW, usages=["signing"], groups=[]))
    assert forever == {"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-signing": "true"}


@pytest.mark.parametrize("kwargs, message", [
    ({"usages": ["signing", "bogus"]}, "invalid bootstrap token usage string: bogus, valid options: signing, authentication"),
    ({"usages": ["signing"]}, 'token groups cannot be specified unless the usages include "authentication"'),
    ({"groups": ["system:masters"]}, 'bootstrap group "system:masters" is invalid'),
], ids=["usage", "groups-without-authentication", "group-outside-bootstrappers"])
def test_refused_as_kubeadm_refuses(kwargs, message):
    with pytest.raises(tokens.TokenError, match=message.replace("(", r"\(")):
        tokens.token_secret("abcdef.0123456789abcdef", ttl=60, now=NOW, **kwargs)


def test_generated_tokens_have_the_form_and_differ():
    made = {tokens.generate() for _ in range(50)}
    assert len(made) == 50
    assert all(len(t) == 23 and t[6] == "." and set(t) - {"."} <= set("abcdefghijklmnopqrstuvwxyz0123456789") for t in made)


@pytest.mark.parametrize("seconds, text", [(-5, "<invalid>"), (-0.5, "0s"), (59, "59s"), (3599, "59m"), (7199, "1h"),
                                           (86399, "23h"), (3 * 86400, "3d"), (400 * 86400, "1y")])
def test_short_human_duration(seconds, text):
    assert tokens.short_human_duration(seconds) == text


def test_list_table_is_go_tabwriter_aligned():
    listed = tokens.from_secret(tokens.token_secret("abcdef.0123456789abcdef", ttl=7200, now=NOW, description="x",
                                                    groups=["system:bootstrappers:kubeadm:default-node-token"]))
    forever = tokens.from_secret(tokens.token_secret("zyxwvu.0123456789abcdef", ttl=0, now=NOW, usages=["signing"], groups=[]))
    text = tokens.tabwrite([tokens.HEADER, tokens.row(listed, NOW + timedelta(seconds=1)), tokens.row(forever, NOW)])
    assert text.splitlines() == [
        "TOKEN                     TTL         EXPIRES                USAGES                   DESCRIPTION   EXTRA GROUPS",
        "abcdef.0123456789abcdef   1h          2026-11-27T05:00:00Z   authentication,signing   x             "
        "system:bootstrappers:kubeadm:default-node-token",
        "zyxwvu.0123456789abcdef   <forever>   <never>                signing                  <none>        <none>",
    ]


def kubesvc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The command run in this process (click's runner: no interpreter start per call), its
    outcome as a CompletedProcess."""
    outcome = CliRunner().invoke(main, [str(a) for a in args])
    result = subprocess.CompletedProcess(args, outcome.exit_code, outcome.stdout, outcome.stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"kubesvc {' '.join(map(str, args))}: {result.returncode}\n{result.stdout}\n{result.stderr}\n{outcome.exception!r}")
    return result


def whoami(server, token: str) -> tuple[int, dict]:
    session = server.session(admin=False)
    response = session.post(f"{server.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
                            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                            headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return response.status_code, response.json()


def test_create_list_delete_against_a_real_apiserver(tmp_path):
    with running_apiserver(tmp_path / "data", "--enable-bootstrap-token-auth=true") as server:
        kubeconfig = ["--kubeconfig", server.kubeconfig]
        token = kubesvc("token", "create", *kubeconfig, "--ttl", "2h", "--description", "join m2", "--control-plane").stdout.strip()
        token_id = token.split(".")[0]
        secret = server.kubectl("get", "secret", "-n", "kube-system", f"bootstrap-token-{token_id}", "-o",
                                "jsonpath={.type} {.data.expiration}").stdout.split()
        assert secret[0] == "bootstrap.kubernetes.io/token"
        expires = datetime.fromisoformat(base64.b64decode(secret[1]).decode().replace("Z", "+00:00"))
        assert abs((expires - datetime.now(timezone.utc)) - timedelta(hours=2)) < timedelta(minutes=2)

        code, review = whoami(server, token)
        assert code == 201 and review["status"]["userInfo"]["username"] == f"system:bootstrap:{token_id}"
        assert set(review["status"]["userInfo"]["groups"]) >= {"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token",
                                                               "system:bootstrappers:kubesvc:server"}

        kubesvc("token", "create", *kubeconfig, "abcdef.0123456789abcdef", "--ttl", "0", "--usages", "signing", "--groups", "")
        again = kubesvc("token", "create", *kubeconfig, "abcdef.0123456789abcdef", check=False)
        assert again.returncode == 1 and again.stderr.strip() == 'Error: a token with id "abcdef" already exists'

        lines = kubesvc("token", "list", *kubeconfig).stdout.splitlines()
        assert lines[0].split() == ["TOKEN", "TTL", "EXPIRES", "USAGES", "DESCRIPTION", "EXTRA", "GROUPS"]
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        assert rows[token][1] == "1h" and rows[token][3] == "authentication,signing" and rows[token][4:6] == ["join", "m2"]
        assert rows["abcdef.0123456789abcdef"][1:] == ["<forever>", "<never>", "signing", "<none>", "<none>"]

        out = kubesvc("token", "delete", *kubeconfig, token, "abcdef").stdout
        assert out.splitlines() == [f'bootstrap token "{token_id}" deleted', 'bootstrap token "abcdef" deleted']
        assert kubesvc("token", "list", *kubeconfig).stdout.splitlines()[1:] == []
        # (the apiserver keeps accepting it for up to 10 s: successful token authentications are cached, as upstream's)
        assert server.kubectl("get", "secrets", "-n", "kube-system", "-o", "name").stdout.count("bootstrap-token-") == 0
        gone = kubesvc("token", "delete", *kubeconfig, "abcdef", check=False)
        assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1
        assert gone.stderr.startswith('Error: failed to delete bootstrap token "abcdef": ') and "not found" in gone.stderr
