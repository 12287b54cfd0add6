"""The node's DNS settings and each Pod's two files: the thin shell around ``dnsconfig``.

The kubelet's ``--cluster-dns``, ``--cluster-domain`` and ``--resolv-conf`` (the node file the
Pods' resolv.conf starts from; ``""``: none) live in :class:`NodeDNS`. Once a Pod's sandbox
has its IPs, :meth:`NodeDNS.write_pod_files` writes ``<pod dir>/resolv.conf`` and
``<pod dir>/etc-hosts`` (0644, as the kubelet's ``etc-hosts``) and returns the events forming
them recorded; :func:`binds_for` gives a container the bind mounts that put them at
``/etc/resolv.conf`` and ``/etc/hosts`` in its mount namespace, except where the container
mounts a volume there itself (the kubelet skips its hosts file then).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubesvc.agent import dnsconfig
from kubesvc.kernel.mounts import BindMount

RESOLV_CONF = "/etc/resolv.conf"
ETC_HOSTS = "/etc/hosts"


@dataclass(frozen=True)
class NodeDNS:
    cluster_dns: tuple[str, ...] = ()
    cluster_domain: str = ""
    resolv_conf: str = "/etc/resolv.conf"  # "" : no node file

    def node_file(self) -> str | None:
        if not self.resolv_conf:
            return None
        try:
            return Path(self.resolv_conf).read_text()
        except OSError:
            return ""

    def start_events(self) -> list[dnsconfig.Event]:
        """The Node Warnings the kubelet records at start about its resolv.conf."""
        text = self.node_file()
        if text is None:
            return []
        return dnsconfig.host_limit_events(text, self.resolv_conf, self.cluster_domain)

    def write_pod_files(self, pod: dict, pod_ips: list[str], directory: Path) -> list[dnsconfig.Event]:
        formed = dnsconfig.pod_dns(pod, list(self.cluster_dns), self.cluster_domain, dnsconfig.host_resolv_conf(self.node_file()))
        node_hosts = ""
        if (pod.get("spec") or {}).get("hostNetwork"):
            try:
                node_hosts = Path(ETC_HOSTS).read_text()
            except OSError:
                node_hosts = ""
        _write(directory / "resolv.conf", formed.resolv_conf.render())
        _write(directory / "etc-hosts", dnsconfig.hosts_file(pod, pod_ips, self.cluster_domain, node_hosts))
        return formed.events


SYSTEMD_RESOLVED_UPSTREAMS = "/run/systemd/resolve/resolv.conf"


def node_resolv_conf(path: str = "/etc/resolv.conf", fallback: str = SYSTEMD_RESOLVED_UPSTREAMS) -> str:
    """The file Pods' DNS should start from, as k3s picks its kubelet's ``--resolv-conf``: a
    file whose nameservers are all loopback addresses (systemd-resolved's 127.0.0.53) is useless
    inside a Pod's network namespace, so the upstreams systemd-resolved itself uses are taken
    instead when that file exists and names others."""
    import ipaddress

    def only_loopback(file: str) -> bool | None:
        try:
            servers = dnsconfig.parse_resolv_conf(Path(file).read_text()).nameservers
        except OSError:
            return None
        try:
            return bool(servers) and all(ipaddress.ip_address(s.split("%")[0]).is_loopback for s in servers)
        except ValueError:
            return False

    if only_loopback(path) and only_loopback(fallback) is False:
        return fallback
    return path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def binds_for(container: dict, directory: Path) -> list[BindMount]:
    """``/etc/resolv.conf`` and ``/etc/hosts`` from the Pod's directory, unless the container
    mounts something there itself."""
    own = {m.get("mountPath", "").rstrip("/") for m in container.get("volumeMounts") or []}
    binds = []
    for name, target in (("resolv.conf", RESOLV_CONF), ("etc-hosts", ETC_HOSTS)):
        if target not in own and (directory / name).exists():
            binds.append(BindMount(str(directory / name), target))
    return binds
