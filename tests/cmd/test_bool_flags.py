"""Bool flags read as pflag reads them (strconv.ParseBool), not as click.BOOL (which took
``yes``/``on``/``y``)."""

import click
import pytest
from click.testing import CliRunner

from kubesvc.cmd import flags


@click.command()
@flags.bool_option("--masquerade-all", help="")
def show(masquerade_all):
    click.echo(repr(masquerade_all))


@pytest.mark.parametrize(("args", "shown"), [
    ([], "None"), (["--masquerade-all"], "True"), (["--masquerade-all=true"], "True"), (["--masquerade-all=T"], "True"),
    (["--masquerade-all=1"], "True"), (["--masquerade-all=false"], "False"), (["--masquerade-all=0"], "False"),
])
def test_accepted(args, shown):
    result = CliRunner().invoke(show, args)
    assert (result.exit_code, result.output.strip()) == (0, shown)


@pytest.mark.parametrize("value", ["yes", "on", "y", "no"])
def test_refused_as_pflag_refuses(value):
    result = CliRunner().invoke(show, [f"--masquerade-all={value}"])
    assert result.exit_code == 2
    assert f'strconv.ParseBool: parsing "{value}": invalid syntax' in result.output
