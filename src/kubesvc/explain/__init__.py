"""``kubesvc explain``: why a Service does not answer, from the API and the nodes.

The question after "it doesn't answer" has a short list of usual answers, which people find today
by reading ``kubectl get pods --show-labels``, ``kubectl get endpointslices -o yaml`` and
``kubectl describe pod`` side by side (the Kubernetes "Debug Services" task page walks them in
this order: does the Service exist, does DNS resolve it, does it have endpoints, do the Pods'
labels match its selector, are the Pods Ready, is the ``targetPort`` right, is kube-proxy
working). ``findings.py`` answers them as a pure function of what ``gather.py`` read: each cause
one line with the fix a user would make; a Service with none of them is said to be healthy.
"""
