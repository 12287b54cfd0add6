"""The control plane across machines, as k3s's ``--cluster-init`` / ``--server`` builds it:
an etcd member managed by ``kubesvc up`` on each server machine (``etcd_member``: its flags,
certificates and the learner-first join; ``etcd_api``: the member and maintenance calls;
``etcd_process``: the supervised ``etcd`` child), bootstrap tokens (``tokens``) and etcd
snapshots (``snapshot``).

It sits with ``cmd`` and ``up`` (orchestration): it runs processes through
``cmd.supervisor`` and talks to the apiserver through ``client``.
"""
