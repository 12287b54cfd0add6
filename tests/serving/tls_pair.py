"""A TLS handshake between two ``SSLContext`` objects in memory (no sockets): what OpenSSL
decides about a certificate, exactly as it would on a real connection."""

from __future__ import annotations

import ssl

from kubesvc.serving import pki


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str = "127.0.0.1") -> bytes | None:
    """Run the handshake to the end; the DER of the client certificate the server verified
    (None when the client sent none). ``ssl.SSLError`` when either side refuses."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(s_in, s_out, server_side=True)
    client_side = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    done = {"server": False, "client": False}
    for _ in range(20):
        for name, side, outgoing, peer_in in (("client", client_side, c_out, s_in), ("server", server_side, s_out, c_in)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            data = outgoing.read()
            if data:
                peer_in.write(data)
        if all(done.values()):
            # TLS 1.3: the server learns of a refused client certificate on the first read
            client_side.write(b"x")
            s_in.write(c_out.read())
            server_side.read(1)
            return server_side.getpeercert(binary_form=True)
    raise AssertionError("handshake did not finish")


def client_context(ca: pki.ClusterCA | None, pair: pki.KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca.cert_path) if ca else None)
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key)
    return context


def server_context(pair: pki.KeyPair) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    return context
