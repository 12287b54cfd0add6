"""``kubesvc explain``'s command line: what it accepts as a Service, and one line for what it
cannot do (the findings themselves: tests/explain, and tests/kernel/test_explain_up.py)."""

from __future__ import annotations

from click.testing import CliRunner

from kubesvc.cmd import main


def run(*args: str):
    return CliRunner().invoke(main, ["explain", *args])


def test_only_services_are_explained():
    result = run("deploy/web")
    assert result.exit_code == 2
    assert "'deploy/web': only Services can be explained (svc/NAME)" in result.output


def test_a_missing_kubeconfig_is_one_line(tmp_path):
    result = run("svc/web", "--kubeconfig", str(tmp_path / "none"))
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot load kubeconfig {tmp_path / 'none'}: ")
    assert len(result.output.strip().splitlines()) == 1


def test_an_unreachable_api_is_one_line(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
                      "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    result = run("svc/web", "--kubeconfig", str(config))
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach the API: ")
    assert len(result.output.strip().splitlines()) == 1
