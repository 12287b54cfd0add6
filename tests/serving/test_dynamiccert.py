"""A serving pair renewed in its files is presented from the next handshake on, by the same
server (``DynamicCertKeyPairContent``, the kubelet's ``ReloadKubeletServerCertificateFile``);
a pair caught half-replaced is not taken. Observed over real TLS connections: the certificate a
client receives."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from aiohttp import web
from cryptography import x509

from kubesvc.agent.agent import AgentConfig
from kubesvc.serving import pki
from kubesvc.serving.dynamiccert import serving_pair_watch
from kubesvc.serving.listen import listen_socket


def serving_spec(name: str) -> pki.CertSpec:
    return pki.CertSpec(name, server=True, ip_addresses=("127.0.0.1",))


async def presented(port: int) -> x509.Certificate:
    """The certificate the server at ``port`` presents to a new connection."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        return x509.load_der_x509_certificate(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
    finally:
        writer.close()


async def serving(context: ssl.SSLContext) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(web.Application(), shutdown_timeout=0.1)
    await runner.setup()
    sock = listen_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock, ssl_context=context).start()
    return runner, sock.getsockname()[1]


def install(pair: pki.KeyPair, cert: Path, key: Path, *, key_only: bool = False) -> None:
    pki.write_private(key, pair.key.read_bytes())
    if not key_only:
        pki.write_private(cert, pair.cert.read_bytes())


async def test_a_renewed_pair_is_served_to_new_connections_and_a_half_written_one_is_not(tmp_path: Path):
    ca = pki.ClusterCA(tmp_path / "ca")
    first, second, third = (ca.ensure(name, serving_spec(name)) for name in ("first", "second", "third"))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    install(first, cert, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    watch = serving_pair_watch(context, cert, key)
    runner, port = await serving(context)
    try:
        assert (await presented(port)).subject.rfc4514_string() == "CN=first"
        assert not watch.check()  # nothing changed

        install(second, cert, key)
        assert watch.check()
        assert (await presented(port)).subject.rfc4514_string() == "CN=second"

        install(third, cert, key, key_only=True)  # a rotation between its two renames
        assert not watch.check()
        assert (await presented(port)).subject.rfc4514_string() == "CN=second"
        pki.write_private(cert, third.cert.read_bytes())
        assert watch.check()
        assert (await presented(port)).subject.rfc4514_string() == "CN=third"
    finally:
        await runner.cleanup()


async def test_the_agent_serves_a_self_signed_pair_until_the_rotated_one_is_written(tmp_path: Path):
    """``--rotate-server-certificates``: the pair ``kubesvc join`` gets issued appears in
    ``--cert-dir`` after the agent started; the same log server presents it from then on."""
    ca = pki.ClusterCA(tmp_path / "ca")
    issued = ca.node_serving("n1", ["127.0.0.1"])
    config = AgentConfig(node_name="n1", pod_cidrs=["10.244.0.0/24"], node_ips=["127.0.0.1"], data_dir=tmp_path / "agent",
                         rotate_server_certificates=True, cert_dir=tmp_path / "pki")
    files = config.serving_pair_files()
    assert files == (tmp_path / "pki" / "kubelet-server.crt", tmp_path / "pki" / "kubelet-server.key")
    context = config.serving_context()
    watch = serving_pair_watch(context, *files)
    runner, port = await serving(context)
    try:
        before = await presented(port)
        assert before.issuer.rfc4514_string().startswith("CN=n1@")  # self-signed (kubelet's <hostname>@<unix time>), not the CA's
        assert not watch.check()
        install(issued, *files)
        assert watch.check()
        after = await presented(port)
        assert after.issuer == ca.cert.subject and after.subject.rfc4514_string() == "CN=system:node:n1,O=system:nodes"
    finally:
        await runner.cleanup()


def test_files_whose_content_was_refused_are_read_again_only_once_they_change(tmp_path: Path):
    from kubesvc.serving.dynamiccert import FileWatch

    path = tmp_path / "f"
    path.write_text("half")
    answers, asked = iter([False, True]), []

    def reload() -> bool:
        asked.append(path.read_text())
        return next(answers)

    watch = FileWatch([path], reload, what="f")
    assert not watch.check() and asked == []  # unchanged since the start
    pki.write_private(path, b"partial")
    assert not watch.check() and not watch.check() and asked == ["partial"]  # refused: not read again while the same
    pki.write_private(path, b"whole")
    assert watch.check() and asked == ["partial", "whole"]
    assert not watch.check() and asked == ["partial", "whole"]
