"""The peers: other SQLite-backed Python queues doing the same enqueue + take + ack work. See
docs/benchmarks.md, ``bench.peers``."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sqlite3
from pathlib import Path
from typing import Any

from bench.ops import event, timed_phases
from tests.stores.sqlite import pragmas

__all__ = ["PEERS", "VERBS", "measure_peer", "open_peer", "peer_version"]

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


class _Peer:
    """What the three peers share: one job a call, and more jobs put for the cycles.
    Each subclass is ``bench.ops.Queue``'s methods in one peer's own calls (the same
    shape on purpose, a deliberate likeness), and ``con``, the connection it writes with."""

    size = 1
    con: sqlite3.Connection

    def put(self, i: int) -> None:
        raise NotImplementedError

    def refill(self, jobs: int) -> None:
        for i in range(jobs):
            self.put(10**7 + i)


class _PersistQueue(_Peer):
    def __init__(self, module: Any, folder: Path) -> None:
        self._queue = module.SQLiteAckQueue(str(folder))
        self.con = self._queue._putter  # private, but its only connection

    def put(self, i: int) -> None:
        self._queue.put(event(i))

    def take(self, now_ms: int) -> list[Any]:
        item = self._queue.get(block=False, raw=True)
        if not isinstance(item, dict) or "pqid" not in item:
            raise RuntimeError(f"persist-queue get returned {item!r}")
        return [item]

    def ack(self, taken: list[Any], now_ms: int) -> None:
        if self._queue.ack(taken[0]) is None:
            raise RuntimeError(f"persist-queue could not ack {taken[0]!r}")

    def close(self) -> None:
        self._queue.close()


class _LiteQueue(_Peer):
    def __init__(self, module: Any, folder: Path) -> None:
        self._queue = module.LiteQueue(str(folder / "litequeue.sqlite3"))
        self.con = self._queue.conn

    def put(self, i: int) -> None:
        self._queue.put(json.dumps(event(i)))

    def take(self, now_ms: int) -> list[Any]:
        message = self._queue.pop()
        if message is None:
            raise RuntimeError("litequeue pop found no message")
        return [message.message_id]

    def ack(self, taken: list[Any], now_ms: int) -> None:
        self._queue.done(taken[0])

    def close(self) -> None:
        self._queue.close()


class _Huey(_Peer):
    def __init__(self, module: Any, folder: Path) -> None:
        self._storage = module.SqliteStorage(name="bench", filename=str(folder / "huey.db"))
        self.con = self._storage.conn

    def put(self, i: int) -> None:
        self._storage.enqueue(json.dumps(event(i)).encode())

    def take(self, now_ms: int) -> list[Any]:
        data = self._storage.dequeue()
        if data is None:
            raise RuntimeError("huey dequeue found no task")
        return [data]

    def ack(self, taken: list[Any], now_ms: int) -> None:
        """Huey has no ack: ``dequeue`` already deleted the task in its transaction."""

    def close(self) -> None:
        self._storage.close()


Peer = _PersistQueue | _LiteQueue | _Huey
_ADAPTERS: dict[str, type[Peer]] = {
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


def open_peer(name: str, folder: Path) -> Peer | None:
    """Open peer ``name`` in its default mode in ``folder``; ``None`` if not installed."""
    try:
        module = importlib.import_module(PEERS[name][1])
    except ImportError:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return _ADAPTERS[name](module, folder)


def measure_peer(name: str, folder: Path, count: int, max_seconds: float) -> dict[str, Any]:
    """``{"installed": False}`` if peer ``name`` is not installed; else its version, the
    journal mode and synchronous setting its connection really uses, and ``count``
    calls of each of ``bench.ops``' phases (as ``Timed`` JSON)."""
    peer = open_peer(name, folder)
    if peer is None:
        return {"installed": False}
    try:
        journal, sync = pragmas(peer.con)
        figures = timed_phases(peer, count, max_seconds)
    finally:
        peer.close()
    return {
        "installed": True,
        "version": peer_version(name),
        "journal_mode": journal,
        "synchronous": sync,
        **{phase: timed.as_dict() for phase, timed in figures.items()},
    }
