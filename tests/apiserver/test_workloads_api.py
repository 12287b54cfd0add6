"""The workload kinds (apps/v1 Deployment, ReplicaSet, DaemonSet, ControllerRevision; v1
ReplicationController; batch/v1 Job) through the real kubectl and the official Python client.

What a user sees: upstream's defaults printed back, upstream's validation messages, the
``kubectl get`` columns, short names and ``get all``, ``explain``, server-side apply, the
``status`` and ``scale`` subresources. No controllers run here: status is what the server
itself sets.
"""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports: [{containerPort: 80}]
"""


@pytest.fixture
def ns(apiserver):
    name = f"w-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    return name


def get_json(apiserver, *args):
    return json.loads(apiserver.kubectl("get", *args, "-o", "json").stdout)


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_apply_deployment_prints_upstream_defaults(apiserver, ns):
    out = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert out.stdout.strip() == "deployment.apps/web created"
    deploy = get_json(apiserver, "-n", ns, "deployment", "web")
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    pod_spec = spec["template"]["spec"]
    assert (pod_spec["restartPolicy"], pod_spec["dnsPolicy"], pod_spec["schedulerName"], pod_spec["terminationGracePeriodSeconds"]) == \
        ("Always", "ClusterFirst", "default-scheduler", 30)
    container = pod_spec["containers"][0]
    assert (container["imagePullPolicy"], container["terminationMessagePath"], container["ports"][0]["protocol"]) == \
        ("IfNotPresent", "/dev/termination-log", "TCP")
    assert deploy["metadata"]["generation"] == 1
    # re-applying the same manifest changes nothing
    again = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert again.stdout.strip() == "deployment.apps/web unchanged"


def test_recreate_strategy_gets_no_rolling_update(apiserver, ns):
    manifest = yaml.safe_load(DEPLOYMENT)
    manifest["spec"]["strategy"] = {"type": "Recreate"}
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    assert get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("change, message", [
    (lambda d: d["spec"]["template"]["metadata"].update(labels={"app": "other"}),
     'spec.template.metadata.labels: Invalid value: map[string]string{"app":"other"}: `selector` does not match template `labels`'),
    (lambda d: d["spec"].update(replicas=-1), "spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
    (lambda d: d["spec"].pop("selector"), "spec.selector: Required value"),
    (lambda d: d["spec"].update(strategy={"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}),
     'spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"0%"}: '
     "may not be 0 when `maxSurge` is 0"),
    (lambda d: d["spec"].update(strategy={"rollingUpdate": {"maxSurge": "1x"}}),
     "a valid percent string must be a numeric string followed by an ending '%'"),
    (lambda d: d["spec"].update(strategy={"rollingUpdate": {"maxUnavailable": "150%"}}), "must not be greater than 100%"),
    (lambda d: d["spec"].update(strategy={"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}),
     "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"),
    (lambda d: d["spec"]["template"]["spec"].update(restartPolicy="Never"),
     'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"'),
    (lambda d: d["spec"].update(minReadySeconds=700),
     "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("image"),
     "spec.template.spec.containers[0].image: Required value"),
], ids=["selector-mismatch", "negative-replicas", "no-selector", "surge-and-unavailable-0", "bad-percent", "over-100",
        "recreate-with-rolling", "restart-never", "deadline-vs-min-ready", "template-pod-rules"])
def test_invalid_deployments_get_upstream_messages(apiserver, ns, change, message):
    manifest = yaml.safe_load(DEPLOYMENT)
    change(manifest)
    result = apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0
    assert 'The Deployment "web" is invalid' in result.stderr
    assert message in result.stderr, result.stderr


def test_selector_is_immutable(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    patch = json.dumps({"spec": {"selector": {"matchLabels": {"app": "web", "tier": "x"}},
                                 "template": {"metadata": {"labels": {"app": "web", "tier": "x"}}}}})
    result = apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--type=merge", "-p", patch, check=False)
    assert result.returncode != 0
    assert ('spec.selector: Invalid value: &v1.LabelSelector{MatchLabels:map[string]string{"app":"web", "tier":"x"}, '
            "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable") in result.stderr


def test_generation_counts_spec_and_annotation_changes_not_status(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--type=merge", "-p", '{"spec":{"replicas":3}}')
    assert get_json(apiserver, "-n", ns, "deploy", "web")["metadata"]["generation"] == 2
    apiserver.kubectl("annotate", "-n", ns, "deploy", "web", "note=x")
    assert get_json(apiserver, "-n", ns, "deploy", "web")["metadata"]["generation"] == 3
    apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--subresource=status", "--type=merge",
                      "-p", '{"status":{"replicas":3,"readyReplicas":2,"updatedReplicas":3,"availableReplicas":2}}')
    deploy = get_json(apiserver, "-n", ns, "deploy", "web")
    assert deploy["metadata"]["generation"] == 3 and deploy["status"]["readyReplicas"] == 2
    # a main-resource write cannot change status
    apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--type=merge", "-p", '{"status":{"readyReplicas":0}}')
    assert get_json(apiserver, "-n", ns, "deploy", "web")["status"]["readyReplicas"] == 2


def test_status_rules_on_the_status_subresource(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    result = apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--subresource=status", "--type=merge",
                               "-p", '{"status":{"replicas":1,"readyReplicas":1,"availableReplicas":2}}', check=False)
    assert result.returncode != 0
    assert "status.availableReplicas: Invalid value: 2: cannot be greater than status.replicas" in result.stderr
    assert "status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas" in result.stderr


def test_get_columns_and_wide(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    apiserver.kubectl("patch", "-n", ns, "deploy", "web", "--subresource=status", "--type=merge",
                      "-p", '{"status":{"replicas":1,"readyReplicas":1,"updatedReplicas":1,"availableReplicas":1}}')
    table = rows(apiserver.kubectl("get", "-n", ns, "deploy").stdout)
    assert table[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1][:4] == ["web", "1/1", "1", "1"]
    wide = rows(apiserver.kubectl("get", "-n", ns, "deployments.apps", "-o", "wide").stdout)
    assert wide[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][5:] == ["nginx", "nginx:1.27", "app=web"]


def test_replica_set_daemon_set_job_rc_columns_and_short_names(apiserver, ns):
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    objects = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs1"},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": template}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds1"},
         "spec": {"selector": {"matchLabels": {"app": "x"}},
                  "template": {**template, "spec": {**template["spec"], "nodeSelector": {"disk": "ssd"}}}}},
        {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc1"},
         "spec": {"replicas": 3, "template": template}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "job1"},
         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
    ]
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects))
    rs = rows(apiserver.kubectl("get", "-n", ns, "rs", "-o", "wide").stdout)
    assert rs[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert rs[1][:4] == ["rs1", "2", "0", "0"] and rs[1][5:] == ["c", "busybox", "app=x"]
    ds = rows(apiserver.kubectl("get", "-n", ns, "ds").stdout)
    assert ds[0] == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR", "AGE"]
    assert ds[1][:7] == ["ds1", "0", "0", "0", "0", "0", "disk=ssd"]
    rc = rows(apiserver.kubectl("get", "-n", ns, "rc", "-o", "wide").stdout)
    assert rc[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert rc[1][:4] == ["rc1", "3", "0", "0"] and rc[1][-1] == "app=x"
    jobs = rows(apiserver.kubectl("get", "-n", ns, "jobs").stdout)
    assert jobs[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert jobs[1][:3] == ["job1", "Running", "0/1"]
    everything = apiserver.kubectl("get", "all", "-n", ns).stdout
    for shown in ("replicaset.apps/rs1", "daemonset.apps/ds1", "replicationcontroller/rc1", "job.batch/job1"):
        assert shown in everything, everything


def test_replication_controller_defaults_selector_and_labels_from_template(apiserver, ns):
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc1"},
          "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(rc))
    got = get_json(apiserver, "-n", ns, "rc", "rc1")
    assert got["spec"]["selector"] == {"app": "x"} and got["metadata"]["labels"] == {"app": "x"}
    assert got["spec"]["replicas"] == 1 and got["status"] == {"replicas": 0}


def test_job_gets_a_generated_selector_and_defaults(apiserver, ns):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "perl"}]}}}}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(job))
    got = get_json(apiserver, "-n", ns, "job", "pi")
    uid = got["metadata"]["uid"]
    assert got["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    expected_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi", "controller-uid": uid, "job-name": "pi"}
    assert got["spec"]["template"]["metadata"]["labels"] == expected_labels
    assert got["metadata"]["labels"] == expected_labels
    spec = got["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"], spec["completionMode"], spec["suspend"],
            spec["podReplacementPolicy"]) == (1, 1, 6, "NonIndexed", False, "TerminatingOrFailed")
    result = apiserver.kubectl("create", "-n", ns, "-f", "-", check=False,
                               input=json.dumps({**job, "metadata": {"name": "always"},
                                                 "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "perl"}]}}}}))
    assert 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"' in result.stderr


def test_daemon_set_template_generation(apiserver, ns):
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds1"},
          "spec": {"selector": {"matchLabels": {"app": "x"}},
                   "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(ds))
    got = get_json(apiserver, "-n", ns, "ds", "ds1")
    assert got["metadata"]["annotations"]["deprecated.daemonset.template.generation"] == "1"
    assert got["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    apiserver.kubectl("patch", "-n", ns, "ds", "ds1", "--type=merge", "-p", '{"spec":{"minReadySeconds":5}}')
    got = get_json(apiserver, "-n", ns, "ds", "ds1")
    assert (got["metadata"]["generation"], got["metadata"]["annotations"]["deprecated.daemonset.template.generation"]) == (2, "1")
    apiserver.kubectl("set", "image", "-n", ns, "ds/ds1", "c=busybox:1.36")
    got = get_json(apiserver, "-n", ns, "ds", "ds1")
    assert (got["metadata"]["generation"], got["metadata"]["annotations"]["deprecated.daemonset.template.generation"]) == (3, "2")


def test_server_side_apply_of_a_deployment(apiserver, ns):
    first = apiserver.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert first.stdout.strip() == "deployment.apps/web serverside-applied"
    changed = yaml.safe_load(DEPLOYMENT)
    changed["spec"]["replicas"] = 4
    changed["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    apiserver.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=json.dumps(changed))
    got = get_json(apiserver, "-n", ns, "deploy", "web")
    assert got["spec"]["replicas"] == 4 and got["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    shown = get_json(apiserver, "-n", ns, "deploy", "web", "--show-managed-fields")
    managers = {entry["manager"] for entry in shown["metadata"]["managedFields"]}
    assert managers == {"kubectl"}


def test_set_env_resources_and_image(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    apiserver.kubectl("set", "image", "-n", ns, "deployment/web", "nginx=nginx:1.28")
    apiserver.kubectl("set", "env", "-n", ns, "deployment/web", "MODE=fast")
    apiserver.kubectl("set", "resources", "-n", ns, "deployment/web", "--limits=cpu=200m,memory=64Mi")
    container = get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nginx:1.28"
    assert container["env"] == [{"name": "MODE", "value": "fast"}]
    assert container["resources"] == {"limits": {"cpu": "200m", "memory": "64Mi"}}


def test_expose_deployment_and_rc(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    out = apiserver.kubectl("expose", "-n", ns, "deployment", "web", "--port=8080", "--target-port=80")
    assert out.stdout.strip() == "service/web exposed"
    svc = get_json(apiserver, "-n", ns, "svc", "web")
    assert svc["spec"]["selector"] == {"app": "web"} and svc["spec"]["ports"][0]["targetPort"] == 80
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
          "spec": {"template": {"metadata": {"labels": {"app": "legacy"}},
                                "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 9000}]}]}}}}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(rc))
    apiserver.kubectl("expose", "-n", ns, "rc", "legacy", "--port=90", "--target-port=9000")
    assert get_json(apiserver, "-n", ns, "svc", "legacy")["spec"]["selector"] == {"app": "legacy"}


def test_explain_walks_into_the_pod_template(apiserver):
    out = apiserver.kubectl("explain", "deployment.spec.strategy.rollingUpdate").stdout
    assert "maxSurge" in out and "maxUnavailable" in out
    out = apiserver.kubectl("explain", "jobs.spec.template.spec.containers.image").stdout
    assert "FIELD: image <string>" in out


def test_describe_deployment(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    out = apiserver.kubectl("describe", "-n", ns, "deployment", "web").stdout
    assert "Selector:               app=web" in out
    assert "StrategyType:           RollingUpdate" in out
    assert "RollingUpdateStrategy:  25% max unavailable, 25% max surge" in out


def test_delete_deployment(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert apiserver.kubectl("delete", "-n", ns, "deployment", "web").stdout.strip() == 'deployment.apps "web" deleted'
    assert apiserver.kubectl("get", "-n", ns, "deploy", "web", check=False).returncode != 0


# ---- kubectl create (protobuf bodies) and the scale subresource -----------------------------------


def test_kubectl_create_deployment_and_job(apiserver, ns):
    out = apiserver.kubectl("create", "deployment", "web", "-n", ns, "--image=nginx:1.27", "--replicas=3", "--port=80")
    assert out.stdout.strip() == "deployment.apps/web created"
    deploy = get_json(apiserver, "-n", ns, "deploy", "web")
    assert deploy["spec"]["replicas"] == 3 and deploy["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert (container["name"], container["image"], container["ports"]) == ("nginx", "nginx:1.27", [{"containerPort": 80, "protocol": "TCP"}])
    zero = apiserver.kubectl("create", "deployment", "none", "-n", ns, "--image=busybox", "--replicas=0", "--", "sleep", "3600")
    assert zero.returncode == 0
    none = get_json(apiserver, "-n", ns, "deploy", "none")
    assert none["spec"]["replicas"] == 0
    assert none["spec"]["template"]["spec"]["containers"][0]["command"] == ["sleep", "3600"]
    out = apiserver.kubectl("create", "job", "pi", "-n", ns, "--image=perl", "--", "perl", "-e", "print 1")
    assert out.stdout.strip() == "job.batch/pi created"
    job = get_json(apiserver, "-n", ns, "job", "pi")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["perl", "-e", "print 1"]


def test_kubectl_scale_and_the_scale_subresource(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert apiserver.kubectl("scale", "-n", ns, "deployment/web", "--replicas=5").stdout.strip() == "deployment.apps/web scaled"
    assert get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["replicas"] == 5
    scale = json.loads(apiserver.kubectl("get", "--raw", f"/apis/apps/v1/namespaces/{ns}/deployments/web/scale").stdout)
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 5} and scale["status"] == {"replicas": 0, "selector": "app=web"}
    # --current-replicas is a precondition
    stale = apiserver.kubectl("scale", "-n", ns, "deployment/web", "--current-replicas=2", "--replicas=1", check=False)
    assert stale.returncode != 0 and "Expected replicas to be 2, was 5" in stale.stderr
    negative = apiserver.kubectl("patch", "-n", ns, "deployment/web", "--subresource=scale", "--type=merge",
                                 "-p", '{"spec":{"replicas":-1}}', check=False)
    assert 'The Scale "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0' in negative.stderr
    rc = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc1"},
          "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(rc))
    apiserver.kubectl("scale", "-n", ns, "rc/rc1", "--replicas=2")
    assert get_json(apiserver, "-n", ns, "rc", "rc1")["spec"]["replicas"] == 2
    resources = apiserver.kubectl("api-resources", "--api-group=apps", "--no-headers").stdout
    assert "deployments" in resources and "deploy" in resources


def test_python_client_apps_and_batch(apiserver, ns):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "py"}),
                                        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))
    body = client.V1Deployment(metadata=client.V1ObjectMeta(name="py"),
                               spec=client.V1DeploymentSpec(selector=client.V1LabelSelector(match_labels={"app": "py"}), template=template))
    created = apps.create_namespaced_deployment(ns, body)
    assert created.spec.replicas == 1 and created.spec.strategy.rolling_update.max_surge == "25%"
    assert [d.metadata.name for d in apps.list_namespaced_deployment(ns).items] == ["py"]
    scale = apps.patch_namespaced_deployment_scale("py", ns, {"spec": {"replicas": 4}})
    assert scale.spec.replicas == 4 and scale.status.selector == "app=py"
    assert apps.read_namespaced_deployment_scale("py", ns).spec.replicas == 4
    read = apps.read_namespaced_deployment("py", ns)
    read.spec.template.spec.containers[0].image = "busybox:1.36"
    replaced = apps.replace_namespaced_deployment("py", ns, read)
    assert replaced.metadata.generation == 3
    apps.delete_namespaced_deployment("py", ns)
    rs = client.V1ReplicaSet(metadata=client.V1ObjectMeta(name="py-rs"),
                             spec=client.V1ReplicaSetSpec(selector=client.V1LabelSelector(match_labels={"app": "py"}), template=template))
    assert apps.create_namespaced_replica_set(ns, rs).status.replicas == 0
    job_template = client.V1PodTemplateSpec(spec=client.V1PodSpec(restart_policy="Never", containers=[client.V1Container(name="c", image="busybox")]))
    job = batch.create_namespaced_job(ns, client.V1Job(metadata=client.V1ObjectMeta(name="py-job"), spec=client.V1JobSpec(template=job_template)))
    assert job.spec.backoff_limit == 6 and job.spec.completion_mode == "NonIndexed"
    assert [j.metadata.name for j in batch.list_namespaced_job(ns).items] == ["py-job"]
    batch.delete_namespaced_job("py-job", ns)


def test_rollout_pause_resume_restart_and_history_at_the_api(apiserver, ns):
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    assert apiserver.kubectl("rollout", "pause", "-n", ns, "deployment/web").stdout.strip() == "deployment.apps/web paused"
    assert get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["paused"] is True
    again = apiserver.kubectl("rollout", "pause", "-n", ns, "deployment/web", check=False)
    assert 'deployments.apps "web" is already paused' in again.stderr
    blocked = apiserver.kubectl("rollout", "restart", "-n", ns, "deployment/web", check=False)
    assert "can't restart paused deployment (run rollout resume first)" in blocked.stderr
    assert apiserver.kubectl("rollout", "resume", "-n", ns, "deployment/web").stdout.strip() == "deployment.apps/web resumed"
    assert "paused" not in get_json(apiserver, "-n", ns, "deploy", "web")["spec"]
    assert apiserver.kubectl("rollout", "restart", "-n", ns, "deployment/web").stdout.strip() == "deployment.apps/web restarted"
    annotations = get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["template"]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    history = apiserver.kubectl("rollout", "history", "-n", ns, "deployment/web")
    assert history.returncode == 0 and history.stdout.startswith("deployment.apps/web")


@pytest.mark.parametrize("kind, manifest, expected", [
    ("replicaset", {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "d1"},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d1"}},
                             "template": {"metadata": {"labels": {"app": "d1"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}},
     ["Selector:     app=d1", "Replicas:     0 current / 2 desired", "Pods Status:  0 Running / 0 Waiting / 0 Succeeded / 0 Failed"]),
    ("replicationcontroller", {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "d2"},
                               "spec": {"template": {"metadata": {"labels": {"app": "d2"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}},
     ["Selector:     app=d2", "Replicas:     0 current / 1 desired"]),
    ("daemonset", {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d3"},
                   "spec": {"selector": {"matchLabels": {"app": "d3"}},
                            "template": {"metadata": {"labels": {"app": "d3"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}},
     ["Selector:       app=d3", "Desired Number of Nodes Scheduled: 0"]),
    ("job", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "d4"},
             "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
     ["Parallelism:      1", "Completions:      1", "Completion Mode:  NonIndexed", "Suspend:          false", "Backoff Limit:    6"]),
], ids=["rs", "rc", "ds", "job"])
def test_describe(apiserver, ns, kind, manifest, expected):
    apiserver.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(manifest))
    out = apiserver.kubectl("describe", "-n", ns, kind, manifest["metadata"]["name"]).stdout
    for line in expected:
        assert line in out, out


def test_apply_switching_to_recreate_drops_rolling_update(apiserver, ns):
    """kubectl's patch carries ``$retainKeys`` for the strategy (its retainKeys patch strategy)."""
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=DEPLOYMENT)
    manifest = yaml.safe_load(DEPLOYMENT)
    manifest["spec"]["strategy"] = {"type": "Recreate"}
    out = apiserver.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(manifest))
    assert out.stdout.strip() == "deployment.apps/web configured"
    assert get_json(apiserver, "-n", ns, "deploy", "web")["spec"]["strategy"] == {"type": "Recreate"}


