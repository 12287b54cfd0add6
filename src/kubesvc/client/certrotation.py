"""A component's client certificate renewed under it, taken in place.

``kubesvc join`` renews the node's and kube-proxy's client certificates (``nodejoin/
tlsbootstrap.py``: at 70-90 % of their lifetime, client-go's certificate manager) and rewrites
their kubeconfigs, which embed the pair. The agent, the proxy and the LB announcer keep running:
each watches its ``--kubeconfig`` and, when it holds a new pair, hands it to its ``RestClient``
(``rotate_client_certificate``: new connections present it, open ones are closed), as the
kubelet's transport and client-go's ``cert_rotation.go`` do. A restart would cost the agent
every Pod on the node (it runs them as its children).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from kubesvc.client.kubeconfig import ConfigError, load_kubeconfig
from kubesvc.client.rest import RestClient
from kubesvc.serving.dynamiccert import WATCH_INTERVAL, FileWatch, pair_matches

log = logging.getLogger("kubesvc.client.certrotation")


def client_certificate_watch(kubeconfig: Path, client: RestClient, *, pending: list) -> FileWatch:
    """A watch of ``kubeconfig`` that gives ``client`` the client pair it holds once it differs
    from the one in use (the rotation itself is a coroutine: appended to ``pending``)."""

    def reload() -> bool:
        try:
            config = load_kubeconfig(kubeconfig)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        cert, key = config.client_cert_pem, config.client_key_pem
        if not cert or not key:
            return True  # no client certificate (a token): nothing to rotate
        if (cert, key) == (client.config.client_cert_pem, client.config.client_key_pem):
            return True
        if not pair_matches(cert, key):
            return False
        pending.append(client.rotate_client_certificate(cert, key))
        return True

    return FileWatch([Path(kubeconfig)], reload, what=f"the client certificate of {kubeconfig}")


async def follow_client_certificate(kubeconfig: str | Path, client: RestClient, interval: float = WATCH_INTERVAL) -> None:
    """Until cancelled: rotate ``client`` onto each new pair ``kubeconfig`` holds."""
    pending: list = []
    watch = client_certificate_watch(Path(kubeconfig), client, pending=pending)
    while True:
        await asyncio.sleep(interval)
        watch.check()
        while pending:
            try:
                await pending.pop(0)
            except (OSError, ValueError, ssl.SSLError) as err:  # the pair in use stays; the next change is tried again
                log.warning("cannot use the renewed client certificate of %s: %s", kubeconfig, err)


@contextlib.asynccontextmanager
async def rotating_client_certificate(kubeconfig: str | Path, client: RestClient, interval: float = WATCH_INTERVAL) -> AsyncIterator[None]:
    """``follow_client_certificate`` for the duration of the block."""
    from kubesvc.util.aio import cancel_and_wait

    task = asyncio.create_task(follow_client_certificate(kubeconfig, client, interval))
    try:
        yield
    finally:
        await cancel_and_wait([task])
