"""The peers: other SQLite-backed Python queues doing the same enqueue + take + ack work.

Each peer runs in its *default* mode (whatever its constructor does when given only a
path) on a file in the benchmark's folder, so on the same disk as worker.py. The
journal mode and synchronous setting printed beside each figure are read back with
``PRAGMA journal_mode`` and ``PRAGMA synchronous`` on the very connection the peer
writes with (``synchronous`` is per connection, so a second connection could not tell).

- persist-queue ``SQLiteAckQueue``: ``put``; take ``get(block=False, raw=True)``; ack
  ``ack`` (by its ``pqid``). Pragmas read on ``_putter`` (private; its only connection).
- litequeue ``LiteQueue``: ``put``; take ``pop``; ack ``done(message_id)``. Pragmas on
  ``conn``.
- huey ``SqliteStorage``: ``enqueue``; take ``dequeue``, which deletes the row; no ack
  (huey has none). Pragmas on ``conn``.

None of them leases with a fencing token: a take is a status flip (persist-queue,
litequeue) or a delete (huey), and an ack is not checked against the taker. The peers
are optional (the ``bench`` extra): a peer that is not installed is reported as such,
never as a failure. Their modules have no type stubs; they are imported with
``importlib`` here and nowhere else.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import sqlite3
from pathlib import Path
from typing import Any, Protocol

from bench.measure import pragmas, run_counted

__all__ = ["PEERS", "VERBS", "PeerQueue", "installed", "measure_peer", "open_peer", "peer_version"]

# name shown -> (distribution on PyPI, importable module)
PEERS: dict[str, tuple[str, str]] = {
    "persist-queue": ("persist-queue", "persistqueue"),
    "litequeue": ("litequeue", "litequeue"),
    "huey": ("huey", "huey.storage"),
}

# Each peer's own verbs for (enqueue, take, ack): how the tables name its calls.
VERBS: dict[str, tuple[str, str, str]] = {
    "persist-queue": ("put", "get", "ack"),
    "litequeue": ("put", "pop", "done"),
    "huey": ("enqueue", "dequeue", "(no ack)"),
}


class PeerQueue(Protocol):
    """The three verbs every peer is measured with, and the settings it really uses."""

    api: str

    def put(self, i: int) -> None:
        """Enqueue job number ``i``."""

    def take(self) -> object:
        """Take the next job (raise if there is none) and return what ``ack`` needs."""

    def ack(self, handle: object) -> None:
        """Acknowledge a taken job."""

    def connection(self) -> sqlite3.Connection:
        """The connection the peer writes with."""

    def close(self) -> None:
        """Close the peer's connections."""


def _payload(i: int) -> dict[str, Any]:
    return {"id": f"job-{i:08d}", "qty": 1 + i % 1000}


# The three adapters have the same shape on purpose (a deliberate likeness, not a copy):
# each is ``PeerQueue``'s methods in one peer's own calls.
class _PersistQueue:
    api = "SQLiteAckQueue: put / get(raw=True) / ack"

    def __init__(self, module: Any, folder: Path) -> None:
        self._queue = module.SQLiteAckQueue(str(folder))

    def put(self, i: int) -> None:
        self._queue.put(_payload(i))

    def take(self) -> object:
        item = self._queue.get(block=False, raw=True)
        if not isinstance(item, dict) or "pqid" not in item:
            raise RuntimeError(f"persist-queue get returned {item!r}")
        return item

    def ack(self, handle: object) -> None:
        if self._queue.ack(handle) is None:
            raise RuntimeError(f"persist-queue could not ack {handle!r}")

    def connection(self) -> sqlite3.Connection:
        con: sqlite3.Connection = self._queue._putter
        return con

    def close(self) -> None:
        self._queue.close()


class _LiteQueue:
    api = "LiteQueue: put / pop / done"

    def __init__(self, module: Any, folder: Path) -> None:
        self._queue = module.LiteQueue(str(folder / "litequeue.sqlite3"))

    def put(self, i: int) -> None:
        self._queue.put(json.dumps(_payload(i)))

    def take(self) -> object:
        message = self._queue.pop()
        if message is None:
            raise RuntimeError("litequeue pop found no message")
        return message.message_id

    def ack(self, handle: object) -> None:
        self._queue.done(handle)

    def connection(self) -> sqlite3.Connection:
        con: sqlite3.Connection = self._queue.conn
        return con

    def close(self) -> None:
        self._queue.close()


class _Huey:
    api = "SqliteStorage: enqueue / dequeue (no ack)"

    def __init__(self, module: Any, folder: Path) -> None:
        self._storage = module.SqliteStorage(name="bench", filename=str(folder / "huey.db"))

    def put(self, i: int) -> None:
        self._storage.enqueue(json.dumps(_payload(i)).encode())

    def take(self) -> object:
        data = self._storage.dequeue()
        if data is None:
            raise RuntimeError("huey dequeue found no task")
        return data

    def ack(self, handle: object) -> None:
        """Huey has no ack: ``dequeue`` already deleted the task in its transaction."""

    def connection(self) -> sqlite3.Connection:
        con: sqlite3.Connection = self._storage.conn
        return con

    def close(self) -> None:
        self._storage.close()


_ADAPTERS: dict[str, type[_PersistQueue] | type[_LiteQueue] | type[_Huey]] = {
    "persist-queue": _PersistQueue,
    "litequeue": _LiteQueue,
    "huey": _Huey,
}


def peer_version(name: str) -> str | None:
    """The installed version of peer ``name``, or ``None`` if it is not installed."""
    try:
        return importlib.metadata.version(PEERS[name][0])
    except importlib.metadata.PackageNotFoundError:
        return None


def installed(name: str) -> bool:
    """True if peer ``name``'s module can be imported here."""
    try:
        return importlib.util.find_spec(PEERS[name][1]) is not None
    except ModuleNotFoundError:
        return False


def open_peer(name: str, folder: Path) -> PeerQueue | None:
    """Open peer ``name`` in its default mode in ``folder``; ``None`` if not installed."""
    try:
        module = importlib.import_module(PEERS[name][1])
    except ImportError:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    adapter: PeerQueue = _ADAPTERS[name](module, folder)
    return adapter


def measure_peer(name: str, folder: Path, count: int, max_seconds: float) -> dict[str, Any]:
    """Time ``count`` enqueues, takes, acks and take+ack cycles of peer ``name``.

    Returns ``{"installed": False}`` if the peer is not installed; otherwise its
    version, API, the journal mode and synchronous setting its connection really uses,
    and one ``Timed`` figure per phase (as JSON).
    """
    peer = open_peer(name, folder)
    if peer is None:
        return {"installed": False}
    try:
        journal, sync = pragmas(peer.connection())
        handles: list[object] = []

        def put(i: int) -> int:
            peer.put(i)
            return 1

        def take(_: int) -> int:
            handles.append(peer.take())
            return 1

        def ack(i: int) -> int:
            peer.ack(handles[i])
            return 1

        def cycle(_: int) -> int:
            peer.ack(peer.take())
            return 1

        figures = {"enqueue": run_counted(put, count, max_seconds)}
        figures["claim"] = run_counted(take, figures["enqueue"].count, max_seconds)
        figures["finish"] = run_counted(ack, len(handles), max_seconds)
        for i in range(count):
            peer.put(count + i)
        figures["cycle"] = run_counted(cycle, count, max_seconds)
    finally:
        peer.close()
    return {
        "installed": True,
        "version": peer_version(name),
        "api": peer.api,
        "journal_mode": journal,
        "synchronous": sync,
        **{phase: timed.as_dict() for phase, timed in figures.items()},
    }
