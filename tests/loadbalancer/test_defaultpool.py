"""``kubesvc up --loadbalancer-pool``: the flag's value as pool blocks, and a bad value refused
in one line before anything starts."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kubesvc.cmd.up import up_command
from kubesvc.controllers.loadbalancer.defaultpool import parse_pool_flag


@pytest.mark.parametrize("flag, blocks", [
    ("192.168.50.240-192.168.50.250", [{"start": "192.168.50.240", "stop": "192.168.50.250"}]),
    ("192.168.50.240-192.168.50.250,10.0.8.0/29", [{"start": "192.168.50.240", "stop": "192.168.50.250"}, {"cidr": "10.0.8.0/29"}]),
    ("10.0.8.3/29", [{"cidr": "10.0.8.0/29"}]),
    ("10.0.0.7", [{"start": "10.0.0.7", "stop": "10.0.0.7"}]),
    ("fd00::10-fd00::20, 10.1.0.0/30", [{"start": "fd00::10", "stop": "fd00::20"}, {"cidr": "10.1.0.0/30"}]),
])
def test_flag_values(flag, blocks):
    assert parse_pool_flag(flag) == blocks


@pytest.mark.parametrize("flag, message", [
    ("10.0.0.9-10.0.0.1", "FIRST not after LAST"),
    ("10.0.0.1-fd00::1", "of one family"),
    ("10.0.0.0/33", "is not a CIDR"),
    ("nope", "is not FIRST-LAST, a CIDR or an address"),
    (",", "no addresses given"),
])
def test_bad_values_are_refused_in_one_line(flag, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        parse_pool_flag(flag)
    result = CliRunner().invoke(up_command, ["--data-dir", str(tmp_path / "d"), "--loadbalancer-pool", flag])
    assert result.exit_code == 2
    assert "Invalid value for --loadbalancer-pool" in result.output and message in result.output
    assert not (tmp_path / "d").exists()
