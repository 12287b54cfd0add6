"""The ``kubesvc`` command: one binary, one subcommand per component (as kube-apiserver,
kube-controller-manager, kube-proxy and kubelet are separate binaries upstream), plus ``up``
and ``down``.

One module per command; ``flags.py`` holds the flag parsing they share (feature gates, Go
durations, CIDR and IP pairs, kubeconfig loading). Flags keep upstream names. Bad flags or a
failed start print one line and exit non-zero. Each command imports its component only when
it runs, so ``kubesvc proxy`` does not load the apiserver.
"""

from __future__ import annotations

import click

from kubesvc.cmd.agent import agent_command
from kubesvc.cmd.apiserver import apiserver_command
from kubesvc.cmd.controller_manager import controller_manager_command
from kubesvc.cmd.down import down_command
from kubesvc.cmd.proxy import proxy_command
from kubesvc.cmd.up import up_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kubesvc")
def main() -> None:
    """kubesvc: Kubernetes Service networking (apiserver, controllers, node proxy)."""


for _command in (apiserver_command, up_command, down_command, controller_manager_command, proxy_command, agent_command):
    main.add_command(_command)
