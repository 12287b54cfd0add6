"""``kubesvc etcd-snapshot save|restore``: back up and restore this machine's etcd member (k3s's
command; the behaviour and what a restore on etcd 3.4.23 means for clients are in
``kubesvc.cluster.snapshot``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

DATA_DIR = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True,
                        help="The data directory of this machine's kubesvc up (its etcd member and certificates).")


@click.group("etcd-snapshot", context_settings={"help_option_names": ["-h", "--help"]})
def etcd_snapshot_command() -> None:
    """Save and restore snapshots of the etcd member of a kubesvc up --cluster-init / --server machine."""


@etcd_snapshot_command.command("save")
@DATA_DIR
@click.option("--name", default="on-demand", show_default=True, help="The snapshot's name prefix (<name>-<member>-<unix time>).")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to write it (default: <data-dir>/etcd-snapshots).")
@click.option("--etcd-servers", default="", help="Comma-separated client URLs to snapshot from (default: this machine's member).")
def save_command(data_dir: Path, name: str, directory: Path | None, etcd_servers: str) -> None:
    """Write a snapshot of the etcd database (a 0600 file: it holds every Secret)."""
    import time

    from kubesvc.cluster import etcd_member as em
    from kubesvc.cluster.snapshot import SnapshotFailed, save, snapshot_path

    spec = em.load_spec(data_dir)
    path = snapshot_path(data_dir, spec.name if spec else "etcd", time.time(), directory, name)
    try:
        saved = asyncio.run(save(data_dir, path=path, endpoints=[u.strip() for u in etcd_servers.split(",") if u.strip()]))
    except (SnapshotFailed, OSError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"Snapshot saved at {saved.path}")


@etcd_snapshot_command.command("restore", help="""Make this machine's etcd member a one-member cluster holding SNAPSHOT (its
previous data moved to <data-dir>/etcd/data-old-<time>). Stop kubesvc up first; afterwards start
it with --cluster-init, and on every other server delete <data-dir>/etcd and join again with
--server. etcd 3.4.23 cannot bump the revision on restore (--bump-revision came in 3.4.27):
resourceVersions go back to the snapshot's and are reused, so restart every apiserver and let
every client relist.""")
@DATA_DIR
@click.option("--address", default=None, help="This machine's IP, when the data directory has no etcd member yet.")
@click.argument("snapshot", type=click.Path(dir_okay=False, path_type=Path))
def restore_command(data_dir: Path, address: str | None, snapshot: Path) -> None:
    from kubesvc.cluster.snapshot import SnapshotFailed, restore

    try:
        old = restore(data_dir, snapshot, address=address)
    except (SnapshotFailed, OSError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"restored {snapshot} into {data_dir / 'etcd' / 'data'}" + (f" (the previous data is in {old})" if old else ""))
    click.echo("next: kubesvc up --cluster-init here; on every other server delete <data-dir>/etcd and run kubesvc up --server ... --token ...")
