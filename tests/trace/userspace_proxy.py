"""A userspace-mode proxy for ``tests/kernel/test_trace_side_by_side.py``, run as a process
inside the node namespace (``python -m tests.trace.userspace_proxy``): its listeners must live
in that namespace, where the nat table redirects to them, and relay from there. It programs the
test's Services with the real ``UserspaceBackend`` (publishing its portals for ``kubesvc
trace``), prints ``synced`` and relays until SIGTERM, then closes (which removes the published
state)."""

from __future__ import annotations

import asyncio
import signal


async def main() -> None:
    from kubesvc.kernel.fake.iptables import TEST_NODE_NAME
    from kubesvc.proxy.metrics import ProxyMetrics
    from kubesvc.proxy.proxier import Proxier
    from kubesvc.proxy.userspace.proxier import UserspaceBackend
    from tests.kernel.test_trace_side_by_side import CIDRS, services
    from tests.support.builders import options
    from tests.support.builders import request as sync_request
    from tests.support.netns import NODE_IP, POD_CIDR

    opts = options(POD_CIDR, node_name=TEST_NODE_NAME)
    backend = UserspaceBackend(opts, publish_state=True)
    await Proxier(backend, opts, ProxyMetrics()).run_sync(sync_request(services(), service_cidrs=CIDRS, node_ip=NODE_IP))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("synced", flush=True)
    await stop.wait()
    await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
