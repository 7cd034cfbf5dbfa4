"""``courier run --batch N --in-flight M``: every promise of one job a round, for a batch.

Real ``courier run`` processes, real receivers (in this process or a child of their
own) over real HTTP on loopback, real SQLite files, real SIGKILL and SIGSTOP. What
is checked: a batch is delivered and finished whole, each job once; a courier
killed mid-batch leaves the batch's unfinished jobs leased until their leases end
and another courier recovers them, the inbox absorbing the re-sends; a receiver
killed between its group commit and its answers loses nothing and applies nothing
twice; a stale finish is refused for its item alone; settings whose lease cannot
cover a batch's deliveries are refused. No test asserts a duration: every wait is
for a state, and bounded.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import worker
from courier import attempts, queueview
from courier.batch_rounds import lease_covers, waits
from courier.cli import EXIT_USAGE, main
from courier.clock import clock_ms
from courier.commands.services import default_timeout_ms
from courier.inbox import Inbox
from courier.procs import Children, courier_command
from courier.receiver import Receiver
from tests.processes.conftest import Spawner
from tests.processes.drills import receiver_dying_once_committed

WAIT_S = 30.0
POLL_S = 0.02


def queue_of(folder: Path, count: int, *, max_attempts: int = 3) -> tuple[Path, list[str]]:
    """A queue file holding ``count`` jobs ``j01``... (qty 1), enqueued now in one batch."""
    queue = folder / "queue.sqlite"
    ids = [f"j{n:02d}" for n in range(1, count + 1)]
    con = worker.open_queue(queue)
    events = [{"id": job_id, "qty": 1} for job_id in ids]
    assert worker.enqueue_many(con, events, clock_ms(), 60_000, max_attempts) == [True] * count
    con.close()
    return queue, ids


def run_argv(queue: Path, url: str, owner: str, *options: str) -> list[str]:
    return courier_command("run", queue, "--url", url, "--owner", owner, *options)


def wait_until(what: str, check: Any, timeout_s: float = WAIT_S) -> None:
    until = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < until, f"still waiting for {what}"
        time.sleep(POLL_S)


def jobs_of(queue: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in queueview.read_queue(queue)["jobs"]}


def effects_by_id(inbox: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job_id, _ in Inbox(inbox, create=False).effects():
        counts[job_id] = counts.get(job_id, 0) + 1
    return counts


# --- A batch delivered whole -------------------------------------------------------------


def test_a_batched_courier_delivers_and_records_each_job_once(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue, ids = queue_of(tmp_path, 20)
    log = tmp_path / "c1.log"
    argv = run_argv(queue, receiver.url, "c1", "--batch", "8", "--in-flight", "4")
    courier = children.start([*argv, "--until-drained", "--max-seconds", str(WAIT_S)], log)
    assert courier.wait(timeout=WAIT_S + 10) == 0, log.read_text()
    text = log.read_text()
    assert "batches of 8 with 4 in flight" in text
    assert all(f"c1: {job_id} token=1 -> done" in text for job_id in ids), text
    assert {row["status"] for row in jobs_of(queue).values()} == {"done"}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids, 1)
    logged = attempts.last_attempts(queue)
    assert {job_id: (row["outcome"], row["status"]) for job_id, row in logged.items()} == (
        dict.fromkeys(ids, ("ok", "done"))
    )
    # Each delivery's claimed row, written with its batch's before the deliveries start,
    # then its outcome row: two rows an attempt, one token.
    for job_id in ids:
        rows = [(row["outcome"], row["token"]) for row in attempts.attempts_of(queue, job_id)]
        assert rows == [(attempts.CLAIMED, 1), ("ok", 1)], (job_id, rows)
    assert "could not record" not in text, text


# --- A courier killed mid-batch ---------------------------------------------------------------


def _drained_by_c2(
    queue: Path, receiver: Receiver, options: tuple[str, ...], folder: Path, children: Children
) -> dict[str, Any]:
    """A second courier, ``c2``, drains the queue after the first was killed; the
    inbox's summary once it is done."""
    log = folder / "c2.log"
    c2 = children.start([*run_argv(queue, receiver.url, "c2", *options), "--until-drained"], log)
    assert c2.wait(timeout=WAIT_S) == 0, log.read_text()
    return receiver.inbox.summary()


