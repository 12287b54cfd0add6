"""A simple spreading scheduler, run by the controller-manager as ``pod-scheduler``: Pods with
``spec.schedulerName: default-scheduler`` (the default) and no node are bound to a Node that
can take them, the least loaded one first. ``placement`` decides (pure), ``controller`` does
the API work."""
