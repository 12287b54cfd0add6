"""A client certificate renewed in the kubeconfig is taken by the running client (client-go's
``cert_rotation.go``): the next request presents it, and a watch open on the old connection is
closed so it reconnects with it. Observed by a real TLS server that answers with the serial of
the client certificate each connection presented."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from kubesvc.client.certrotation import rotating_client_certificate
from kubesvc.client.kubeconfig import load_kubeconfig
from kubesvc.client.rest import ConnectionFailed, RestClient
from kubesvc.serving import pki
from kubesvc.serving.listen import listen_socket

USER = "system:node:n1"


def serial_of(pair: pki.KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert.read_bytes()).serial_number


@contextlib.asynccontextmanager
async def server_presenting_client_serials(ca: pki.ClusterCA):
    """An HTTPS server requiring a client certificate of ``ca``: ``/who`` answers the serial of
    the certificate the connection's client presented; ``/watch`` streams until the client goes."""
    serving = ca.ensure("server", pki.CertSpec("server", server=True, ip_addresses=("127.0.0.1",)))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert_path))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(serving.cert, serving.key)

    def presented(request: web.Request) -> int:
        der = request.transport.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number

    async def who(request: web.Request) -> web.Response:
        return web.json_response({"serial": str(presented(request))})

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}}\n')
        await asyncio.sleep(3600)
        return response

    app = web.Application()
    app.router.add_get("/who", who)
    app.router.add_get("/watch", watch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    sock = listen_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock, ssl_context=context).start()
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


async def presented_serial(client: RestClient) -> int:
    return int((await client.get("/who"))["serial"])


async def until(condition, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_renewed_pair_is_presented_by_the_running_client_and_open_watches_reconnect(tmp_path: Path):
    ca = pki.ClusterCA(tmp_path / "ca")
    first, second = (ca.ensure(name, pki.CertSpec.client(pki.node_identity("n1"))) for name in ("first", "second"))
    assert serial_of(first) != serial_of(second)
    kubeconfig = tmp_path / "kubeconfig"
    async with server_presenting_client_serials(ca) as url:
        pki.write_kubeconfig(kubeconfig, url, ca, USER, first)
        async with RestClient(load_kubeconfig(kubeconfig)) as client, rotating_client_certificate(kubeconfig, client, interval=0.05):
            assert await presented_serial(client) == serial_of(first)
            events = client.watch("/watch")
            assert (await anext(events))[0] == "BOOKMARK"  # a watch open on a connection made with the first pair
            ended = asyncio.create_task(anext(events))

            pki.write_kubeconfig(kubeconfig, url, ca, USER, second)  # as the join's rotation replaces it

            await until(lambda: asyncio.sleep(0, ended.done()))
            with pytest.raises(ConnectionFailed):
                ended.result()  # closed: an informer would watch again, on a new connection
            assert await presented_serial(client) == serial_of(second)
            assert client.config.client_cert_pem == second.cert.read_bytes()


async def test_a_kubeconfig_whose_key_is_not_its_certificates_is_not_taken(tmp_path: Path):
    """A pair that does not match (a half-written rotation) leaves the client on its pair."""
    import base64

    import yaml

    ca = pki.ClusterCA(tmp_path / "ca")
    first, second = (ca.ensure(name, pki.CertSpec.client(pki.node_identity("n1"))) for name in ("first", "second"))
    kubeconfig = tmp_path / "kubeconfig"
    async with server_presenting_client_serials(ca) as url:
        pki.write_kubeconfig(kubeconfig, url, ca, USER, first)
        async with RestClient(load_kubeconfig(kubeconfig)) as client, rotating_client_certificate(kubeconfig, client, interval=0.05):
            document = yaml.safe_load(kubeconfig.read_text())
            document["users"][0]["user"]["client-certificate-data"] = base64.b64encode(second.cert.read_bytes()).decode()
            pki.write_private(kubeconfig, yaml.safe_dump(document).encode())
            await asyncio.sleep(0.5)  # ten looks at the file
            assert await presented_serial(client) == serial_of(first)
            pki.write_kubeconfig(kubeconfig, url, ca, USER, second)  # then the whole pair
            await until(lambda: _serial_is(client, serial_of(second)))


async def _serial_is(client: RestClient, serial: int) -> bool:
    try:
        return await presented_serial(client) == serial
    except ConnectionFailed:  # a request in flight when the rotation closed the connections (client-go's CloseAll fails them too)
        return False


async def test_a_pair_named_by_path_is_followed_when_its_files_are_replaced(tmp_path: Path):
    """A kubeconfig naming ``client-certificate``/``client-key`` files (a kubelet's usually does)
    is unchanged by a rotation that replaces those files: the client still takes the new pair,
    as client-go reloads a file-based pair."""
    import yaml

    ca = pki.ClusterCA(tmp_path / "ca")
    first, second = (ca.ensure(name, pki.CertSpec.client(pki.node_identity("n1"))) for name in ("first", "second"))
    cert_file, key_file = tmp_path / "pki" / "client.crt", tmp_path / "pki" / "client.key"
    cert_file.parent.mkdir()
    pki.write_private(key_file, first.key.read_bytes())
    pki.write_private(cert_file, first.cert.read_bytes())
    kubeconfig = tmp_path / "kubeconfig"
    async with server_presenting_client_serials(ca) as url:
        document = pki.kubeconfig_document(url, ca.pem, USER, first)
        document["users"][0]["user"] = {"client-certificate": "pki/client.crt", "client-key": str(key_file)}  # relative and absolute
        pki.write_private(kubeconfig, yaml.safe_dump(document).encode())
        before = kubeconfig.read_bytes()
        async with RestClient(load_kubeconfig(kubeconfig)) as client, rotating_client_certificate(kubeconfig, client, interval=0.05):
            assert await presented_serial(client) == serial_of(first)
            pki.write_private(key_file, second.key.read_bytes())  # a rotation: the key, then the certificate
            await asyncio.sleep(0.3)
            assert await presented_serial(client) == serial_of(first)  # half-replaced: the pair in use stays
            pki.write_private(cert_file, second.cert.read_bytes())
            await until(lambda: _serial_is(client, serial_of(second)))
            assert kubeconfig.read_bytes() == before


async def test_a_rotation_between_the_kubeconfigs_load_and_the_watchs_start_is_taken(tmp_path: Path):
    """The client loaded the first pair; the kubeconfig was rewritten before it began following
    the file: the watch's first look takes the second pair (before, it took what it saw then as
    already loaded and waited for the next rotation)."""
    ca = pki.ClusterCA(tmp_path / "ca")
    first, second = (ca.ensure(name, pki.CertSpec.client(pki.node_identity("n1"))) for name in ("first", "second"))
    kubeconfig = tmp_path / "kubeconfig"
    async with server_presenting_client_serials(ca) as url:
        pki.write_kubeconfig(kubeconfig, url, ca, USER, first)
        async with RestClient(load_kubeconfig(kubeconfig)) as client:
            pki.write_kubeconfig(kubeconfig, url, ca, USER, second)
            async with rotating_client_certificate(kubeconfig, client, interval=0.05):
                await until(lambda: _serial_is(client, serial_of(second)))
