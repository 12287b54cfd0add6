"""After a certificate rotation the join restarts its agent and proxy (they read the
credential at start): each gets SIGTERM and the supervisor starts it again with the same
arguments, as it restarts a component that died. Stand-in components: small shells."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from kubesvc.cmd.supervisor import BackoffPolicy, Supervisor
from kubesvc.nodejoin.system import JoinOptions, JoinSystem


async def test_restart_components_restarts_agent_and_proxy_with_the_same_arguments(tmp_path: Path):
    supervisor = Supervisor(tmp_path / "logs", policy=BackoffPolicy(), echo=lambda text: None)
    system = JoinSystem(JoinOptions(server="https://192.0.2.1:6443", token="abcdef.0123456789abcdef", data_dir=tmp_path,
                                    node_name="n", node_ips=["192.0.2.2"]), supervisor=supervisor)
    argv = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]
    try:
        for name in ("agent", "proxy"):
            await supervisor.start(name, argv, ready_timeout=30)
        before = {name: supervisor.components[name].process.pid for name in ("agent", "proxy")}
        await system.restart_components()
        for _ in range(300):
            after = {name: supervisor.components[name].process.pid for name in ("agent", "proxy")}
            if all(after[n] != before[n] and supervisor.components[n].process.returncode is None for n in after):
                break
            await asyncio.sleep(0.1)
        assert all(after[n] != before[n] for n in after), (before, after)
        assert all(supervisor.components[n].argv == argv for n in after)
    finally:
        await supervisor.stop(["agent", "proxy"], 5)
        await supervisor.close()
