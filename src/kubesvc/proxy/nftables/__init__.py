"""nftables mode: ``rules`` turns the desired state into one ``nft -f`` transaction (pure, and
documents the table layout), ``proxier.NftablesBackend`` applies it, ``naming`` holds the
upstream chain names."""

from kubesvc.proxy.nftables.proxier import CleanupFailed, NftablesBackend, cleanup_leftovers

__all__ = ["CleanupFailed", "NftablesBackend", "cleanup_leftovers"]
