"""ControllerRevision history (pkg/controller/history/controller_history.go): the snapshots of
a controller's template that DaemonSets (and StatefulSets) keep so they can tell current Pods
from old ones and roll back (``kubectl rollout history|undo daemonset``)."""
