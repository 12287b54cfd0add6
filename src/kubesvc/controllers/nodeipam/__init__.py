"""kube-controller-manager's node IPAM (pkg/controller/nodeipam): Pod CIDRs for Nodes from
``--cluster-cidr`` by the range allocator."""
