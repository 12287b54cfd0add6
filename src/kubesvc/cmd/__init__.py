"""The ``kubesvc`` command: one binary, one subcommand per component (as kube-apiserver,
kube-controller-manager, kube-proxy and kubelet are separate binaries upstream), plus ``up``
and ``down``.

One module per command; ``flags.py`` holds the flag parsing they share (feature gates, Go
durations, CIDR and IP pairs, kubeconfig loading). Flags keep upstream names. Bad flags or a
failed start print one line and exit non-zero. A command's module is imported only when that
command runs (or ``--help`` lists them all), so ``kubesvc proxy`` does not load the apiserver.
"""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" of its click command
COMMANDS = {
    "agent": "kubesvc.cmd.agent:agent_command",
    "apiserver": "kubesvc.cmd.apiserver:apiserver_command",
    "controller-manager": "kubesvc.cmd.controller_manager:controller_manager_command",
    "dns": "kubesvc.cmd.dns:dns_command",
    "down": "kubesvc.cmd.down:down_command",
    "etcd-snapshot": "kubesvc.cmd.etcd_snapshot:etcd_snapshot_command",
    "explain": "kubesvc.cmd.explain:explain_command",
    "join": "kubesvc.cmd.join:join_command",
    "leave": "kubesvc.cmd.leave:leave_command",
    "lb-announcer": "kubesvc.cmd.lb_announcer:lb_announcer_command",
    "proxy": "kubesvc.cmd.proxy:proxy_command",
    "token": "kubesvc.cmd.token:token_command",
    "trace": "kubesvc.cmd.trace:trace_command",
    "up": "kubesvc.cmd.up:up_command",
}


class OneLineUsageError(click.ClickException):
    """A bad flag or argument: one line on stderr and exit code 2 (click's own usage error
    prints the usage, a hint and a blank line before the error)."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True, file=file)


def _one_line(error: click.UsageError) -> OneLineUsageError:
    where = error.ctx.command_path if error.ctx is not None else "kubesvc"
    return OneLineUsageError(f"{error.format_message()} (see '{where} --help')")


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's lazy-loading pattern), and
    whose usage errors (its own and its commands') are one line."""

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:
            raise _one_line(error) from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line(error) from None

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kubesvc")
def main() -> None:
    """kubesvc: Kubernetes Service networking (apiserver, controllers, node proxy)."""
