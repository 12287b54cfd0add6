"""The agent's shared ConfigMap/Secret watches as the Pods' source of referenced objects, against
a real apiserver: once a watch has synced, a Pod's volume or environment gets the object from it
without a request (the kubelet's WatchBasedManager reads its reflector's store); an object the
watch does not hold yet is still read live, and a change reaches the cache and the subscriber."""

from __future__ import annotations

from kubesvc.agent.envvars import ObjectRef
from kubesvc.agent.objectwatch import ObjectWatches
from kubesvc.agent.podvolumes import fetch_object
from kubesvc.client.rest import Resource
from tests.support.cluster import eventually

CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")


class CountingGets:
    """The agent's client, counting the GETs of single objects it sends."""

    def __init__(self, client):
        self._client, self.gets = client, []

    def __getattr__(self, name):
        return getattr(self._client, name)

    async def get(self, path: str, params=None):
        self.gets.append(path)
        return await self._client.get(path, params)


async def test_a_synced_watch_answers_reads_and_a_missing_object_is_read_live(client, namespace):
    await client.resource(CONFIGMAPS).create({"metadata": {"name": "settings", "namespace": namespace}, "data": {"mode": "one"}})
    counting = CountingGets(client)
    watches = ObjectWatches(client)
    changes = []
    settings = ObjectRef("configmap", "settings")
    try:
        assert (await fetch_object(counting, namespace, settings, watches))["data"] == {"mode": "one"}  # no watch yet: live
        assert len(counting.gets) == 1
        watches.subscribe(namespace, settings, lambda: changes.append("settings"))
        await eventually(lambda: watches.cached(namespace, settings), message="the watch synced")
        for _ in range(3):  # three Pods reading it: no request
            assert (await fetch_object(counting, namespace, settings, watches))["data"] == {"mode": "one"}
        assert len(counting.gets) == 1

        # a ConfigMap the node does not watch yet, created just now: read live, not reported missing
        later = ObjectRef("configmap", "later")
        watches.subscribe(namespace, later, lambda: changes.append("later"))
        assert await fetch_object(counting, namespace, later, watches) is None
        await client.resource(CONFIGMAPS).create({"metadata": {"name": "later", "namespace": namespace}, "data": {"k": "v"}})
        assert (await fetch_object(counting, namespace, later, watches))["data"] == {"k": "v"}
        assert len(counting.gets) >= 2

        # a change reaches the cache before the subscriber is called
        changes.clear()
        current = await client.resource(CONFIGMAPS).get("settings", namespace)
        current["data"] = {"mode": "two"}
        await client.resource(CONFIGMAPS).update(current)
        await eventually(lambda: "settings" in changes, message="the subscriber called")
        gets = len(counting.gets)
        assert (await fetch_object(counting, namespace, settings, watches))["data"] == {"mode": "two"}
        assert len(counting.gets) == gets

        # deleted: gone from the cache, and the live read says so
        await client.resource(CONFIGMAPS).delete("settings", namespace)
        await eventually(lambda: watches.cached(namespace, settings) is None, message="the delete seen")
        assert await fetch_object(counting, namespace, settings, watches) is None
    finally:
        watches.stop()
