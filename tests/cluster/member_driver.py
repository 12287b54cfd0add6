"""``python -m tests.cluster.member_driver --data-dir D --address IP [--join URL ...]``: one
machine's etcd member through ``kubesvc.cluster.etcd_process``, run by the tests inside that
machine's network namespace (gRPC makes its sockets on threads of its own, so the test process
cannot reach a namespace's addresses itself). Prints ``ready <name> <member id hex>`` once the
member serves (a voter), stops it on SIGTERM; a failure is its one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from kubesvc.cluster.etcd_process import EtcdFailed, start_member, stop_member
from kubesvc.cmd.supervisor import Supervisor
from kubesvc.util.process import stop_on_signals


async def main(args) -> int:
    stop = stop_on_signals()
    supervisor = Supervisor(Path(args.data_dir) / "logs", echo=lambda text: None)
    try:
        member = await start_member(supervisor, Path(args.data_dir), args.address, join=args.join or (), hostname=args.hostname,
                                    promote_timeout=args.promote_timeout)
    except EtcdFailed as err:
        await supervisor.close()
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    print(f"ready {member.spec.name} {member.member_id:x}", flush=True)
    await stop.wait()
    await stop_member(supervisor)
    await supervisor.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--join", action="append")
    parser.add_argument("--hostname", default="machine")
    parser.add_argument("--promote-timeout", type=float, default=60.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
