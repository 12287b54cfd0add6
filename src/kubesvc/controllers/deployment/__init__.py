"""kube-controller-manager's ``deployment-controller`` (pkg/controller/deployment): a Deployment
owns ReplicaSets, one per pod template it has run, and rolls Pods from the old ones to the new
one by scaling them. ``util`` and ``rolling``/``status`` hold the decisions as pure functions;
``controller`` is the shell that reads the caches and writes the API."""
