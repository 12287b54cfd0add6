"""The node proxy (kube-proxy): Services and EndpointSlices in, kernel rules out.

Watch handlers only record changes in the change trackers; one rate-limited sync
(``proxy/proxier.py``) checks the changes out, computes the whole desired state with pure
functions (``topology.categorize_endpoints``, each mode's ``rules.py``) and hands the kernel one
transaction. See DESIGN.md, "The system in one picture".
"""
