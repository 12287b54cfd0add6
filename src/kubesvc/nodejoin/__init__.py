"""A machine joining a cluster as a node: bootstrap-token discovery, the node's client
certificate through a CertificateSigningRequest (kubelet TLS bootstrap), its rotation, and
the files the join keeps under its data dir."""
