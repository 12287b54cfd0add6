"""iptables mode: ``rules`` turns the desired state into one ``iptables-restore`` input (pure),
``proxier.IptablesBackend`` applies it and watches for outside flushes, ``naming`` holds the
upstream chain names. See ``rules`` for how a packet meets a Service."""

from kubesvc.proxy.iptables.proxier import CleanupFailed, IptablesBackend, cleanup_leftovers

__all__ = ["CleanupFailed", "IptablesBackend", "cleanup_leftovers"]
