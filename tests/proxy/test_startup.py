"""kube-proxy's host setup and the settings it reads (proxy/startup.py, ProxyServer._serve):
conntrack sysctls as upstream's setupConntrack, oomScoreAdj, clientConnection and
bindAddressHardFail."""

import asyncio
import errno
import logging
import socket

import pytest

from kubesvc.kernel.params import ParamFailed
from kubesvc.kernel.sysctl import SysctlFailed
from kubesvc.proxy import startup
from kubesvc.proxy.config import ConntrackSettings, ProxySettings
from kubesvc.proxy.server import ProxyServer

MAX = "net/netfilter/nf_conntrack_max"
EST = "net/netfilter/nf_conntrack_tcp_timeout_established"
CW = "net/netfilter/nf_conntrack_tcp_timeout_close_wait"


@pytest.mark.parametrize(("conntrack", "cpus", "expected"), [
    (ConntrackSettings(), 2, {MAX: 131072, EST: 86400, CW: 3600}),
    (ConntrackSettings(), 8, {MAX: 262144, EST: 86400, CW: 3600}),
    (ConntrackSettings(max_per_core=0), 8, {EST: 86400, CW: 3600}),
    (ConntrackSettings(max_per_core=0, tcp_established_timeout=0, tcp_close_wait_timeout=0), 8, {}),
    (ConntrackSettings(max_per_core=0, tcp_established_timeout=90.7, tcp_close_wait_timeout=0, tcp_be_liberal=True,
                       udp_timeout=30.0, udp_stream_timeout=120.0), 1,
     {EST: 90, "net/netfilter/nf_conntrack_tcp_be_liberal": 1, "net/netfilter/nf_conntrack_udp_timeout": 30,
      "net/netfilter/nf_conntrack_udp_timeout_stream": 120}),
], ids=["defaults-2-cpus-min-wins", "defaults-8-cpus-scaled", "max-per-core-0", "nothing", "every-other-knob"])
def test_conntrack_sysctls(conntrack, cpus, expected):
    assert startup.conntrack_sysctls(conntrack, cpus) == expected
    assert list(startup.conntrack_sysctls(conntrack, cpus)) == list(expected)  # nf_conntrack_max first, as upstream


@pytest.mark.parametrize(("conntrack_max", "current", "expected"), [(131072, 16384, 32768), (131072, 32768, None), (131072, 65536, None)],
                         ids=["raised", "equal", "larger-kept"])
def test_hashsize_is_a_quarter_of_max_unless_larger(conntrack_max, current, expected):
    assert startup.hashsize_for(conntrack_max, current) == expected


class FakeHost:
    def __init__(self, values, refuse=None, hashsize=16384, hashsize_error=None):
        self.values = dict(values)
        self.refuse = refuse or {}
        self.hash = hashsize
        self.hashsize_error = hashsize_error
        self.writes = []

    def read(self, key):
        if key not in self.values:
            raise SysctlFailed(key, "/proc/sys/" + key, OSError(errno.ENOENT, "No such file or directory"))
        return self.values[key]

    def write(self, key, value):
        if key in self.refuse:
            raise SysctlFailed(key, "/proc/sys/" + key, OSError(self.refuse[key], "refused"), str(value))
        self.writes.append((key, value))
        self.values[key] = str(value)

    def hashsize(self):
        return self.hash

    def set_hashsize(self, value):
        if self.hashsize_error:
            raise ParamFailed("/sys/module/nf_conntrack/parameters/hashsize", OSError(self.hashsize_error, "refused"), str(value))
        self.hash = value

    def setup(self, conntrack=ConntrackSettings(), cpus=2):
        return startup.setup_conntrack(conntrack, cpus, read=self.read, write=self.write, hashsize=self.hashsize,
                                       set_hashsize=self.set_hashsize)


def test_writes_only_what_differs_and_raises_the_hashsize():
    host = FakeHost({MAX: "65536", EST: "86400", CW: "60"})
    done = host.setup()
    assert host.writes == [(MAX, 131072), (CW, 3600)]
    assert host.hash == 32768
    assert done.written == {MAX: 131072, CW: 3600} and done.warnings == [] and not done.read_only_sysfs


