"""``kubesvc token create|list|delete``: bootstrap tokens, as ``kubeadm token`` (the Secrets, the
output and the checks are in ``kubesvc.cluster.tokens``). They talk to the apiserver as the
admin of ``--kubeconfig`` (default: ``<data-dir>/kubeconfig``, the admin kubeconfig of this
machine's ``kubesvc up``, as kubeadm defaults to ``/etc/kubernetes/admin.conf``)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from pathlib import Path

import click

from kubesvc.cmd import flags

SECRETS = "/api/v1/namespaces/kube-system/secrets"


def _kubeconfig_options(fn):
    fn = click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
                      help="The kubeconfig to talk to the cluster with (default: <data-dir>/kubeconfig).")(fn)
    return click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=".kubesvc", show_default=True,
                        help="The data directory of this machine's kubesvc up.")(fn)


def _client(kubeconfig: Path | None, data_dir: Path):
    from kubesvc.client.kubeconfig import load_kubeconfig
    from kubesvc.client.rest import RestClient

    path = kubeconfig or data_dir / "kubeconfig"
    if not path.exists():
        raise click.ClickException(f"no kubeconfig at {path}: pass --kubeconfig, or --data-dir of a running kubesvc up")
    return RestClient(load_kubeconfig(path), user_agent="kubesvc-token", field_manager="kubesvc")


def _run(coro):
    from kubesvc.client.rest import ApiError, ClientError
    from kubesvc.cluster.tokens import TokenError

    try:
        return asyncio.run(coro)
    except TokenError as err:
        raise click.ClickException(str(err)) from None
    except ApiError as err:
        raise click.ClickException(err.message or str(err)) from None
    except ClientError as err:
        raise click.ClickException(f"cannot reach the apiserver: {err}") from None


@click.group("token", context_settings={"help_option_names": ["-h", "--help"]})
def token_command() -> None:
    """Manage bootstrap tokens (kube-system Secrets of type bootstrap.kubernetes.io/token): what
    kubesvc up --server --token presents to join this cluster."""


def _csv(ctx, param, value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@token_command.command("create")
@_kubeconfig_options
@click.option("--ttl", default="24h0m0s", show_default=True, callback=flags.duration,
              help="The duration before the token expires (e.g. 1s, 2m, 3h): the apiserver refuses it from then on (no token "
                   "cleaner deletes its Secret here, as kube-controller-manager's does). If set to '0', the token will never expire.")
@click.option("--usages", default="signing,authentication", show_default=True, callback=_csv,
              help="Describes the ways in which this token can be used (signing, authentication).")
@click.option("--groups", default="system:bootstrappers:kubeadm:default-node-token", show_default=True,
              callback=_csv, help="Extra groups that this token will authenticate as when used for authentication. Must match "
                                  "\"\\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\\z\". The default lets it join a node "
                                  "(kubesvc join) and nothing more.")
@click.option("--control-plane", is_flag=True, default=False,
              help="A token that can also join a server machine (kubesvc up --server): adds system:bootstrappers:kubesvc:server, "
                   "which may read the cluster's CA keys. Give it only to machines that become servers.")
@click.option("--description", default="", help="A human friendly description of how this token is used.")
@click.option("--print-join-command", is_flag=True, default=False,
              help="Instead of printing only the token, print the full 'kubesvc join ...' that joins a node (with --control-plane: "
                   "the 'kubesvc up --server ... --token ...' that joins another server).")
@click.argument("token", required=False)
def create_command(data_dir: Path, kubeconfig: Path | None, ttl: float, usages: list[str], groups: list[str], description: str,
                   control_plane: bool, print_join_command: bool, token: str | None) -> None:
    """Create a bootstrap token on the server and print it (TOKEN: the one to write, [a-z0-9]{6}.[a-z0-9]{16}; default random)."""
    from kubesvc.client.rest import is_already_exists
    from kubesvc.cluster import join, tokens

    token = token or tokens.generate()
    if control_plane and tokens.SERVER_GROUP not in groups:
        groups = [*groups, tokens.SERVER_GROUP]
    secret = _checked(tokens.token_secret, token, ttl=ttl, now=datetime.now(timezone.utc), usages=usages, groups=groups,
                      description=description)

    async def create() -> str | None:
        async with _client(kubeconfig, data_dir) as client:
            server = await join.published_server(client) if print_join_command else None
            if print_join_command and server is None:
                raise tokens.TokenError("this cluster publishes no server to join (no kube-public/cluster-info): "
                                        "it was not started with kubesvc up --cluster-init")
            try:
                await client.create(SECRETS, secret)
            except Exception as err:
                if is_already_exists(err):
                    raise tokens.TokenError(f'a token with id "{token.split(".")[0]}" already exists') from None
                raise
            if "signing" in usages:
                await join.sign(client, *token.split("."))
            return server

    server = _run(create())
    if not print_join_command:
        click.echo(token)
    elif control_plane:
        click.echo(f"kubesvc up --server {server} --token {token}")
    else:
        from kubesvc.nodejoin.discovery import ca_cert_hash

        pin = ca_cert_hash(_run(_published_ca(kubeconfig, data_dir)))
        click.echo(f"kubesvc join {server} --token {token} --discovery-token-ca-cert-hash {pin}")


async def _published_ca(kubeconfig: Path | None, data_dir: Path) -> bytes:
    """The CA ``cluster-info`` publishes (what a joining node will pin)."""
    import base64

    import yaml

    from kubesvc.cluster import join

    async with _client(kubeconfig, data_dir) as client:
        info = await client.get(join.CLUSTER_INFO_PATH)
    return base64.b64decode(yaml.safe_load(info["data"]["kubeconfig"])["clusters"][0]["cluster"]["certificate-authority-data"])


def _checked(fn, *args, **kwargs):
    """``fn(...)``, a TokenError (kubeadm's words) as the command's one-line error."""
    from kubesvc.cluster.tokens import TokenError

    try:
        return fn(*args, **kwargs)
    except TokenError as err:
        raise click.ClickException(str(err)) from None


@token_command.command("list")
@_kubeconfig_options
def list_command(data_dir: Path, kubeconfig: Path | None) -> None:
    """List the bootstrap tokens on the server."""
    from kubesvc.apiserver.auth.bootstrap import SECRET_TYPE
    from kubesvc.cluster import tokens

    async def listed() -> list[dict]:
        async with _client(kubeconfig, data_dir) as client:
            return (await client.list(SECRETS, {"fieldSelector": f"type={SECRET_TYPE}"})).get("items") or []

    now = datetime.now(timezone.utc)
    rows = [tokens.HEADER]
    for secret in _run(listed()):
        if secret.get("type") != SECRET_TYPE:
            continue
        try:
            rows.append(tokens.row(tokens.from_secret(secret), now))
        except tokens.TokenError as err:
            click.echo(str(err), err=True)
    click.echo(tokens.tabwrite(rows), nl=False)


@token_command.command("delete")
@_kubeconfig_options
@click.argument("tokens_or_ids", metavar="[token-value] ...", nargs=-1, required=True)
def delete_command(data_dir: Path, kubeconfig: Path | None, tokens_or_ids: tuple[str, ...]) -> None:
    """Delete bootstrap tokens on the server (each a token [a-z0-9]{6}.[a-z0-9]{16} or its ID [a-z0-9]{6})."""
    from kubesvc.apiserver.auth.bootstrap import SECRET_PREFIX
    from kubesvc.client.rest import ApiError
    from kubesvc.cluster import join, tokens

    ids = [_checked(tokens.token_id_of, t) for t in tokens_or_ids]

    async def delete() -> None:
        async with _client(kubeconfig, data_dir) as client:
            for token_id in ids:
                try:
                    await client.delete(f"{SECRETS}/{SECRET_PREFIX}{token_id}")
                except ApiError as err:
                    raise tokens.TokenError(f'failed to delete bootstrap token "{token_id}": {err.message}') from None
                await join.unsign(client, token_id)
                click.echo(f'bootstrap token "{token_id}" deleted')

    _run(delete())
