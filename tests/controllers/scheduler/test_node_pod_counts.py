"""The scheduler's Pods-per-Node counts kept from Pod events (controller.NodePodCounts): a Pod
counts on the Node it is bound to while it is not terminal, whatever order of adds, replays,
updates and deletes the informer hands over. Expected counts written out by hand."""

from kubesvc.controllers.scheduler.controller import NodePodCounts


def pod(node: str | None = None, phase: str = "Running") -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def test_a_pod_counts_on_its_node_while_not_terminal():
    counts = NodePodCounts()
    counts.observe("ns/a", pod())  # pending: nowhere
    assert counts.on("n1") == 0
    counts.observe("ns/a", pod("n1"))  # bound
    counts.observe("ns/a", pod("n1"))  # a replay (the scheduler's own start) counts once
    counts.observe("ns/b", pod("n1"))
    counts.observe("ns/c", pod("n2"))
    assert (counts.on("n1"), counts.on("n2")) == (2, 1)
    counts.observe("ns/a", pod("n1", "Succeeded"))  # terminal: no longer takes room
    assert counts.on("n1") == 1
    counts.observe("ns/a", None)  # then deleted: nothing more to take away
    counts.observe("ns/b", None)
    assert (counts.on("n1"), counts.on("n2")) == (0, 1)


def test_a_delete_takes_away_what_was_counted_not_what_the_event_says():
    counts = NodePodCounts()
    counts.observe("ns/a", pod("n1"))
    counts.observe("ns/a", None)  # the delete's last state may say anything; the count was n1's
    counts.observe("ns/a", None)  # twice: still nothing below zero
    assert counts.on("n1") == 0
