"""What every HTTP(S) server of kubesvc shares: the apiserver, the node agent's kubelet API, the
proxy's health and metrics servers and the controller-manager's ``/healthz``.

Upstream keeps these in libraries every binary imports (``k8s.io/apiserver`` for request
parameters and streaming, Go's ``net`` for listeners) rather than in one component; here too
they sit below the components, so the agent and the proxy do not import the apiserver:

- ``listen.py``: listening sockets as Go's ``net.Listen`` makes them, and its error text;
- ``params.py``: query parameters as the parameter codec reads them into options structs;
- ``streaming.py``: long answers (``logs -f``, watches) written piece by piece.
"""
