"""The Pod network tests of test_join_machines.py again (issue 19's second done-when), on
``--pod-network vxlan`` machines with no L2 adjacency: m1 and m2 on one bridge, m3 and the
spare (a LAN client that is no node) on another, a router namespace between them
(tests/support/lan.py's two segments), with the real ``up`` and ``join`` (tests/nodejoin/joined.py).

The same tests, imported (pytest runs them here against this module's cluster): echo Pods on
the three nodes answer through one ClusterIP from every node and every Pod; a Pod on m1 reaches
the Pod on m3 by its Pod IP and is seen with its own address; a NodePort with
``externalTrafficPolicy: Local`` answers only on m3 and sees the client's address, ``Cluster`` on
all three (the spare reaches m1 and m2 through the router); ``kubesvc leave`` leaves nothing on
m3 (no routes of ours, no ``kubesvc.1`` device, no masquerade table); m1 holds a route, a VTEP
neighbour and an FDB entry for m2, which go once m2's Node is deleted, and m2 stopped keeps
nothing.
"""

from __future__ import annotations

import pytest

from tests.nodejoin.joined import holds_no_pod_network, joined_cluster
# pytest runs imported tests in the order their names are bound here: keep the leaving ones last
from tests.nodejoin.test_join_machines import echoes  # noqa: F401 (the fixture, on this module's cluster)
from tests.nodejoin.test_join_machines import test_pods_on_three_nodes_answer_through_one_cluster_ip_from_every_node_and_pod  # noqa: F401,I001
from tests.nodejoin.test_join_machines import test_a_pod_on_node_one_reaches_a_pod_on_node_three_by_pod_ip_with_its_own_source  # noqa: F401,I001
from tests.nodejoin.test_join_machines import (  # noqa: F401,I001
    test_nodeport_local_answers_only_where_an_endpoint_is_and_keeps_the_client_address_cluster_on_all)

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with joined_cluster(tmp_path_factory.mktemp("join-vxlan"), "vxlan", segments=2) as joined:
        yield joined


def test_leave_leaves_no_vxlan_device_route_or_masquerade_table(cluster):
    """``kubesvc leave`` on m3 (test_join_machines.py checks the Node turning NotReady and its
    endpoints draining, which do not depend on the Pod network)."""
    three = cluster.joiners[1]
    assert "kubesvc.1" in three.ns.ip("link").stdout
    result = three.leave()
    assert result.returncode == 0 and "nothing of" in result.stdout, result.stderr
    assert holds_no_pod_network(three.ns)
    assert "cbr0" not in three.ns.ip("link").stdout


# after the leave: the deletion of m2 comes last
from tests.nodejoin.test_join_machines import test_stopping_a_join_after_kubectl_delete_node_removes_what_it_made  # noqa: E402,F401,I001