def test_python_client_daemon_sets_revisions_and_replication_controllers(apiserver, ns):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    template = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "py"}),
                                        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))
    ds = apps.create_namespaced_daemon_set(ns, client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="py-ds"), spec=client.V1DaemonSetSpec(selector=client.V1LabelSelector(match_labels={"app": "py"}),
                                                                                template=template)))
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1 and ds.status.number_ready == 0
    revision = apps.create_namespaced_controller_revision(ns, client.V1ControllerRevision(
        metadata=client.V1ObjectMeta(name="py-ds-1"), data={"spec": {"template": {"$patch": "replace"}}}, revision=1))
    assert revision.revision == 1
    assert [r.metadata.name for r in apps.list_namespaced_controller_revision(ns).items] == ["py-ds-1"]
    rc = core.create_namespaced_replication_controller(ns, client.V1ReplicationController(
        metadata=client.V1ObjectMeta(name="py-rc"), spec=client.V1ReplicationControllerSpec(template=template)))
    assert rc.spec.selector == {"app": "py"} and rc.status.replicas == 0
    scale = core.patch_namespaced_replication_controller_scale("py-rc", ns, {"spec": {"replicas": 3}})
    assert scale.spec.replicas == 3 and scale.status.selector == "app=py"
    rs = apps.create_namespaced_replica_set(ns, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="py-rs"), spec=client.V1ReplicaSetSpec(selector=client.V1LabelSelector(match_labels={"app": "py"}),
                                                                                 template=template)))
    assert rs.spec.replicas == 1
    assert apps.replace_namespaced_replica_set_scale("py-rs", ns, client.V1Scale(
        metadata=client.V1ObjectMeta(name="py-rs"), spec=client.V1ScaleSpec(replicas=2))).spec.replicas == 2
    status = apps.patch_namespaced_replica_set_status("py-rs", ns, {"status": {"replicas": 2, "readyReplicas": 1}})
    assert status.status.ready_replicas == 1 and status.spec.replicas == 2
    apps.delete_namespaced_daemon_set("py-ds", ns)
    core.delete_namespaced_replication_controller("py-rc", ns)


