"""The ReplicaSet controller and the ReplicationController manager (one code, two kinds)."""
