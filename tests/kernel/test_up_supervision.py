"""``kubesvc up`` runs each component as a process of its own and supervises them (issue 17), in
a network namespace of the test's own standing in for the machine:

* the apiserver, controller-manager, agent and proxy are four child processes of ``up``, and
  with ``--loadbalancer-pool`` a fifth, the node's ``lb-announcer``: a LoadBalancer Service gets
  the pool's address and this node holds its Lease in ``kubesvc-lb``;
* a component killed with SIGKILL is started again, and ``up``'s log says which one, with
  its pid and the signal; its log file under ``<data-dir>/logs`` shows both runs; a killed
  apiserver comes back on the same address, so ``kubectl`` works again with the same kubeconfig,
  and a killed proxy programs the Services again;
* Ctrl-C (SIGINT to ``up``) ends every process ``up`` ever started and leaves the namespace as
  it was (links, routes, nftables tables, iptables rules).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.support.netns import wait_until
from tests.support.up import Machine, snapshot

pytestmark = pytest.mark.kernel

COMPONENTS = {"apiserver", "controller-manager", "agent", "proxy", "lb-announcer"}
POOL = "192.168.79.10-192.168.79.11"  # answered for (ARP) inside the machine's namespace only


@pytest.fixture
def machine(tmp_path):
    from tests.support.netns import Netns

    made = Machine(Netns.create("upsup"), tmp_path)
    try:
        yield made
    finally:
        made.teardown()


def components(up_pid: int) -> dict[str, int]:
    """The ``kubesvc <component>`` children of ``up``: name -> pid."""
    found = {}
    for task in os.listdir(f"/proc/{up_pid}/task"):
        for child in Path(f"/proc/{up_pid}/task/{task}/children").read_text().split():
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kubesvc" in argv and len(argv) > argv.index(b"kubesvc") + 1:
                found[argv[argv.index(b"kubesvc") + 1].decode()] = int(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def whole_log(machine: Machine) -> str:
    return machine.log_path.read_text(errors="replace")


def restarted(machine: Machine, name: str, old_pid: int) -> int:
    """Wait until component ``name`` runs again under a new pid; that pid."""
    def again():
        pid = components(machine.process.pid).get(name)
        return pid if pid not in (None, old_pid) else None

    return wait_until(again, 30, f"{name} started again", interval=0.1)


def test_killed_components_are_restarted_and_logged_and_ctrl_c_ends_every_process(machine):
    before = snapshot(machine.ns)
    machine.up(extra=("--loadbalancer-pool", POOL))
    first = components(machine.process.pid)
    assert set(first) == COMPONENTS, first
    seen = set(first.values())

    # the announcer, as up runs it (kube-proxy's identity), wins the Lease of the Service's address
    machine.kubectl("create", "service", "loadbalancer", "lb", "--tcp=80:8080")
    wait_until(lambda: machine.get("service", "lb").get("status", {}).get("loadBalancer", {}).get("ingress"), 30, "lb's address")
    assert machine.get("service", "lb")["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.168.79.10"
    node = machine.get("nodes")["items"][0]["metadata"]["name"]
    holder = lambda: machine.get("lease", "-n", "kubesvc-lb", "kubesvc-lb-192-168-79-10").get("spec", {}).get("holderIdentity")  # noqa: E731
    wait_until(lambda: machine.kubectl("get", "lease", "-n", "kubesvc-lb", "kubesvc-lb-192-168-79-10", check=False).returncode == 0
               and holder() == node, 30, f"{node} holding the address's Lease")

    # the proxy, SIGKILLed: started again, logged with its pid and the signal, and it programs a new Service
    os.kill(first["proxy"], signal.SIGKILL)
    proxy = restarted(machine, "proxy", first["proxy"])
    seen.add(proxy)
    wait_until(lambda: f"proxy (pid {first['proxy']}) exited with signal 9 (SIGKILL)" in whole_log(machine), 10, "the proxy's exit logged")
    assert "restarting in 1s (restart 1)" in whole_log(machine)
    proxy_log = (machine.data_dir / "logs" / "proxy.log").read_text()
    wait_until(lambda: (machine.data_dir / "logs" / "proxy.log").read_text().count("kubesvc proxy running in") == 2, 60,
               f"the second proxy announced in its log file:\n{proxy_log}")
    machine.kubectl("create", "service", "clusterip", "after-restart", "--tcp=80:8080")
    vip = machine.cluster_ip("after-restart")
    wait_until(lambda: vip in machine.ns.run("nft", "list", "ruleset").stdout + machine.ns.run("iptables-save").stdout, 30,
               f"the restarted proxy programs {vip}")

    # the apiserver, SIGKILLed: back on the same address; kubectl works with the same kubeconfig
    os.kill(first["apiserver"], signal.SIGKILL)
    seen.add(restarted(machine, "apiserver", first["apiserver"]))
    wait_until(lambda: machine.kubectl("get", "service", "after-restart", check=False).returncode == 0, 60, "kubectl answered again")
    assert f"apiserver (pid {first['apiserver']}) exited with signal 9 (SIGKILL)" in whole_log(machine)
    seen |= set(components(machine.process.pid).values())

    # Ctrl-C: every process up ever started is gone, and so is everything it made
    code, took = machine.interrupt()
    assert code == 0, f"kubesvc up exited {code} after SIGINT ({took:.1f}s):\n{machine.log()}"
    assert took < 20, f"kubesvc up took {took:.1f}s to stop"
    assert [pid for pid in seen if alive(pid)] == []
    assert snapshot(machine.ns) == before
