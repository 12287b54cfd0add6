"""``kubesvc leave``: undo a ``kubesvc join`` of this machine (``kubesvc.nodejoin.system.leave``):
stop it if it runs (its Pods stop, so their endpoints drain; its Node turns NotReady), remove
the proxy's rules and the Pod network, then its credentials, logs and state."""

from __future__ import annotations

from pathlib import Path

import click

from kubesvc.util.process import setup_logging


@click.command("leave")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".kubesvc-node"), show_default=True,
              help="The data directory of the kubesvc join to undo.")
def leave_command(data_dir: Path) -> None:
    """Stop this machine's kubesvc join and remove everything it made here."""
    setup_logging(0)
    from kubesvc.nodejoin.system import leave
    from kubesvc.up import DownRefused

    data_dir = data_dir.resolve()
    try:
        errors = leave(data_dir)
    except DownRefused as refused:
        raise click.ClickException(str(refused)) from None
    if errors:
        raise click.ClickException("cleanup failed: " + "; ".join(errors))
    click.echo(f"kubesvc leave: nothing of {data_dir} left on this machine")
