"""The last status of a Pod the agent is done with (upstream status manager ``TerminatePod``)
and of a Pod deleted before the agent ran any of it. Expected statuses written by hand."""

from datetime import datetime, timezone

from kubesvc.agent.podstatus import never_started_status, terminate_pod_status

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NOW = "2026-01-01T12:00:00Z"
UNKNOWN = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                          "message": "The container could not be located when the pod was terminated"}}
SCHEDULED = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T11:59:00Z"}


def test_a_pod_deleted_before_it_ran_is_failed_with_its_containers_unknown():
    pod = {"metadata": {"name": "p", "uid": "u1", "deletionTimestamp": NOW},
           "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "nginx"}]},
           "status": {"phase": "Pending", "conditions": [SCHEDULED], "qosClass": "BestEffort"}}
    assert never_started_status(pod, ["10.9.0.7"], T0) == {
        "phase": "Failed",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": None, "lastTransitionTime": NOW},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": NOW},
            {"type": "Ready", "status": "False", "lastProbeTime": None, "lastTransitionTime": NOW,
             "reason": "ContainersNotReady", "message": "containers with unready status: [a b]"},
            {"type": "ContainersReady", "status": "False", "lastProbeTime": None, "lastTransitionTime": NOW,
             "reason": "ContainersNotReady", "message": "containers with unready status: [a b]"},
            SCHEDULED,
        ],
        "hostIP": "10.9.0.7", "hostIPs": [{"ip": "10.9.0.7"}],
        "containerStatuses": [
            {"name": "a", "state": UNKNOWN, "lastState": {}, "ready": False, "restartCount": 0, "image": "busybox", "imageID": "", "started": False},
            {"name": "b", "state": UNKNOWN, "lastState": {}, "ready": False, "restartCount": 0, "image": "nginx", "imageID": "", "started": False},
        ],
        "qosClass": "BestEffort",
    }


def test_a_pod_with_init_containers_deleted_before_it_ran_keeps_them_waiting():
    # not initialized: no container is marked (upstream marks only once the Pod has
    # initialized, and only the init containers up to the last one that started)
    pod = {"metadata": {"name": "p", "uid": "u1"},
           "spec": {"restartPolicy": "Never", "initContainers": [{"name": "i", "image": "busybox"}], "containers": [{"name": "a", "image": "busybox"}]},
           "status": {"phase": "Pending"}}
    status = never_started_status(pod, [], T0)
    assert status["phase"] == "Failed"
    assert [s["state"] for s in status["initContainerStatuses"]] == [{"waiting": {"reason": "PodInitializing"}}]
    assert [s["state"] for s in status["containerStatuses"]] == [{"waiting": {"reason": "PodInitializing"}}]
    assert {c["type"]: (c["status"], c.get("reason")) for c in status["conditions"]}["Initialized"] == ("False", "ContainersNotInitialized")


def test_terminate_pod_status_marks_what_is_not_terminated():
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    spec = {"initContainers": [{"name": "i1"}, {"name": "i2"}, {"name": "i3"}], "containers": [{"name": "a"}, {"name": "b"}]}
    status = {"phase": "Running",
              "initContainerStatuses": [{"name": "i1", "state": {"running": {}}}, {"name": "i2", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                                        {"name": "i3", "state": done}],
              "containerStatuses": [{"name": "a", "state": {"running": {"startedAt": NOW}}}, {"name": "b", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}
    assert terminate_pod_status(spec, status) == {
        "phase": "Failed",
        "initContainerStatuses": [{"name": "i1", "state": UNKNOWN}, {"name": "i2", "state": done}, {"name": "i3", "state": done}],
        "containerStatuses": [{"name": "a", "state": UNKNOWN}, {"name": "b", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
    }
    # a terminal phase stays as it is
    assert terminate_pod_status({"containers": [{"name": "a"}]}, {"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": done}]})["phase"] == "Succeeded"
