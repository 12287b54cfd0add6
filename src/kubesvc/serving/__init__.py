"""What every HTTP(S) server of kubesvc shares: the apiserver, the node agent's kubelet API, the
proxy's health and metrics servers and the controller-manager's ``/healthz``.

Upstream keeps these in libraries every binary imports (``k8s.io/apiserver`` for request
parameters, streaming and authentication, ``client-go/util/cert`` for certificates, Go's
``net`` for listeners) rather than in one component; here too they sit below the components,
so the agent, the proxy and the controllers do not import the apiserver:

- ``listen.py``: listening sockets as Go's ``net.Listen`` makes them;
- ``params.py``: query parameters as the parameter codec reads them into options structs;
- ``streaming.py``: long answers (``logs -f``, watches) written piece by piece;
- ``user.py``: who a request is (``user.Info``) and the well-known users and groups;
- ``x509.py``: authenticating a request by its client certificate (``request/x509``), which
  the apiserver and the kubelet API do alike;
- ``pki.py``: the cluster CA, the serving and client certificates it signs and the
  kubeconfigs that carry them (the apiserver, ``kubesvc up``, the controller-manager's and
  the agent's ephemeral serving certificates).
"""
