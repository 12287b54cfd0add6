"""``kubesvc up``'s cluster flags: what goes together, and that none of them reaches the
apiserver's command line (up derives the apiserver's etcd flags itself)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from kubesvc.cmd import main


def up(*args: str):
    return CliRunner().invoke(main, ["up", *args])


@pytest.mark.parametrize("args, message", [
    (["--cluster-init", "--server", "https://10.0.0.1:6443", "--token", "abcdef.0123456789abcdef"],
     "--cluster-init starts a cluster and --server joins one: give one of them"),
    (["--server", "https://10.0.0.1:6443"], "--server needs --token (print one on a server with: kubesvc token create)"),
    (["--token", "abcdef.0123456789abcdef"], "--token goes with --server"),
    (["--server", "10.0.0.1:6443", "--token", "abcdef.0123456789abcdef"], "is not an https:// URL of a server machine"),
    (["--cluster-init", "--storage-backend", "memory"], "drop --storage-backend"),
], ids=["both", "server-without-token", "token-without-server", "not-https", "storage-backend"])
def test_refused_before_anything_starts(args, message, tmp_path):
    result = up("--data-dir", str(tmp_path / "d"), *args)
    assert result.exit_code == 2 and message in result.output.splitlines()[-1], result.output
    assert not (tmp_path / "d").exists()


def test_cluster_flags_stay_with_up():
    from kubesvc.up import apiserver_args

    config = SimpleNamespace(data_dir="/d", bind_address="0.0.0.0", advertise_address="10.0.0.2")
    given = ["--server", "https://10.0.0.1:6443", "--token=abcdef.0123456789abcdef", "--cluster-init", "-v", "2"]
    assert apiserver_args(given, config) == ["-v", "2", "--data-dir", "/d", "--bind-address", "0.0.0.0", "--advertise-address", "10.0.0.2"]


@pytest.mark.kernel
def test_a_server_that_cannot_be_asked_is_one_line_and_leaves_nothing(tmp_path):
    """``up --server`` asks the server for the cluster's authorities with the token before it
    makes anything: a refusal (here nothing listens) is the one error line, no progress lines
    of a start that never began, and no data directory (found walking the README as a user)."""
    import subprocess
    import sys

    from tests.support.agent import nsenter_argv
    from tests.support.netns import REPO_ROOT, Netns

    ns = Netns.create("upsrv")
    try:
        data_dir = tmp_path / "never"
        argv = nsenter_argv(ns.name, sys.executable, "-m", "kubesvc", "up", "--data-dir", str(data_dir),
                            "--server", "https://127.0.0.1:9", "--token", "abcdef.0123456789abcdef")
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    finally:
        ns.close()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith("Error: cannot start: "), result.stderr
    assert not data_dir.exists()
