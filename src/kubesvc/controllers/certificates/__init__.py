"""kube-controller-manager's certificate controllers (pkg/controller/certificates):
``csrapproving`` (approver.py), ``csrsigning`` (signer.py) and ``csrcleaner`` (cleaner.py),
sharing the request checks in csr.py."""
