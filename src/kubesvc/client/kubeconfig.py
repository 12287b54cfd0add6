"""Loading a kubeconfig: which server to talk to, how to trust it, and who we are.

A kubeconfig (client-go's ``clientcmd``) holds three named lists and a pointer:

* ``clusters``: where a server is (``server: https://…``) and how to verify it
  (``certificate-authority`` file, inline ``certificate-authority-data``, or
  ``insecure-skip-tls-verify: true``);
* ``users``: credentials: a bearer ``token`` (or a ``tokenFile`` to read it from), and/or a
  client certificate (``client-certificate(-data)`` + ``client-key(-data)``);
* ``contexts``: a (cluster, user, namespace) triple under a name;
* ``current-context``: the context used unless one is asked for by name.

Where it comes from, as kubectl decides: an explicit path, else ``$KUBECONFIG`` (a
``os.pathsep``-separated list of files, merged so that the first file to define a name wins,
and the first ``current-context`` set wins), else ``~/.kube/config``. Relative file paths
inside a kubeconfig are relative to the file that names them. ``*-data`` fields are base64.

Every problem becomes one ``ConfigError`` naming the file and the fault, e.g.
``kubeconfig /x: context "foo" not found``.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_NAMESPACE = "default"


class ConfigError(Exception):
    """The kubeconfig is missing, unreadable, or does not describe a usable connection."""


@dataclass(frozen=True)
class ClientConfig:
    """Everything a ``RestClient`` needs: the server URL, TLS material and credentials.

    Certificates are held as PEM bytes (files are read at load time), so a config is a value
    that can be passed around and compared.
    """

    server: str
    token: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    # the files the client pair was read from, when the kubeconfig names them by path
    # (``client-certificate``/``client-key``, not ``-data``): what a rotation watches besides the
    # kubeconfig itself (client-go reloads them: ``cert_rotation.go`` over a file-based dynamic cert)
    client_pair_files: tuple[Path, ...] = dataclass_field(default=(), compare=False)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for an ``https`` server (None for plain ``http``)."""
        if not self.server.startswith("https:"):
            return None
        try:
            context = ssl.create_default_context(cadata=self.ca_pem.decode() if self.ca_pem else None)
            if self.client_cert_pem and self.client_key_pem:
                _load_client_certificate(context, self.client_cert_pem, self.client_key_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"TLS material for {self.server} is unusable: {exc}") from None
        if self.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def _load_client_certificate(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    from kubesvc.serving.pki import load_pair_into

    load_pair_into(context, cert_pem, key_pem)


def load_kubeconfig(path: str | os.PathLike | None = None, context: str | None = None) -> ClientConfig:
    """Resolve ``context`` (default: the current context) of the kubeconfig at ``path``
    (default: ``$KUBECONFIG``, then ``~/.kube/config``) into a ``ClientConfig``."""
    files = _kubeconfig_files(path)
    merged = _merge([_read(f) for f in files])
    where = os.pathsep.join(str(f) for f in files)
    return _resolve(merged, context, where)


def _kubeconfig_files(path: str | os.PathLike | None) -> list[Path]:
    if path is not None:
        return [Path(path)]
    from_env = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if from_env:
        existing = [p for p in from_env if p.exists()]
        if not existing:
            raise ConfigError(f"kubeconfig {os.environ['KUBECONFIG']}: no such file")
        return existing
    return [Path.home() / ".kube" / "config"]


@dataclass
class _Entry:
    """One named cluster, user or context, remembering the file it came from."""

    body: dict[str, Any]
    source: Path


@dataclass
class _Merged:
    clusters: dict[str, _Entry]
    users: dict[str, _Entry]
    contexts: dict[str, _Entry]
    current_context: str


def _read(path: Path) -> tuple[Path, dict]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"kubeconfig {path}: no such file") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"kubeconfig {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {path}: not a kubeconfig (top level is not a mapping)")
    return path, doc


def _merge(docs: list[tuple[Path, dict]]) -> _Merged:
    merged = _Merged({}, {}, {}, "")
    for path, doc in docs:
        for section, field, target in (("clusters", "cluster", merged.clusters), ("users", "user", merged.users), ("contexts", "context", merged.contexts)):
            for item in doc.get(section) or []:
                if isinstance(item, dict) and item.get("name") and item["name"] not in target:
                    target[item["name"]] = _Entry(item.get(field) or {}, path)
        merged.current_context = merged.current_context or doc.get("current-context") or ""
    return merged


def _resolve(merged: _Merged, context_name: str | None, where: str) -> ClientConfig:
    def fail(problem: str) -> ConfigError:
        return ConfigError(f"kubeconfig {where}: {problem}")

    name = context_name or merged.current_context
    if not name:
        raise fail("no current-context is set and no context was given")
    context = merged.contexts.get(name)
    if context is None:
        raise fail(f'context "{name}" not found')
    cluster_name, user_name = context.body.get("cluster"), context.body.get("user")
    cluster = merged.clusters.get(cluster_name or "")
    if cluster is None:
        raise fail(f'cluster "{cluster_name}" (of context "{name}") not found')
    if not cluster.body.get("server"):
        raise fail(f'cluster "{cluster_name}" has no server')
    user = merged.users.get(user_name) if user_name else _Entry({}, cluster.source)
    if user is None:
        raise fail(f'user "{user_name}" (of context "{name}") not found')
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user.body:
            raise fail(f'user "{user_name}": {unsupported} credentials are not supported')
    try:
        return ClientConfig(
            server=cluster.body["server"],
            token=_token(user),
            namespace=context.body.get("namespace") or DEFAULT_NAMESPACE,
            ca_pem=_pem(cluster, "certificate-authority"),
            insecure_skip_tls_verify=bool(cluster.body.get("insecure-skip-tls-verify", False)),
            client_cert_pem=_pem(user, "client-certificate"),
            client_key_pem=_pem(user, "client-key"),
            client_pair_files=tuple(path for path in (_file_of(user, "client-certificate"), _file_of(user, "client-key"))
                                    if path is not None),
        )
    except _FieldError as exc:
        raise fail(str(exc)) from None


class _FieldError(Exception):
    pass


def _pem(entry: _Entry, field: str) -> bytes | None:
    """``<field>-data`` (base64, wins) or the file named by ``<field>``."""
    data = entry.body.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise _FieldError(f"{field}-data is not valid base64") from None
    if entry.body.get(field):
        return _read_referenced(entry, field).encode()
    return None


def _token(user: _Entry) -> str | None:
    if user.body.get("token"):
        return str(user.body["token"]).strip()
    if user.body.get("tokenFile"):
        return _read_referenced(user, "tokenFile").strip()
    return None


def _file_of(entry: _Entry, field: str) -> Path | None:
    """The file ``<field>`` names when it is the one read (no ``<field>-data`` beside it)."""
    if entry.body.get(f"{field}-data") or not entry.body.get(field):
        return None
    return _referenced_path(entry, field)


def _referenced_path(entry: _Entry, field: str) -> Path:
    path = Path(os.path.expanduser(entry.body[field]))
    return path if path.is_absolute() else entry.source.parent / path


def _read_referenced(entry: _Entry, field: str) -> str:
    path = _referenced_path(entry, field)
    try:
        return path.read_text()
    except OSError as exc:
        raise _FieldError(f"{field} {path}: {exc.strerror or exc}") from None
