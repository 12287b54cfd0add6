"""kubesvc: Kubernetes Service networking (apiserver, controllers, node proxy) in Python."""

__version__ = "0.1.0"
