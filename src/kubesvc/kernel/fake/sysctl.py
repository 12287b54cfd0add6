"""A stateful ``/proc/sys`` of one network namespace, behind the interface of
``kernel.sysctl.Sysctl`` (``read``, ``write`` and their async forms), for tests.

The tree holds the keys the kube-proxy and the Pod network touch, with a fresh namespace's
values (``DEFAULTS``; a test may give its own), each link's ``net/ipv4/conf/<link>/`` and
``net/ipv6/conf/<link>/`` keys (``add_link``), and refuses as ``/proc/sys`` does (held to the
kernel by ``tests/kernel/test_sysctl_fake.py``), each as ``kernel.sysctl.SysctlFailed`` with the
errno:

* a key that is not there: ENOENT; a directory: EISDIR;
* a key read-only in this namespace: EACCES, even for root (``nf_conntrack_max`` outside the
  initial namespace);
* a value that is not an integer: EINVAL; out of a key's range: EINVAL
  (``nf_conntrack_tcp_be_liberal`` is 0 or 1); surrounding whitespace is ignored, an empty
  write changes nothing;
* ``net/ipv4/ip_forward`` is ``net/ipv4/conf/all/forwarding``, and writing either (or IPv6's
  ``conf/all/forwarding``) writes ``default`` and every link's ``forwarding`` as well.
"""

from __future__ import annotations

import errno
import os

from kubesvc.kernel.sysctl import SysctlFailed, slashed, sysctl_path

CONF_KEYS = {"ipv4": {"forwarding": "0", "rp_filter": "0", "send_redirects": "1", "route_localnet": "0", "arp_ignore": "0",
                      "arp_announce": "0"},
             "ipv6": {"forwarding": "0", "disable_ipv6": "0"}}
DEFAULTS = {"net/ipv4/ip_forward": "0", "net/core/somaxconn": "4096", "net/netfilter/nf_conntrack_max": "262144",
            "net/netfilter/nf_conntrack_tcp_be_liberal": "0", "net/netfilter/nf_conntrack_udp_timeout": "30",
            "net/netfilter/nf_conntrack_udp_timeout_stream": "120",
            "net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
            "net/netfilter/nf_conntrack_tcp_timeout_close_wait": "60"}
RANGES = {"net/netfilter/nf_conntrack_tcp_be_liberal": (0, 1)}
READ_ONLY_OUTSIDE_INIT = {"net/netfilter/nf_conntrack_max"}


class FakeSysctl:
    """``values``: slashed key -> value (the whole tree besides the per-link keys); ``links``:
    the links whose ``conf`` keys exist; ``init``: the initial namespace (nothing read-only)."""

    def __init__(self, values: dict[str, str] | None = None, *, links: tuple[str, ...] = ("lo",), init: bool = False):
        self.values: dict[str, str] = dict(DEFAULTS if values is None else values)
        self.read_only = set() if init else set(READ_ONLY_OUTSIDE_INIT)
        for family, keys in CONF_KEYS.items():
            for dev in ("all", "default"):
                for name, value in keys.items():
                    self.values.setdefault(f"net/{family}/conf/{dev}/{name}", value)
        for link in links:
            self.add_link(link)

    def add_link(self, name: str) -> None:
        """A new link's keys, from ``default`` (as the kernel copies them)."""
        for family, keys in CONF_KEYS.items():
            for key in keys:
                self.values[f"net/{family}/conf/{name}/{key}"] = self.values[f"net/{family}/conf/default/{key}"]

    def remove_link(self, name: str) -> None:
        for family in CONF_KEYS:
            prefix = f"net/{family}/conf/{name}/"
            for key in [k for k in self.values if k.startswith(prefix)]:
                del self.values[key]

    # -- the interface of kernel.sysctl.Sysctl

    def read(self, key: str) -> str:
        return self.values[self._key(key)]

    def write(self, key: str, value: str | int) -> None:
        path = self._key(key, str(value))
        text = str(value).strip()
        if path in self.read_only:
            raise _failed(key, errno.EACCES, str(value))
        if not text:
            return
        try:
            number = int(text)
        except ValueError:
            raise _failed(key, errno.EINVAL, str(value)) from None
        low, high = RANGES.get(path, (-(2 ** 31), 2 ** 31 - 1))
        if not low <= number <= high:
            raise _failed(key, errno.EINVAL, str(value))
        self.values[path] = str(number)
        for family in ("ipv4", "ipv6"):
            if path in (f"net/{family}/conf/all/forwarding", "net/ipv4/ip_forward" if family == "ipv4" else ""):
                for other in [k for k in self.values if k.startswith(f"net/{family}/conf/") and k.endswith("/forwarding")]:
                    self.values[other] = str(number)
                if family == "ipv4":
                    self.values["net/ipv4/ip_forward"] = str(number)

    async def read_async(self, key: str) -> str:
        return self.read(key)

    async def write_async(self, key: str, value: str | int) -> None:
        self.write(key, value)

    def _key(self, key: str, value: str | None = None) -> str:
        path = slashed(key)
        if path not in self.values:
            is_dir = any(k.startswith(path + "/") for k in self.values)
            raise _failed(key, errno.EISDIR if is_dir else errno.ENOENT, value)
        return path


def _failed(key: str, code: int, value: str | None) -> SysctlFailed:
    return SysctlFailed(key, sysctl_path(key), OSError(code, os.strerror(code)), value)
