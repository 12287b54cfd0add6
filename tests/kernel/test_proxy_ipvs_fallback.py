"""``kubesvc proxy --proxy-mode ipvs`` on a kernel without IPVS runs the iptables proxier
(upstream's historical ``CanUseIPVSProxier`` fallback, src/kubesvc/proxy/ipvs/support.py).

One node namespace, a real apiserver and EndpointSlice controller (tests/kernel/conftest.py).
The proof is traffic: a ClusterIP from a Pod and from the node, and a NodePort from the
external client, land on the Service's endpoints through iptables rules; the proxy logged
``Can't use the IPVS proxier`` once, with the reason; ``/proxyMode`` says ``iptables`` (the mode
running) and ``/configz`` still says ``ipvs`` (the configuration as given).

This machine's kernel has no IPVS. On a kernel that has it, the module forces the fallback by
configuring a scheduler whose module cannot exist, so the test proves the same path anywhere.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.kernel.helpers import all_from, assert_spread

pytestmark = pytest.mark.kernel

MODES = ["ipvs"]
NODE_COUNT = 1
# where the kernel already runs IPVS, a scheduler without a module forces the fallback (read
# without loading any module: collecting the tests must not touch the host's kernel)
_SCHEDULER = "kubesvc-no-such-scheduler" if os.path.exists("/proc/net/ip_vs") else "rr"
PROXY_FLAGS = ("--ipvs-min-sync-period=1s", "--ipvs-sync-period=10s", f"--ipvs-scheduler={_SCHEDULER}", "--v=2")
FALLBACK_LINE = "Can't use the IPVS proxier: "


async def test_ipvs_mode_without_kernel_support_runs_iptables_and_says_so(kt):
    (node,) = kt.nodes
    proxy = kt.proxy(node)
    labels = {"app": "fallback"}
    await kt.pod(node, "fb-1", labels)
    await kt.pod(node, "fb-2", labels)
    client = await kt.client_pod(node, "client")
    svc = await kt.service("fallback", labels, type="NodePort")
    vip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    both = {"fb-1", "fb-2"}

    from_pod = await kt.until(client, "tcp", vip, 80, 100, all_from(both), what="ClusterIP through the iptables fallback")
    assert_spread(from_pod, both, 15, "ClusterIP from a pod")
    await kt.until(node, "tcp", vip, 80, 40, all_from(both), what="ClusterIP from the node itself")
    await kt.until(kt.external, "tcp", node.lan_ip, node_port, 40, all_from(both), what="NodePort from outside")

    status, mode = node.ns.http_get(proxy.metrics_port, "/proxyMode")
    assert (status, mode) == (200, "iptables"), f"/proxyMode must name the mode running: {status} {mode!r}"
    status, body = node.ns.http_get(proxy.metrics_port, "/configz")
    assert status == 200, body
    assert json.loads(body)["kubeproxy.config.k8s.io"]["mode"] == "ipvs", body

    log = proxy.log(0)
    fallback_lines = [line for line in log.splitlines() if FALLBACK_LINE in line]
    assert len(fallback_lines) == 1, f"expected one fallback line, got {fallback_lines}\n{log[-3000:]}"
    reason = fallback_lines[0].split(FALLBACK_LINE, 1)[1]
    assert "kernel modules are not loaded" in reason or "ipset" in reason, fallback_lines[0]
    assert "kube-proxy running in iptables mode" in log, log[-3000:]

    nat = node.ns.run("iptables-save", "-t", "nat").stdout
    assert any(line.startswith("-A KUBE-SVC-") for line in nat.splitlines()), f"no iptables Service chains:\n{nat[:3000]}"
    assert "kube-ipvs0" not in node.ns.run("ip", "-br", "link").stdout
