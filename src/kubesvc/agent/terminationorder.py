"""The order in which a Pod's containers stop (upstream ``pkg/kubelet/kuberuntime/
kuberuntime_termination_order.go``, KEP-753 sidecar containers).

When the kubelet kills a Pod (deleted, or finished: its regular containers done for good, so
its sidecars must not keep it alive) every running container is killed at once, each in its
own goroutine, and each runs its ``preStop`` hook straight away. A *sidecar* (an init container
with ``restartPolicy: Always``) then waits for its turn before it is sent SIGTERM: until every
regular container that was running has exited, and until the next sidecar defined after it
has exited, so sidecars stop after the regular containers, the last one defined first. The
wait comes out of the container's grace period (what is left after its ``preStop`` hook, and
at least ``minimumGracePeriodInSeconds``, 2 s, after the wait); when the grace period runs out
the sidecar stops without waiting any longer.

``TerminationOrder`` holds one event per container (set when it has exited; set from the start
for a container that was not running, so nothing waits for it) and, per sidecar, the events it
waits for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


def _is_sidecar(container: dict) -> bool:
    return container.get("restartPolicy") == "Always"


class TerminationOrder:
    def __init__(self, spec: dict, running: Iterable[str]):
        running = set(running)
        self._terminated: dict[str, asyncio.Event] = {}
        self.prerequisites: dict[str, list[str]] = {}  # container -> the containers it waits for
        regular = []
        for container in spec.get("containers") or []:
            self._add(container["name"], running)
            regular.append(container["name"])
        later_sidecar = None
        for container in reversed(spec.get("initContainers") or []):
            self._add(container["name"], running)
            if _is_sidecar(container):
                self.prerequisites[container["name"]] = regular + ([later_sidecar] if later_sidecar else [])
                later_sidecar = container["name"]

    def _add(self, name: str, running: set[str]) -> None:
        event = self._terminated[name] = asyncio.Event()
        if name not in running:
            event.set()  # not running: nothing waits for it

    def waits(self, name: str) -> bool:
        """Whether ``name`` has a turn to wait for (a sidecar)."""
        return name in self.prerequisites

    async def wait_for_turn(self, name: str, grace: float) -> None:
        """Until ``name`` may be stopped, at most ``grace`` seconds (no wait when ``grace`` <= 0:
        the grace period is spent, it stops now)."""
        if grace <= 0:
            return
        waits = [self._terminated[n].wait() for n in self.prerequisites.get(name, []) if not self._terminated[n].is_set()]
        if waits:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout=grace)
            except asyncio.TimeoutError:
                pass  # the grace period ran out: stop it now

    def container_terminated(self, name: str) -> None:
        event = self._terminated.get(name)
        if event is not None:
            event.set()
