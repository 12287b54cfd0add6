"""A component's client certificate renewed under it, taken in place.

``kubesvc join`` renews the node's and kube-proxy's client certificates (``nodejoin/
tlsbootstrap.py``: at 70-90 % of their lifetime, client-go's certificate manager) and rewrites
their kubeconfigs, which embed the pair. The agent, the proxy and the LB announcer keep running:
each watches its ``--kubeconfig`` and, when it holds a new pair, hands it to its ``RestClient``
(``rotate_client_certificate``: new connections present it, open ones are closed), as the
kubelet's transport and client-go's ``cert_rotation.go`` do. A restart would cost the agent
every Pod on the node (it runs them as its children).

A kubeconfig may instead name its pair by path (``client-certificate: /var/lib/…/client.crt``,
``client-key``, as a kubelet's usually does) and the files be replaced under it: those files
are watched too, as client-go's file-based dynamic certificate reloads them. The loop is
``dynamiccert.watch_forever``, the serving side's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from kubesvc.client.kubeconfig import ConfigError, load_kubeconfig
from kubesvc.client.rest import RestClient
from kubesvc.serving.dynamiccert import WATCH_INTERVAL, FileWatch, pair_matches, watch_forever

def client_certificate_watch(kubeconfig: Path, client: RestClient) -> FileWatch:
    """A watch of ``kubeconfig``, and of the client pair's files when it names them by path,
    that rotates ``client`` onto the pair they hold once it differs from the one in use (the
    rotation is a coroutine, left in the watch's ``pending``). It starts unloaded: the first
    check compares what is there now with the pair ``client`` loaded, so a rotation between that
    load and the watch's start is not missed."""
    watch: FileWatch

    def reload() -> bool:
        try:
            config = load_kubeconfig(kubeconfig)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        watch.paths = [Path(kubeconfig), *config.client_pair_files]
        cert, key = config.client_cert_pem, config.client_key_pem
        if not cert or not key:
            return True  # no client certificate (a token): nothing to rotate
        if (cert, key) == (client.config.client_cert_pem, client.config.client_key_pem):
            return True
        if not pair_matches(cert, key):
            return False
        watch.pending.append(client.rotate_client_certificate(cert, key))
        return True

    watch = FileWatch([Path(kubeconfig), *client.config.client_pair_files], reload,
                      what=f"client certificate of {kubeconfig}", loaded=False)
    return watch


async def follow_client_certificate(kubeconfig: str | Path, client: RestClient, interval: float = WATCH_INTERVAL) -> None:
    """Until cancelled: rotate ``client`` onto each new pair ``kubeconfig`` holds."""
    await watch_forever([client_certificate_watch(Path(kubeconfig), client)], interval)


@contextlib.asynccontextmanager
async def rotating_client_certificate(kubeconfig: str | Path, client: RestClient, interval: float = WATCH_INTERVAL) -> AsyncIterator[None]:
    """``follow_client_certificate`` for the duration of the block."""
    from kubesvc.util.aio import cancel_and_wait

    task = asyncio.create_task(follow_client_certificate(kubeconfig, client, interval))
    try:
        yield
    finally:
        await cancel_and_wait([task])
