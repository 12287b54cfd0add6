"""``kubesvc trace``: a bad DST is a usage error before anything is read from the node."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("dst", ["10.0.0.1:abc", "10.0.0.1:80/icmp", "10.0.0.1:99999", "10.0.0.1:0", "[fd00::1]:x"])
def test_a_bad_destination_port_is_one_line_and_exit_2(dst):
    """Before anything is read from the node: click's usage error, no traceback."""
    from click.testing import CliRunner

    from kubesvc.cmd.trace import trace_command

    result = CliRunner().invoke(trace_command, ["1.2.3.4", dst])
    assert result.exit_code == 2, result.output
    assert "Invalid value for DST" in result.output and "the port must be a number from 1 to 65535" in result.output
    assert "Traceback" not in result.output
