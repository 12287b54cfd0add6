"""kube-controller-manager's Service networking controllers, as API clients (``kubesvc controller-manager``)."""
