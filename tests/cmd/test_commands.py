"""The ``kubesvc`` binary: one subcommand per component, reachable as ``python -m kubesvc``,
through the console script's ``kubesvc.cmd:main`` and the old ``kubesvc.cli:main``."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from kubesvc import cli
from kubesvc.cmd import main

COMMANDS = ["agent", "apiserver", "controller-manager", "down", "proxy", "up"]


def test_every_command_is_registered():
    assert sorted(main.commands) == COMMANDS
    assert cli.main is main  # installed console scripts that still name kubesvc.cli:main


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
