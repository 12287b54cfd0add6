"""Certificates reloaded in place when their files change, so a rotation restarts nothing.

Upstream, a renewed certificate never restarts the kubelet or kube-proxy:

* the serving side (``k8s.io/apiserver/pkg/server/dynamiccertificates``,
  ``DynamicCertKeyPairContent``; the kubelet's ``--tls-cert-file`` with the
  ``ReloadKubeletServerCertificateFile`` gate, on by default since 1.31) watches the cert and key
  files and hands each new TLS handshake the current pair (``GetCertificate``); connections
  already open keep theirs;
* the client side (client-go ``transport/cert_rotation.go``, and the kubelet's
  ``UpdateTransport`` over its certificate manager) loads the new pair for new connections and
  then closes the open ones ("certificate rotation detected, shutting down client connections
  to start using new credentials") so every request and watch reconnects with it.

Here an ``ssl.SSLContext`` is that ``GetCertificate``: ``load_cert_chain`` on a context in use
changes the pair every later handshake presents. ``FileWatch`` notices a change by the files'
(inode, size, mtime), as fsnotify would, polled every ``WATCH_INTERVAL`` (a ``stat`` of two or
three files: nothing next to a handshake). A pair caught half-replaced (a rotation renames the
key, then the certificate) does not match: it is left alone, the old pair stays in use and the
next poll tries again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from kubesvc.serving.pki import load_pair_into

log = logging.getLogger("kubesvc.serving.dynamiccert")

WATCH_INTERVAL = 2.0  # seconds between stat()s of the watched files (upstream: fsnotify, and a poll each minute)


def file_signature(paths: list[Path]) -> tuple:
    """What changes when any of ``paths`` is replaced or rewritten (None for a missing file)."""
    signature = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            signature.append(None)
            continue
        signature.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(signature)


class FileWatch:
    """Calls ``reload()`` when the files at ``paths`` changed since the last successful call.
    ``reload`` returns False (or raises OSError/ValueError/ssl.SSLError) for content it could
    not use yet: it is asked again once the files change again (the second rename of a rotation),
    not at every ``check`` (nor said again in the log).

    ``loaded=False``: the content was read before the watch began (a client loaded its
    kubeconfig, then started following it), so the first ``check`` reloads whatever is there: a
    rotation landing in between is taken then, not missed until the next one. ``reload`` may
    change ``paths`` (a kubeconfig that now names other files) and may leave coroutines in
    ``pending`` (a client's rotation is one): ``watch_forever`` awaits them after the check."""

    def __init__(self, paths: list[Path], reload: Callable[[], bool], *, what: str, loaded: bool = True):
        self.paths = [Path(p) for p in paths]
        self.reload = reload
        self.what = what
        self.pending: list[Awaitable] = []
        self._seen = file_signature(self.paths) if loaded else None
        self._refused: tuple | None = None  # files whose content reload could not use: tried again once they change

    def check(self) -> bool:
        """True when the files changed and ``reload`` took the new content."""
        paths = list(self.paths)
        now = file_signature(paths)
        if now == self._seen or now == self._refused:
            return False
        try:
            taken = self.reload()
        except (OSError, ValueError, ssl.SSLError) as err:
            log.info("%s changed but cannot be loaded yet (%s); keeping the current one", self.what, err)
            taken = False
        if self.paths != paths:  # reload now follows other files: what it read is theirs
            now = file_signature(self.paths)
        if taken:
            self._seen = now
        else:
            self._refused = now
        return taken

    async def settle(self) -> None:
        """Await the work ``reload`` left; a failure leaves the content in use as it is (the
        next change of the files is tried again)."""
        while self.pending:
            try:
                await self.pending.pop(0)
            except (OSError, ValueError, ssl.SSLError) as err:
                log.warning("cannot use the new %s: %s", self.what, err)


async def watch_forever(watches: list[FileWatch], interval: float = WATCH_INTERVAL) -> None:
    """Check each watch every ``interval`` seconds, and await what its reload left (a task:
    cancel it to stop)."""
    while True:
        await asyncio.sleep(interval)
        for watch in watches:
            watch.check()
            await watch.settle()


def pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """The private key is the certificate's (a pair read between the two renames is not)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki)


def serving_pair_watch(context: ssl.SSLContext, cert_file: Path, key_file: Path, *, what: str = "the serving certificate") -> FileWatch:
    """A watch that loads the pair at (``cert_file``, ``key_file``) into the serving
    ``context`` when the files change (``DynamicCertKeyPairContent``)."""

    def reload() -> bool:
        cert_pem, key_pem = Path(cert_file).read_bytes(), Path(key_file).read_bytes()
        if not pair_matches(cert_pem, key_pem):
            log.info("%s at %s and its key do not match (yet); keeping the current pair", what, cert_file)
            return False
        load_pair_into(context, cert_pem, key_pem)
        log.info("loaded %s from %s: new connections are served with it", what, cert_file)
        return True

    return FileWatch([cert_file, key_file], reload, what=what)