def test_a_read_only_max_in_a_network_namespace_is_a_warning_and_the_rest_still_applies(caplog):
    host = FakeHost({MAX: "262144", EST: "432000", CW: "60"}, refuse={MAX: errno.EACCES})
    with caplog.at_level(logging.WARNING, logger="kubesvc.proxy"):
        done = host.setup()
    assert host.writes == [(EST, 86400), (CW, 3600)]
    assert host.hash == 16384  # not touched when the max was not raised
    assert len(done.warnings) == 1 and "nf_conntrack_max" in done.warnings[0] and "refused" in done.warnings[0]
    assert "cannot set conntrack limits" in caplog.text


def test_read_only_sysfs_is_upstreams_event():
    host = FakeHost({MAX: "65536", EST: "86400", CW: "3600"}, hashsize_error=errno.EROFS)
    done = host.setup()
    assert done.read_only_sysfs and done.warnings == [startup.READ_ONLY_SYSFS_MESSAGE]


def test_another_failure_stops_the_start_as_upstreams():
    host = FakeHost({MAX: "131072", EST: "1"}, refuse={EST: errno.EINVAL})
    with pytest.raises(SysctlFailed, match="nf_conntrack_tcp_timeout_established"):
        host.setup()


def test_oom_score_adj_failure_is_logged_not_fatal(caplog):
    applied = []
    assert startup.apply_oom_score_adj(-999, applied.append) and applied == [-999]

    def refuse(value):
        raise ParamFailed("/proc/self/oom_score_adj", OSError(errno.EACCES, "Permission denied"), str(value))

    with caplog.at_level(logging.WARNING, logger="kubesvc.proxy"):
        assert not startup.apply_oom_score_adj(-999, refuse)
    assert "Failed to apply OOMScore -999" in caplog.text


@pytest.mark.parametrize(("content_type", "accept", "levels"), [
    ("application/vnd.kubernetes.protobuf", "", [logging.INFO]),
    ("application/json", "", []),
    ("application/yaml", "", [logging.WARNING]),
    ("application/json", "application/vnd.kubernetes.protobuf", [logging.WARNING]),
    ("application/json", "application/vnd.kubernetes.protobuf,application/json", []),
], ids=["protobuf-default", "json", "unsupported", "accept-without-json", "accept-with-json"])
def test_client_connection_notes(content_type, accept, levels):
    settings = ProxySettings(mode="nftables", hostname="n1", client_content_type=content_type, client_accept_content_types=accept)
    assert [level for level, _ in startup.client_connection_notes(settings)] == levels


class Recorder:
    def __init__(self):
        self.events = []

    def event(self, obj, type_, reason, message, action=""):
        self.events.append((obj["kind"], obj["metadata"]["name"], type_, reason, action))

    async def flush(self):
        pass


class Client:
    def resource(self, resource):
        return None


def busy_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


async def test_bind_address_hard_fail_ends_the_start_with_an_event():
    blocker = busy_port()
    try:
        settings = ProxySettings(mode="nftables", hostname="n1", healthz_bind_address=f"127.0.0.1:{blocker.getsockname()[1]}",
                                 metrics_bind_address="", bind_address_hard_fail=True)
        server = ProxyServer(Client(), settings)
        server.recorder = Recorder()
        with pytest.raises(OSError, match="failed to start proxy healthz"):
            await server._serve()
        assert server.recorder.events == [("Node", "n1", "Warning", "FailedToStartProxierHealthcheck", "StartKubeProxy")]
        await server.stop()
    finally:
        blocker.close()


async def test_without_hard_fail_a_busy_port_is_retried_until_it_binds(caplog):
    blocker = busy_port()
    port = blocker.getsockname()[1]
    settings = ProxySettings(mode="nftables", hostname="n1", healthz_bind_address="", metrics_bind_address=f"127.0.0.1:{port}")
    server = ProxyServer(Client(), settings)
    server.recorder = Recorder()
    server.retry_bind_every = 0.05
    try:
        with caplog.at_level(logging.ERROR, logger="kubesvc.proxy"):
            await server._serve()  # no exception
        assert "Metrics server failed" in caplog.text and server.metrics_port is None
        blocker.close()
        for _ in range(100):
            if server.metrics_port is not None:
                break
            await asyncio.sleep(0.05)
        assert server.metrics_port == port
        assert server.recorder.events == []
    finally:
        blocker.close()
        await server.stop()
