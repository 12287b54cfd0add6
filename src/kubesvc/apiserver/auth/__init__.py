"""Who a request is and what it may do: kube-apiserver's authentication and authorization.

* ``user``: the authenticated identity (``user.Info``) and the well-known users and groups;
* ``attributes``: what a request asks for, as the authorizer sees it (upstream RequestInfo);
* ``authorizer``: the decision type, the authorizer chain and the 403 wording;
* ``pki``: the cluster CA and the certificates and kubeconfigs it issues.

Reference: ../shared/reference/identity.md.
"""
