"""The connection to etcd: one gRPC channel (HTTP/2, multiplexing every request and watch
stream) to the members in ``--etcd-servers``, with kube-apiserver's client settings
(``storagebackend/factory/etcd3.go``):

* mutual TLS from ``--etcd-cafile``, ``--etcd-certfile``, ``--etcd-keyfile`` (https:// servers);
* keepalive every 30 s, dropped after 10 s without an answer, so a dead member is noticed on an
  idle connection;
* no client-side cap on a response's size (``MaxCallRecvMsgSize = math.MaxInt32``): a list of
  10,000 objects is tens of megabytes, above gRPC's 4 MiB default;
* several members: gRPC's ``round_robin`` over their addresses, so a request goes to a member
  that is connected and a dead one is skipped (clientv3 balances the same way); they must be
  IP addresses, and with TLS each member's certificate must name ``localhost``;
* every request carries a deadline (``request_timeout``): with no member reachable it fails
  with ``UNAVAILABLE`` at once (connection refused), and a member that accepts but never
  answers (no quorum, a partition) fails it at the deadline, never later.

etcd's own gRPC API (``etcdserverpb``) is used directly, with the message classes and stubs that
the ``aetcd`` package ships compiled; aetcd's own client has no TLS, one endpoint only, and
drops watch progress notifications, which the watch cache needs.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc

DEFAULT_PORT = 2379


@dataclass(frozen=True)
class EtcdConfig:
    """kube-apiserver's --etcd-* flags."""

    servers: tuple[str, ...] = ("http://127.0.0.1:2379",)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    prefix: str = "/registry"
    request_timeout: float = 5.0
    compaction_interval: float = 300.0  # --etcd-compaction-interval, 0 disables

    @property
    def endpoints(self) -> str:
        return ",".join(self.servers)


def _host_port(server: str) -> tuple[str, int, bool]:
    url = urlsplit(server if "://" in server else f"http://{server}")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"--etcd-servers: {server!r} is not an http(s)://host:port URL")
    return url.hostname, url.port or DEFAULT_PORT, url.scheme == "https"


def target(servers: tuple[str, ...]) -> tuple[str, bool]:
    """The gRPC target for the servers and whether they speak TLS. Several servers must be IP
    addresses of one family (gRPC's static ``ipv4:``/``ipv6:`` resolver lists them)."""
    if not servers:
        raise ValueError("--etcd-servers: no server given")
    parsed = [_host_port(server) for server in servers]
    secure = {tls for _, _, tls in parsed}
    if len(secure) > 1:
        raise ValueError("--etcd-servers: mixes http:// and https:// servers")
    if len(parsed) == 1:
        host, port, tls = parsed[0]
        return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), tls
    try:
        versions = {ipaddress.ip_address(host).version for host, _, _ in parsed}
    except ValueError:
        raise ValueError("--etcd-servers: several servers must be given as IP addresses") from None
    if len(versions) > 1:
        raise ValueError("--etcd-servers: several servers must all be IPv4 or all IPv6")
    if versions == {4}:
        return "ipv4:" + ",".join(f"{host}:{port}" for host, port, _ in parsed), secure.pop()
    return "ipv6:" + ",".join(f"[{host}]:{port}" for host, port, _ in parsed), secure.pop()


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def open_channel(config: EtcdConfig) -> grpc.aio.Channel:
    address, tls = target(config.servers)
    options = [
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.max_receive_message_length", 2**31 - 1),
        ("grpc.max_send_message_length", 2**31 - 1),
        ("grpc.lb_policy_name", "round_robin"),
        ("grpc.enable_retries", 0),  # a Txn must not be resent behind the caller's back
        # reconnect to a member that comes back within seconds (gRPC's default backoff grows
        # to 120 s); meanwhile requests fail at once with UNAVAILABLE
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 3_000),
    ]
    if address.startswith(("ipv4:", "ipv6:")) and tls:
        # gRPC checks every member's certificate against one name, and the members' addresses
        # differ: "localhost", which kubeadm's, k3s's and kubesvc's member certificates all
        # carry; the chain is still verified against --etcd-cafile, the etcd cluster's CA
        options.append(("grpc.ssl_target_name_override", "localhost"))
    if not tls:
        return grpc.aio.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(config.ca_file), private_key=_read(config.key_file),
        certificate_chain=_read(config.cert_file))
    return grpc.aio.secure_channel(address, credentials, options=options)
