"""The embedded default store: a kine-like log table in one SQLite file (see backend.py)."""

from kubesvc.storage.sqlite.backend import SQLiteBackend

__all__ = ["SQLiteBackend"]
