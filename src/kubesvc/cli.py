"""The ``kubesvc`` command lives in ``kubesvc.cmd``; this name stays for console scripts
installed before the move (``kubesvc = "kubesvc.cli:main"``)."""

from kubesvc.cmd import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