def _absorbed(inbox: Path, summary: dict[str, Any], ids: list[str], applied: Any) -> None:
    """Every job applied once; each the killed courier had sent was sent again by the
    other and absorbed by the inbox."""
    assert effects_by_id(inbox) == dict.fromkeys(ids, 1)
    by_id = {row["id"]: row for row in summary["rows"]}
    assert all(by_id[job_id]["requests"] == 2 for job_id in applied), "re-sent, absorbed"
    assert all(by_id[job_id]["sender"] == "c1" for job_id in applied)


class KillSenderAfter:
    """Kills the courier process ``pid`` (set once it runs) right after the inbox
    committed the ``count``-th delivery, before that delivery's answer."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pid: int | None = None
        self.seen = 0
        self.lock = threading.Lock()

    def before_apply(self, delivery_id: str, sender: str | None) -> KillSenderAfter:
        return self

    def refusal(self) -> None:
        return None

    def after_commit(self, verdict: str) -> bool:
        with self.lock:
            self.seen += 1
            if self.seen == self.count and self.pid is not None:
                self.reached(self.pid)
        return True

    def reached(self, pid: int) -> None:
        """The ``count``-th delivery is committed: kill the courier."""
        os.kill(pid, signal.SIGKILL)


def test_a_courier_killed_mid_batch_leaves_the_rest_leased_and_another_recovers_them(
    tmp_path: Path, children: Children
) -> None:
    queue, ids = queue_of(tmp_path, 8)
    killer = KillSenderAfter(3)
    with Receiver(tmp_path / "inbox.sqlite", interference=killer) as receiver:
        options = ("--batch", "8", "--in-flight", "2", "--lease-ms", "2000")
        log1 = tmp_path / "c1.log"
        c1 = children.start([*run_argv(queue, receiver.url, "c1", *options)], log1)
        killer.pid = c1.pid
        assert c1.wait(timeout=WAIT_S) == -signal.SIGKILL, log1.read_text()
        # The crash cost: every job of the batch waits for its lease, none was finished,
        # though the receiver applied some of them.
        rows = jobs_of(queue)
        assert {(row["status"], row["owner"], row["token"]) for row in rows.values()} == {
            ("leased", "c1", 1)
        }
        applied = effects_by_id(receiver.inbox.path)
        assert 3 <= len(applied) < len(ids)
        killer.count = 0  # kills no more
        summary = _drained_by_c2(queue, receiver, options, tmp_path, children)
    rows = jobs_of(queue)
    assert {(row["status"], row["owner"], row["token"]) for row in rows.values()} == {
        ("done", None, 2)
    }
    _absorbed(tmp_path / "inbox.sqlite", summary, ids, applied)


class _SignalSenderOnceAhead(KillSenderAfter):
    """Sends ``signum`` to the courier process ``pid`` (set once it runs) right after
    the inbox committed its ``count``-th delivery, before that delivery's answer, once
    the queue file shows ``leased`` jobs leased (the batch claimed ahead among them)."""

    def __init__(self, queue: Path, count: int, leased: int, signum: int) -> None:
        super().__init__(count)
        self.queue, self.leased, self.signum = queue, leased, signum
        self.sent = False

    def reached(self, pid: int) -> None:
        wait_until(f"{self.leased} jobs leased", lambda: self._leased() >= self.leased)
        os.kill(pid, self.signum)
        self.sent = True

    def _leased(self) -> int:
        return sum(row["status"] == "leased" for row in jobs_of(self.queue).values())


def test_a_courier_killed_mid_pipeline_leaves_both_batches_leased_and_another_recovers_them(
    tmp_path: Path, children: Children
) -> None:
    """Killed while its first batch is delivered and its second is claimed ahead: both
    batches (twice --batch) wait for their leases; another courier then delivers them,
    the inbox absorbing the re-sends of those the receiver had applied."""
    queue, ids = queue_of(tmp_path, 16)
    killer = _SignalSenderOnceAhead(queue, 3, 8, signal.SIGKILL)
    with Receiver(tmp_path / "inbox.sqlite", interference=killer) as receiver:
        options = ("--batch", "4", "--in-flight", "2", "--lease-ms", "3000")
        log1 = tmp_path / "c1.log"
        c1 = children.start([*run_argv(queue, receiver.url, "c1", *options)], log1)
        killer.pid = c1.pid
        assert c1.wait(timeout=WAIT_S) == -signal.SIGKILL, log1.read_text()
        rows = jobs_of(queue)
        leased = {job_id for job_id, row in rows.items() if row["status"] == "leased"}
        assert leased == set(ids[:8]), "the batch in flight and the one claimed ahead"
        assert {(rows[job_id]["owner"], rows[job_id]["token"]) for job_id in leased} == {("c1", 1)}
        assert {rows[job_id]["status"] for job_id in ids[8:]} == {"pending"}
        applied = effects_by_id(receiver.inbox.path)
        assert len(applied) >= 3 and set(applied) <= set(ids[:4])
        killer.count = 0  # signals no more
        summary = _drained_by_c2(queue, receiver, options, tmp_path, children)
    rows = jobs_of(queue)
    assert {row["status"] for row in rows.values()} == {"done"}
    assert {rows[job_id]["token"] for job_id in ids[:8]} == {2}, "claimed again after the lease"
    _absorbed(tmp_path / "inbox.sqlite", summary, ids, applied)


def test_sigterm_mid_pipeline_delivers_the_batch_held_ahead_then_stops(
    tmp_path: Path, children: Children
) -> None:
    """SIGTERM while a batch is delivered and the next is claimed ahead: the courier
    delivers and finishes both, then stops cleanly; nothing stays leased."""
    queue, ids = queue_of(tmp_path, 40)
    stopper = _SignalSenderOnceAhead(queue, 3, 8, signal.SIGTERM)
    with Receiver(tmp_path / "inbox.sqlite", interference=stopper) as receiver:
        options = ("--batch", "4", "--in-flight", "2", "--lease-ms", "4000", "--forever")
        log = tmp_path / "c1.log"
        courier = children.start([*run_argv(queue, receiver.url, "c1", *options)], log)
        stopper.pid = courier.pid
        assert courier.wait(timeout=WAIT_S) == 0, log.read_text()
    assert stopper.sent
    text = log.read_text()
    assert "c1: stopped (stopped)" in text, text
    rows = jobs_of(queue)
    done = {job_id for job_id, row in rows.items() if row["status"] == "done"}
    assert {row["status"] for row in rows.values()} <= {"done", "pending"}, "none leased"
    assert set(ids[:8]) <= done and len(done) % 4 == 0, sorted(done)
    assert effects_by_id(tmp_path / "inbox.sqlite") == dict.fromkeys(sorted(done), 1)


# --- A receiver killed between its group commit and its answers --------------------------


def test_a_receiver_killed_between_its_group_commit_and_its_answers_loses_nothing(
    tmp_path: Path, children: Children, spawner: Spawner
) -> None:
    queue, ids = queue_of(tmp_path, 8, max_attempts=16)
    inbox, port_file = tmp_path / "inbox.sqlite", tmp_path / "port"
    dying = spawner.start(receiver_dying_once_committed, str(inbox), str(port_file), 4)
    wait_until("the receiver's port", port_file.exists)
    port = port_file.read_text().strip()
    url = f"http://127.0.0.1:{port}/deliveries"
    options = ("--batch", "8", "--in-flight", "4", "--lease-ms", "4000", "--until-drained")
    log = tmp_path / "c1.log"
    courier = children.start([*run_argv(queue, url, "c1", *options), "--max-seconds", "60"], log)
    dying.join(timeout=WAIT_S)
    assert dying.exitcode == -signal.SIGKILL
    # Four deliveries committed and none was answered (the courier had four in flight).
    committed = effects_by_id(inbox)
    assert len(committed) == 4 and set(committed.values()) == {1}
    again = children.start(
        courier_command("serve", inbox, "--port", port, "--max-seconds", "60"), tmp_path / "r.log"
    )
    try:
        assert courier.wait(timeout=WAIT_S * 2) == 0, log.read_text()
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=WAIT_S)
    assert {row["status"] for row in jobs_of(queue).values()} == {"done"}
    assert effects_by_id(inbox) == dict.fromkeys(ids, 1)
    rows = {row["id"]: row for row in Inbox(inbox, create=False).summary()["rows"]}
    assert all(rows[job_id]["requests"] >= 2 for job_id in committed), "re-sent, absorbed"
    for job_id in committed:  # committed, unanswered: a retry first, done at a re-send
        logged = attempts.attempts_of(queue, job_id)
        tried = [row for row in logged if row["outcome"] != attempts.CLAIMED]
        assert logged[0]["outcome"] == attempts.CLAIMED, logged
        assert (tried[0]["outcome"], tried[0]["kind"]) == ("retry", "connection"), tried
        assert (tried[-1]["outcome"], tried[-1]["status"]) == ("ok", "done"), tried


# --- A stale finish is refused for its item alone --------------------------------------


class _StopSenderWhenAllCommitted:
    """SIGSTOPs the courier ``pid`` once the first ``count`` deliveries have committed,
    before any of them is answered (``stopped`` is set then); later ones pass."""

    def __init__(self, count: int) -> None:
        self.barrier = threading.Barrier(count)
        self.pid: int | None = None
        self.stopped = threading.Event()

    def before_apply(
        self, delivery_id: str, sender: str | None
    ) -> _StopSenderWhenAllCommitted | None:
        return None if self.stopped.is_set() else self

    def refusal(self) -> None:
        return None

    def after_commit(self, verdict: str) -> bool:
        try:
            if self.barrier.wait(WAIT_S) == 0 and self.pid is not None:
                os.kill(self.pid, signal.SIGSTOP)
                self.stopped.set()
        except threading.BrokenBarrierError:
            pass
        return True


def test_a_stale_finish_is_refused_for_its_item_alone(tmp_path: Path, children: Children) -> None:
    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    stopper = _StopSenderWhenAllCommitted(2)
    with Receiver(tmp_path / "inbox.sqlite", interference=stopper) as receiver:
        options = ("--batch", "2", "--in-flight", "2", "--lease-ms", "8000")
        log = tmp_path / "c1.log"
        # A timeout long enough that the first delivery's answer, held until the other
        # has committed too, does not time out on a loaded machine.
        argv = run_argv(queue, receiver.url, "c1", *options, "--timeout-ms", "2500")
        courier = children.start([*argv, "--max-seconds", str(WAIT_S)], log)
        stopper.pid = courier.pid
        wait_until("the courier's start", lambda: "started" in log.read_text())
        # 'long' has a lease of 8 s; 'short' a lease its deadline cuts to 4 s at most. The
        # courier's turn at the file (its flock) is held meanwhile: one claim takes both.
        turn = os.open(queue, os.O_RDONLY)
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            con = worker.open_queue(queue)
            events = [{"id": "long", "qty": 1}, {"id": "short", "qty": 1}]
            assert worker.enqueue_many(con, events[:1], clock_ms(), 60_000) == [True]
            assert worker.enqueue_many(con, events[1:], clock_ms(), 4_000) == [True]
            con.close()
        finally:
            os.close(turn)
        deadline = jobs_of(queue)["short"]["deadline"]
        try:
            assert stopper.stopped.wait(WAIT_S), log.read_text()
            wait_until("the short lease's end", lambda: clock_ms() > deadline + 100)
        finally:
            courier.send_signal(signal.SIGCONT)
        wait_until("both results", lambda: log.read_text().count(" token=1 -> ") == 2)
        courier.send_signal(signal.SIGTERM)
        assert courier.wait(timeout=WAIT_S) == 0, log.read_text()
    text = log.read_text()
    assert "c1: long token=1 -> done" in text, text
    assert "c1: short token=1 -> stale" in text, text
    rows = jobs_of(queue)
    assert (rows["long"]["status"], rows["long"]["token"]) == ("done", 1)
    # The refused finish changed nothing: leased still, or since quarantined by a claim.
    assert (rows["short"]["status"], rows["short"]["token"]) in {("leased", 1), ("dead", 1)}
    assert rows["short"]["reason"] in (None, "deadline")
    assert effects_by_id(tmp_path / "inbox.sqlite") == {"long": 1, "short": 1}


def test_a_delivery_its_lease_cannot_cover_is_not_sent(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    """A lease that the job's deadline cuts shorter than the send timeout: the job is
    not sent (``unsent``) and waits for its lease, while the rest of the batch goes."""
    queue = tmp_path / "queue.sqlite"
    con = worker.open_queue(queue)
    assert worker.enqueue_many(con, [{"id": "long", "qty": 1}], clock_ms(), 60_000) == [True]
    # A deadline 20 s away: far beyond the courier's start, below its 25 s timeout.
    assert worker.enqueue_many(con, [{"id": "short", "qty": 1}], clock_ms(), 20_000) == [True]
    con.close()
    options = ("--batch", "2", "--in-flight", "2", "--lease-ms", "60000", "--timeout-ms", "25000")
    done = subprocess.run(
        [*run_argv(queue, receiver.url, "c1", *options), "--max-runs", "1"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "c1: short token=1 -> unsent" in done.stdout, done.stdout
    assert "c1: long token=1 -> done" in done.stdout, done.stdout
    assert effects_by_id(receiver.inbox.path) == {"long": 1}
    assert receiver.inbox.summary()["requests"] == 1
    assert (jobs_of(queue)["short"]["status"], jobs_of(queue)["short"]["owner"]) == ("leased", "c1")


# --- Settings that cannot hold ---------------------------------------------------------------


def refused(capsys: pytest.CaptureFixture[str], *options: str) -> str:
    """The one error line of ``courier run`` with ``options`` on no queue at all."""
    argv = ["run", "no-such-queue.sqlite", "--url", "http://127.0.0.1:9/", "--owner", "c1"]
    assert main([*argv, *options]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("courier: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--batch", "64", "--in-flight", "16", "--timeout-ms", "300"), "8 x --timeout-ms 300"),
        (("--batch", "4", "--in-flight", "2", "--timeout-ms", "250"), "4 x --timeout-ms 250"),
        # a batch's own waves fit, the batch claimed ahead's wait does not
        (("--batch", "8", "--in-flight", "8", "--timeout-ms", "500"), "2 x --timeout-ms 500"),
        (("--batch", "3", "--in-flight", "2", "--timeout-ms", "334"), "3 x --timeout-ms 334"),
        (("--batch", "8", "--in-flight", "16"), "--in-flight 16 is more than --batch 8"),
        (
            (
                "--batch",
                "0",
            ),
            "--batch must be a whole number in 1..1000",
        ),
        (
            (
                "--batch",
                "1001",
            ),
            "--batch must be a whole number in 1..1000",
        ),
        (("--batch", "8", "--in-flight", "0"), "--in-flight must be a whole number"),
        (
            (
                "--timeout-ms",
                "1000",
            ),
            "--timeout-ms 1000 is not below --lease-ms 1000",
        ),
        (
            ("--batch", "2", "--in-flight", "2", "--stall-after-acks", "1"),
            "--stall-after-acks stalls one delivery at a time",
        ),
    ],
)
def test_settings_whose_lease_cannot_cover_the_batch_are_refused(
    capsys: pytest.CaptureFixture[str], options: tuple[str, ...], words: str
) -> None:
    assert words in refused(capsys, *options)


@pytest.mark.parametrize(
    "options",
    [
        ("--batch", "4", "--in-flight", "2", "--timeout-ms", "249"),
        ("--batch", "64", "--in-flight", "16"),  # the default timeout fits the lease
        ("--batch", "8", "--in-flight", "8", "--timeout-ms", "499"),
        ("--batch", "3", "--in-flight", "2", "--timeout-ms", "333"),  # ceil(6 / 2): 3 in a row
        ("--timeout-ms", "999"),  # one job a round: nothing claimed ahead
    ],
)
def test_settings_whose_lease_covers_the_batch_go_on_to_the_queue(
    capsys: pytest.CaptureFixture[str], options: tuple[str, ...]
) -> None:
    assert "no queue file" in refused(capsys, *options)


def test_the_default_timeout_leaves_a_quarter_of_the_lease_after_two_batches() -> None:
    for batch, in_flight in ((1, 1), (64, 16), (64, 1), (10, 3), (1000, 7)):
        rows = waits(batch, in_flight)
        timeout_ms = default_timeout_ms(4000, rows)
        assert lease_covers(4000, timeout_ms, batch, in_flight)
        assert rows * timeout_ms <= 3000 < rows * (timeout_ms + 1) + rows
    # two batches' deliveries share the threads: a batch claimed ahead waits behind one
    assert [waits(b, m) for b, m in ((1, 1), (2, 2), (64, 16), (10, 3), (3, 2))] == [1, 2, 8, 7, 3]
    assert default_timeout_ms(1000) == 750  # today's, one job a round
    assert not lease_covers(1000, 125, 8, 2) and lease_covers(1000, 124, 8, 2)


def test_an_exited_courier_leaves_no_child(tmp_path: Path) -> None:
    """The delivery threads are the courier's own: nothing outlives ``courier run``."""
    queue, _ = queue_of(tmp_path, 1)
    done = subprocess.run(
        run_argv(queue, "http://127.0.0.1:9/deliveries", "c1", "--batch", "2", "--max-runs", "1"),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "j01 token=1 -> pending (connection:" in done.stdout
