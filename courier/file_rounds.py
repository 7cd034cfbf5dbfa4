"""A courier's rounds on a queue file: one kept connection, and turns at writing.

The rules this module keeps:

1. A courier keeps its connection from one round to the next: opening a queue file
   costs more than a claim. It is opened again when the file at the path is
   replaced, and after a round that raised anything but a busy file; a removed
   file ends the courier with ``worker.run_file``'s ``FileNotFoundError``, and
   nothing is ever created.
2. Time is the host's wall clock (``courier.clock.clock_ms``), which every courier
   and the receiver on one host share.
3. Couriers of one queue file take turns at writing it: a round's claim and its
   finish each wait for an exclusive ``flock`` on the file, which the kernel hands
   to a waiter as soon as it is given back. SQLite's busy handler alone is not fair
   (its sleeps grow to 100 ms while newcomers write first, so with 8 couriers one
   could wait out the 1 s busy timeout again and again). The turn is given back
   before each send, so no courier holds it while it waits for an answer. Other
   writers (the CLI, the web page, other programs) do not take turns and meet the
   couriers in SQLite's busy handler as before. A courier stopped (SIGSTOP) in the
   middle of a claim or a finish holds up the others until it goes on or dies, as
   it would by holding SQLite's write lock.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import worker
from courier.backend import Target, require_queue_file
from courier.clock import clock_ms
from courier.delivery import Send
from courier.queueview import is_drained
from courier.transient import is_busy

__all__ = ["FileRounds"]

T = TypeVar("T")


class _Turn:
    """This courier's turn at writing the queue file: an exclusive ``flock`` on it.

    Couriers of one file wait for their turn in the kernel, which wakes a waiter as
    soon as the turn is given back, not in SQLite's busy handler, whose sleeps grow
    to 100 ms while a courier that came later writes first (rule 3). ``flock`` and
    SQLite's own POSIX locks do not interact. The descriptor is closed only after
    the connection: closing any descriptor of a file drops every POSIX lock that
    this process holds on it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.held = False
        self.works = True  # a file system without flock: no turns, SQLite's lock alone

    def take(self) -> None:
        if self.held or not self.works:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:  # ENOLCK, EOPNOTSUPP: this file system keeps no flocks
            self.works = False
            return
        self.held = True

    def give_back(self) -> None:
        if self.held:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        self.give_back()
        os.close(self.fd)


class FileRounds:
    """A courier's rounds on the queue file at ``path`` (``courier.runner.Rounds``).

    Each round does what ``worker.run_file`` does (a missing file is its
    ``FileNotFoundError``, and nothing is created) without opening the file again:
    the connection is made anew when the file at the path is no longer the one it
    opened (removed or replaced) and after a round that raised anything but a busy
    file. The claim and the finish of a round each run in this courier's turn
    (rule 3), taken when ``run_once`` reads the clock and given back when it
    sends, and when it returns. ``close`` it when done.
    """

    def __init__(self, path: Target) -> None:
        self.path = path
        self._con: sqlite3.Connection | None = None
        self._turn: _Turn | None = None
        self._opened: tuple[int, int] | None = None  # (device, inode) of the file

    def _kept(self) -> tuple[sqlite3.Connection, _Turn] | None:
        """The kept connection to the file now at the path and its turn; ``None`` if
        there is no file."""
        try:
            now = os.stat(self.path)
        except OSError:
            now = None
        if now is None or not stat.S_ISREG(now.st_mode):
            self.close()
            return None
        if self._con is None or self._turn is None or self._opened != (now.st_dev, now.st_ino):
            self.close()
            try:
                turn = _Turn(os.open(self.path, os.O_RDONLY | os.O_CLOEXEC))
            except FileNotFoundError:
                return None
            try:
                turn.take()  # open_queue writes too (it creates what is missing)
                self._con = worker.open_queue(self.path)
                turn.give_back()
            except BaseException:
                turn.close()
                raise
            opened = os.fstat(turn.fd)
            self._turn, self._opened = turn, (opened.st_dev, opened.st_ino)
        return self._con, self._turn

    def now_ms(self) -> int:
        """The host's wall clock (rule 2)."""
        return clock_ms()

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        later: int | None = None,
    ) -> list[dict[str, Any]]:
        """One ``run_once`` round with one ``jitter()``: its result, or ``[]`` if
        nothing was claimable. Raises as ``worker.run_file`` does."""
        drawn = jitter()
        kept = self._kept()
        if kept is None:  # no queue file there: run_file says so, in its words
            result = worker.run_file(self.path, owner, clock_ms, send, drawn, lease_ms)
            return [] if result is None else [result]
        con, turn = kept

        def clock_in_turn() -> Any:  # passed on as it came: run_once judges it
            turn.take()
            return clock_ms()  # read once the turn is ours: the time the call is judged at

        def send_out_of_turn(event: dict[str, Any]) -> Any:
            turn.give_back()  # the claim is committed: others write while this one waits
            return send(event)

        try:
            result = worker.run_once(con, owner, clock_in_turn, send_out_of_turn, drawn, lease_ms)
        except BaseException as error:
            if not (isinstance(error, sqlite3.Error) and is_busy(error)):
                self.close()
            raise
        finally:
            turn.give_back()
        return [] if result is None else [result]

    def call(self, action: Callable[[ModuleType, sqlite3.Connection, int], T]) -> T:
        """``action(worker, con, now_ms)``: one queue call on the kept connection, in
        this courier's turn (rule 3), at the time read once the turn is taken, for
        rounds of another kind (``courier.batch_rounds``); its result.

        Raises:
            FileNotFoundError: there is no queue file at the path.
            Anything ``action`` raises; after anything but a busy file the
            connection is made anew on the next use.
        """
        kept = self._kept()
        if kept is None:
            require_queue_file(self.path)  # raises, in its words
            raise FileNotFoundError(f"no queue file at {str(self.path)!r}")  # replaced meanwhile
        con, turn = kept
        try:
            turn.take()
            return action(worker, con, clock_ms())
        except BaseException as error:
            if not (isinstance(error, sqlite3.Error) and is_busy(error)):
                self.close()
            raise
        finally:
            turn.give_back()

    def holding(self) -> bool:
        """False: a round of one job holds nothing for the next (``later`` changes nothing)."""
        return False

    def drained(self) -> bool:
        """True if no job is pending or leased (read on a connection of its own)."""
        return is_drained(self.path)

    def close(self) -> None:
        """Close the kept connection, then its turn's descriptor (in that order)."""
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._turn is not None:
            self._turn.close()
            self._turn, self._opened = None, None
