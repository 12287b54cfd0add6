"""The apiserver's ``--feature-gates=PreferSameTrafficDistribution=...`` (KEP-3015: alpha, off, in
1.33; beta, on, in 1.34), with the real kubectl:

* on (the default): a Service may ask for ``PreferSameZone`` or ``PreferSameNode``; an
  unknown value is NotSupported listing all three; EndpointSlices keep ``hints.forNodes``.
* off: only ``PreferClose`` (upstream's ``validateServiceTrafficDistribution`` then supports
  that one value), and the strategy drops ``forNodes`` hints on create, and on update unless
  the stored slice already had some (``dropDisabledFieldsOnCreate`` / ``...OnUpdate``), keeping
  the zone hints. A slice written while the gate was on keeps its node hints through an update
  after a restart with it off.
"""

from __future__ import annotations

import json

from tests.support.apiserver import running_apiserver


def service(name: str, distribution: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"ports": [{"port": 80}], "trafficDistribution": distribution}})


def endpoint_slice(name: str, node_hints: bool, **labels: str) -> str:
    hints = {"forZones": [{"name": "zone-a"}], **({"forNodes": [{"name": "node-1"}]} if node_hints else {})}
    return json.dumps({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                       "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "web", **labels}},
                       "addressType": "IPv4", "ports": [{"port": 80, "protocol": "TCP"}],
                       "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": "node-1", "zone": "zone-a", "hints": hints}]})


def hints_of(server, *names: str) -> dict[str, dict]:
    items = json.loads(server.kubectl("get", "endpointslices", *names, "-o", "json").stdout)
    return {item["metadata"]["name"]: item["endpoints"][0]["hints"] for item in (items["items"] if "items" in items else [items])}


def distributions(server) -> dict[str, str]:
    items = json.loads(server.kubectl("get", "services", "-o", "json").stdout)["items"]
    return {s["metadata"]["name"]: s["spec"].get("trafficDistribution") for s in items if s["metadata"]["name"] != "kubernetes"}


def test_gate_on_accepts_prefer_same_zone_and_node_and_keeps_node_hints(tmp_path):
    with running_apiserver(tmp_path / "on") as server:
        server.kubectl("apply", "-f", "-", input="\n".join([service("zone", "PreferSameZone"), service("node", "PreferSameNode"),
                                                            service("close", "PreferClose"), endpoint_slice("web-1", node_hints=True)]))
        assert distributions(server) == {"zone": "PreferSameZone", "node": "PreferSameNode", "close": "PreferClose"}
        result = server.kubectl("apply", "-f", "-", input=service("bogus", "PreferFarAway"), check=False)
        assert result.returncode != 0
        assert ('spec.trafficDistribution: Unsupported value: "PreferFarAway": supported values: '
                '"PreferClose", "PreferSameNode", "PreferSameZone"') in result.stderr, result.stderr
        assert hints_of(server, "web-1") == {"web-1": {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-1"}]}}


def test_gate_off_allows_only_prefer_close_and_drops_new_node_hints(tmp_path):
    data_dir = tmp_path / "server"
    with running_apiserver(data_dir) as server:  # written while the gate is on
        server.kubectl("apply", "-f", "-", input=endpoint_slice("had-node-hints", node_hints=True))
    with running_apiserver(data_dir, "--feature-gates=PreferSameTrafficDistribution=false") as server:
        result = server.kubectl("apply", "-f", "-", input=service("zone", "PreferSameZone") + "\n" + service("node", "PreferSameNode"),
                                check=False)
        assert result.returncode != 0
        for name, value in (("zone", "PreferSameZone"), ("node", "PreferSameNode")):
            assert (f'Service "{name}" is invalid: spec.trafficDistribution: Unsupported value: "{value}": '
                    'supported values: "PreferClose"') in result.stderr, result.stderr
        server.kubectl("apply", "-f", "-", input="\n".join([
            service("close", "PreferClose"),
            endpoint_slice("web-1", node_hints=True),  # create: node hints dropped
            endpoint_slice("had-node-hints", node_hints=True, again="yes")]))  # update of one that had them: kept
        assert distributions(server) == {"close": "PreferClose"}
        server.kubectl("apply", "-f", "-", input=endpoint_slice("web-1", node_hints=True, again="yes"))  # update: none stored before
        assert hints_of(server, "web-1", "had-node-hints") == {
            "web-1": {"forZones": [{"name": "zone-a"}]},
            "had-node-hints": {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-1"}]}}
