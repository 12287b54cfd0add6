"""``kubesvc down``: undo what a ``kubesvc up`` made (after a crash, or to stop a running one),
from the state it recorded in its data directory (``kubesvc.up.down``)."""

from __future__ import annotations

from pathlib import Path

import click

from kubesvc.util.process import setup_logging


@click.command("down")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True,
              help="The data directory of the kubesvc up to undo.")
def down_command(data_dir: Path) -> None:
    """Remove every namespace, link, kernel rule and route a kubesvc up made (after a crash, or to stop one)."""
    setup_logging(0)
    from kubesvc.up import DownRefused, down as undo

    try:
        errors = undo(data_dir.resolve())
    except DownRefused as refused:  # another network namespace than up's: nothing touched
        raise click.ClickException(str(refused)) from None
    if errors:
        raise click.ClickException("cleanup failed: " + "; ".join(errors))
    click.echo(f"kubesvc down: nothing of {data_dir} left running")
