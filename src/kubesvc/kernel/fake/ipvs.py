"""An in-memory IPVS table with the kernel's refusals (adding what exists, touching what does not),
the same interface as ``kernel.ipvs.NetlinkIpvs``, for unit tests of the IPVS proxier.

``servers`` and ``reals`` are keyed by ``ServiceKey``; ``connections`` sets a real server's
(active, inactive) counts as traffic would; ``calls`` records each change as text.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping

from kubesvc.kernel import IPV6
from kubesvc.kernel.ipvs import Destination, IpvsError, Service, ServiceKey, Table, describe


class FakeIpvs:
    def __init__(self, initial: Mapping[ServiceKey, tuple[Service, Mapping[tuple[str, int], Destination]]] | None = None):
        self.servers: dict[ServiceKey, Service] = {}
        self.reals: dict[ServiceKey, dict[tuple[str, int], Destination]] = {}
        for key, (service, dests) in (initial or {}).items():
            self.servers[key], self.reals[key] = service, dict(dests)
        self.calls: list[str] = []

    def dump(self, family: int) -> Table:
        return {key: (service, dict(self.reals[key])) for key, service in self.servers.items()
                if (":" in key.address) == (family == IPV6)}

    def apply(self, action: str, service: Service, dest: Destination | None = None) -> None:
        key = service.key
        request = describe(action, key, dest)
        self.calls.append(request)
        if action == "add-service":
            if key in self.servers:
                raise IpvsError(request, errno.EEXIST, "File exists")
            self.servers[key], self.reals[key] = service, {}
            return
        if key not in self.servers:
            raise IpvsError(request, errno.ESRCH, "No such process")
        if action == "edit-service":
            self.servers[key] = service
        elif action == "del-service":
            del self.servers[key], self.reals[key]
        else:
            assert dest is not None
            reals = self.reals[key]
            exists = dest.key in reals
            if (action == "add-dest") == exists:
                raise IpvsError(request, errno.EEXIST if exists else errno.ENOENT,
                                "File exists" if exists else "No such file or directory")
            if action == "del-dest":
                del reals[dest.key]
            else:
                old = reals.get(dest.key, Destination(dest.address, dest.port, 0))
                reals[dest.key] = Destination(dest.address, dest.port, dest.weight, old.active, old.inactive)

    def connections(self, key: ServiceKey, rs: tuple[str, int], active: int, inactive: int = 0) -> None:
        old = self.reals[key][rs]
        self.reals[key][rs] = Destination(old.address, old.port, old.weight, active, inactive)

    def flush(self, family: int) -> None:
        for key in list(self.dump(family)):
            del self.servers[key], self.reals[key]

    def set_timeouts(self, tcp: float, tcp_fin: float, udp: float) -> None:
        self.calls.append(f"set-timeouts tcp={tcp:g} tcpfin={tcp_fin:g} udp={udp:g}")

    def close(self) -> None:
        pass