def test_cron_jobs(apiserver, ns):
    out = apiserver.kubectl("create", "cronjob", "tick", "-n", ns, "--image=busybox", "--schedule=*/5 * * * *", "--", "date")
    assert out.stdout.strip() == "cronjob.batch/tick created"
    cron_job = get_json(apiserver, "-n", ns, "cj", "tick")
    spec = cron_job["spec"]
    assert (spec["schedule"], spec["concurrencyPolicy"], spec["suspend"], spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == \
        ("*/5 * * * *", "Allow", False, 3, 1)
    job_pod_spec = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert job_pod_spec["restartPolicy"] == "OnFailure" and job_pod_spec["containers"][0]["command"] == ["date"]
    table = rows(apiserver.kubectl("get", "-n", ns, "cronjobs").stdout)
    assert table[0] == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert table[1][:8] == ["tick", "*/5", "*", "*", "*", "*", "<none>", "False"]
    assert "cronjob.batch/tick" in apiserver.kubectl("get", "all", "-n", ns).stdout
    # a Job made from it by hand, as kubectl create job --from does
    out = apiserver.kubectl("create", "job", "now", "-n", ns, "--from=cronjob/tick")
    assert out.stdout.strip() == "job.batch/now created"
    job = get_json(apiserver, "-n", ns, "job", "now")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["date"]
    bad = apiserver.kubectl("create", "cronjob", "bad", "-n", ns, "--image=busybox", "--schedule=61 * * * *", check=False)
    assert 'spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61' in bad.stderr
    tz = apiserver.kubectl("create", "cronjob", "tz", "-n", ns, "--image=busybox", "--schedule=TZ=UTC 0 * * * *", check=False)
    assert "cannot use TZ or CRON_TZ in schedule, use timeZone field instead" in tz.stderr


def test_field_selectors_of_replica_sets_and_jobs(apiserver, ns):
    template = {"metadata": {"labels": {"app": "f"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    objects = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "f1"},
         "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "f"}}, "template": template}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "f2"},
         "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}},
    ]
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objects))
    assert apiserver.kubectl("get", "-n", ns, "rs", "--field-selector=status.replicas=0", "-o", "name").stdout.split() == ["replicaset.apps/f1"]
    assert apiserver.kubectl("get", "-n", ns, "rs", "--field-selector=status.replicas=1", "-o", "name").stdout.split() == []
    assert apiserver.kubectl("get", "-n", ns, "jobs", "--field-selector=status.successful=0", "-o", "name").stdout.split() == ["job.batch/f2"]
    everywhere = apiserver.kubectl("get", "rs", "-A", "--field-selector", f"metadata.namespace={ns}").stdout
    assert everywhere.split("\n")[0].split()[:2] == ["NAMESPACE", "NAME"] and ns in everywhere
