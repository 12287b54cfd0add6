"""kube-controller-manager's ``daemonset-controller`` (pkg/controller/daemon): one Pod per
eligible node, rolled by ``maxUnavailable``/``maxSurge``, with ControllerRevision history.
``decisions`` holds the choices as pure functions; ``controller`` is the shell."""
