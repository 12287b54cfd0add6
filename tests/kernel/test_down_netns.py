"""``kubesvc down`` cleans only in the network namespace ``kubesvc up`` ran in (issue 16).

Links, routes and kernel rules belong to a network namespace: a ``down`` run anywhere else would
find none of what ``up`` made and could delete what merely has the same name there (a bridge
``cbr0``, a route over the Service range, the kube-proxy tables of the host's own proxy). Here
an up.json records a "machine" namespace; ``kubesvc down`` run (``nsenter --net``) in another
namespace holding a bridge and a route of the same names must exit non-zero with one line and
leave them, and the record, alone; run in the machine's namespace it cleans and succeeds.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from kubesvc.kernel import netns as knetns
from kubesvc.up import STATE_FILE, _write_state
from tests.support.agent import nsenter_argv
from tests.support.netns import REPO_ROOT, Netns, bridge

pytestmark = pytest.mark.kernel

SERVICE_RANGE = "10.96.0.0/12"


@pytest.fixture
def namespaces():
    made = [Netns.create("down-machine"), Netns.create("down-other")]
    try:
        yield made
    finally:
        for ns in made:
            ns.close()


def down_in(ns: Netns, data_dir) -> subprocess.CompletedProcess:
    argv = nsenter_argv(ns.name, sys.executable, "-m", "kubesvc", "down", "--data-dir", str(data_dir))
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def crashed_up_state(data_dir, machine: Netns) -> dict:
    """up.json as a ``kubesvc up`` in ``machine`` leaves it when killed (its process gone)."""
    ident = knetns.identify(knetns.netns_path(machine.name))
    agent_dir = data_dir / "agent" / "network"
    agent_dir.mkdir(parents=True)
    (agent_dir / "podnet.json").write_text(json.dumps({"bridge": "cbr0", "netns_prefix": "kubesvc-", "node_netns": machine.name,
                                                       "pod_cidrs": ["10.244.0.0/24"], "created_bridge": True, "added_addresses": []}))
    state = {"pid": 0, "pid_started": "", "netns": {"dev": ident.dev, "ino": ident.ino, "name": machine.name},
             "agent_state_dir": str(agent_dir), "service_routes": [SERVICE_RANGE]}
    _write_state(data_dir, state)
    return state


def test_down_in_another_network_namespace_refuses_and_touches_nothing(namespaces, tmp_path):
    machine, other = namespaces
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    state = crashed_up_state(data_dir, machine)
    assert stat.S_IMODE(os.stat(data_dir / STATE_FILE).st_mode) == 0o600
    bridge(other, "cbr0", "10.244.0.1/24")  # someone else's bridge and route, named as ours
    other.add_route(SERVICE_RANGE, dev="cbr0")
    before = (other.ip("-o", "link", "show").stdout, other.ip("route").stdout)

    refused = down_in(other, data_dir)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    ident = knetns.identify(knetns.netns_path(machine.name))
    assert len(lines) == 1 and lines[0].startswith(f"Error: refusing to clean up: the kubesvc up of {data_dir} ran in network "
                                                   f"namespace net:[{ident.ino}] (/run/netns/{machine.name}), this is net:["), refused.stderr
    assert lines[0].endswith(f"; run nsenter --net=/run/netns/{machine.name} kubesvc down --data-dir {data_dir}")
    assert (other.ip("-o", "link", "show").stdout, other.ip("route").stdout) == before
    assert json.loads((data_dir / STATE_FILE).read_text()) == state
    assert (data_dir / "agent" / "network" / "podnet.json").exists()

    cleaned = down_in(machine, data_dir)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not (data_dir / STATE_FILE).exists() and not (data_dir / "agent" / "network" / "podnet.json").exists()
    assert (other.ip("-o", "link", "show").stdout, other.ip("route").stdout) == before
