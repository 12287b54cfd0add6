"""The ``kubesvc`` binary: one subcommand per component, reachable as ``python -m kubesvc``,
through the console script's ``kubesvc.cmd:main`` and the old ``kubesvc.cli:main``."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from kubesvc import cli
from kubesvc.cmd import main

COMMANDS = ["agent", "apiserver", "controller-manager", "dns", "down", "etcd-snapshot", "explain", "join", "lb-announcer", "leave", "proxy", "token", "trace", "up"]


def test_every_command_is_registered():
    ctx = click.Context(main)
    assert main.list_commands(ctx) == COMMANDS
    assert [main.get_command(ctx, name).name for name in COMMANDS] == COMMANDS
    assert cli.main is main  # installed console scripts that still name kubesvc.cli:main


def test_a_node_command_loads_neither_the_apiserver_nor_the_other_commands():
    """Each command's module is imported when it runs: ``kubesvc proxy`` starts without the
    apiserver, the agent or the controllers (a fresh interpreter, as the binary starts)."""
    code = ("import sys; from kubesvc.cmd import main; ctx = main.make_context('kubesvc', ['proxy', '--help'], resilient_parsing=True); "
            "main.get_command(ctx, 'proxy'); "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('kubesvc.') and m.count('.') >= 1}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = eval(result.stdout)
    assert not {"apiserver", "agent", "controllers"} & set(loaded), loaded


@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_zero(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_python_dash_m_runs_the_same_group():
    result = subprocess.run([sys.executable, "-m", "kubesvc", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert all(command in result.stdout for command in COMMANDS)


def test_a_bad_flag_is_a_usage_error():
    result = CliRunner().invoke(main, ["controller-manager", "--kubeconfig", "/x", "--max-endpoints-per-slice", "0"])
    assert result.exit_code == 2
    assert "max-endpoints-per-slice must not be less than 1, but got 0" in result.output


@pytest.mark.parametrize("argv, message", [
    (["up", "--bogus"], "Error: No such option '--bogus'. (see 'kubesvc up --help')"),
    (["bogus"], "Error: No such command 'bogus'. (see 'kubesvc --help')"),
    (["--bogus"], "Error: No such option '--bogus'. (see 'kubesvc --help')"),
    (["trace"], "Error: Missing argument 'SRC'. (see 'kubesvc trace --help')"),
    (["token", "create", "--ttl", "abc"],
     "Error: Invalid value for '--ttl': time: invalid duration \"abc\" (see 'kubesvc token create --help')"),
], ids=["unknown-flag", "unknown-command", "unknown-group-flag", "missing-argument", "bad-value-in-a-subgroup"])
def test_a_usage_error_is_one_line_and_exit_2(argv, message):
    """The brief's CLI contract: one line and a non-zero exit (click's own format is four lines:
    usage, a hint, a blank line, the error)."""
    result = CliRunner().invoke(main, argv, prog_name="kubesvc")
    assert result.exit_code == 2
    assert result.output.splitlines() == [message]
