"""Concurrency bugs planted in copies of ``worker.py`` and ``pgworker.py``: what the
parallel suite must catch.

Each ``Plant`` is a realistic mistake, made by exact text replacements in the source of
its module (``worker`` for SQLite, ``pgworker`` for PostgreSQL); every replaced text
must appear exactly once, so a plant that no longer fits the code fails loudly instead
of planting nothing. ``plant(bug, folder, conninfo)`` writes the copy and returns the
store that runs it. ``docs/testing.md`` records, for each one, whether the sequential
lockstep catches it and what the parallel suite takes to.

    python -m tests.parallel.planted --lockstep --json FILE   # every plant, both suites
    python -m tests.parallel.planted --only finish-deferred-begin
    python -m tests.parallel.planted --store postgres       # the PostgreSQL plants
    python -m tests.parallel.planted --table FILE             # the docs' table of a run
    python -m tests.parallel.planted --seeds 5 --mode real    # first failures over seeds
    python -m tests.parallel.planted --seeds 40 --from-seed 20  # over seeds 20-59
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plant:
    """A bug: its name, what it does, and the replacements that make it."""

    name: str
    summary: str
    replacements: tuple[tuple[str, str], ...]
    module: str = "worker"

    @property
    def store(self) -> str:
        """The kind of store the plant runs on: ``sqlite`` or ``postgres``."""
        return "sqlite" if self.module == "worker" else "postgres"

    def source(self, original: str) -> str:
        text = original
        for old, new in self.replacements:
            count = text.count(old)
            if count != 1:
                raise AssertionError(f"plant {self.name}: {count} places match {old[:60]!r}")
            text = text.replace(old, new)
        return text


# The texts below quote worker.py on purpose: a plant is worker.py's own code with one
# mistake in it, so its replacements must match the source exactly (checked by ``source``).
_FINISH_TXN = """    with _write_transaction(con, fault) as hooks:
        status = _settle(con, ticket, outcome, now_ms, delay_ms)
        if status is None:
            return False
        hooks.reached("after-finish")
    return status"""

_CLAIM_TXN = """    with _write_transaction(con, fault) as hooks:
        _quarantine(con, now_ms)
        ticket = _lease_next(con, owner, now_ms, lease_ms)
        if ticket is None:
            return None
        hooks.reached("after-claim")
    return ticket"""

SQLITE_PLANTS = (
    Plant(
        "finish-deferred-begin",
        "finish opens its transaction with a deferred BEGIN: its first statement reads,"
        " so it asks for the write lock while holding a read lock, and deadlocks with"
        " another writer",
        (
            (
                "def _write_transaction(con: sqlite3.Connection, fault: Fault | None = None)",
                "def _write_transaction(\n    con: sqlite3.Connection, fault: Fault | None = None,"
                ' begin: str = "BEGIN IMMEDIATE"\n)',
            ),
            ('    con.execute("BEGIN IMMEDIATE")\n', "    con.execute(begin)\n"),
            (
                _FINISH_TXN,
                _FINISH_TXN.replace(
                    "_write_transaction(con, fault)", '_write_transaction(con, fault, "BEGIN")'
                ),
            ),
        ),
    ),
    Plant(
        "claim-chooses-then-leases",
        "claim quarantines and chooses the job in one transaction, commits, and leases"
        " the job it chose in a second one",
        (
            (
                _CLAIM_TXN,
                """    with _write_transaction(con):
        _quarantine(con, now_ms)
        jobs = _claimable(con, now_ms, 1)
    if not jobs:
        return None
    with _write_transaction(con, fault) as hooks:
        ticket = _lease(con, owner, now_ms, lease_ms, jobs[0])
        hooks.reached("after-claim")
    return ticket""",
            ),
        ),
    ),
    Plant(
        "quarantine-commits-alone",
        "claim commits its quarantine in a transaction of its own, then leases in a second one",
        (
            (
                _CLAIM_TXN,
                _CLAIM_TXN.replace(
                    "        _quarantine(con, now_ms)\n",
                    "",
                ).replace(
                    "    with _write_transaction(con, fault) as hooks:\n",
                    "    with _write_transaction(con):\n        _quarantine(con, now_ms)\n"
                    "    with _write_transaction(con, fault) as hooks:\n",
                ),
            ),
        ),
    ),
    Plant(
        "send-inside-claim",
        "run_once sends while the claim's transaction is still open, and commits after the answer",
        (
            (
                """    claimed_at = clock()
    ticket = claim(con, owner, claimed_at, lease_ms)
    if ticket is None:
        return None
    outcome, delay_ms = _deliver(send, ticket, jitter)""",
                """    claimed_at = clock()
    _now_ms("now_ms", claimed_at)
    with _write_transaction(con):
        _quarantine(con, claimed_at)
        ticket = _lease_next(con, owner, claimed_at, lease_ms)
        if ticket is None:
            return None
        outcome, delay_ms = _deliver(send, ticket, jitter)""",
            ),
        ),
    ),
    Plant(
        "claim-many-lets-go",
        "claim_many commits after each lease and takes the lock again for the next one",
        (
            (
                "        tickets = _lease_all(con, owner, now_ms, lease_ms,"
                " _claimable(con, now_ms, limit))",
                # claim_many as a loop of single leases, each committed (worker.py's
                # _lease_all of one job is its _lease).
                """        tickets = []
        for job in _claimable(con, now_ms, limit):
            tickets += _lease_all(con, owner, now_ms, lease_ms, [job])
            con.execute("COMMIT")
            con.execute("BEGIN IMMEDIATE")""",
            ),
        ),
    ),
    Plant(
        "finish-checks-then-updates",
        "finish checks the ticket with a read of its own, then opens the write"
        " transaction and updates the row it found by seq",
        (
            (
                _FINISH_TXN,
                # worker.py's _settle_all with its read moved out of the transaction.
                """    verdicts = _verdicts(con, [(ticket, outcome, delay_ms)], now_ms)
    with _write_transaction(con, fault) as hooks:
        if not verdicts:
            return False
        _write_verdicts(con, verdicts)
        hooks.reached("after-finish")
    return verdicts[0][1]""",
            ),
        ),
    ),
    Plant(
        "redrive-reads-first",
        "redrive reads the job's status and token before its write transaction",
        (
            (
                """    with _write_transaction(con, fault) as hooks:
        job = _row(con, _SELECT_STATUS_TOKEN, (job_id,))""",
                """    job = _row(con, _SELECT_STATUS_TOKEN, (job_id,))
    with _write_transaction(con, fault) as hooks:""",
            ),
        ),
    ),
    Plant(
        "enqueue-reads-first",
        "enqueue looks the id up with a read of its own, then inserts in a write transaction",
        (
            (
                """    with _write_transaction(con):
        return _intake(con, job_id, qty, now_ms, now_ms + ttl_ms, max_attempts)""",
                """    existing = _row(con, _SELECT_QTY, (job_id,))
    with _write_transaction(con):
        if existing is None:
            con.execute(_INSERT_JOB, (job_id, qty, max_attempts, now_ms, now_ms + ttl_ms))
            return True
        if existing[0] == qty:
            return False
        raise Conflict(f"job {job_id!r} exists with qty {existing[0]}, not {qty}")""",
            ),
        ),
    ),
)

# pgworker.py's own texts, quoted on purpose as above.
_PG_SEARCH_LOCK = 'ORDER BY seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""'
_PG_PICKED = "  FROM picked WHERE jobs.seq = picked.seq\n"
_PG_TICKET_MATCH = """ AND jobs.status = 'leased'
    AND jobs.qty = given.qty AND jobs.owner = given.owner AND jobs.token = given.token
    AND jobs.attempts = given.attempt AND jobs.lease_until = given.lease_until
    AND %(now)s < jobs.lease_until AND %(now)s < jobs.deadline"""
_PG_SETTLE_CALL = """    statuses: list[str | bool] = [False] * len(settlements)
    with _statement_transaction(con, fault) as hooks:
        for n, status in _rows(con, _SETTLE[size], params):"""

PG_PLANTS = (
    Plant(
        "pg-claim-without-skip-locked",
        "claim picks the lowest claimable seq with a plain read and updates that row with"
        " no lock and no re-check: two claimers lease the same job",
        ((_PG_SEARCH_LOCK, 'ORDER BY seq LIMIT %(limit)s"""'),),
        module="pgworker",
    ),
    Plant(
        "pg-claim-recheck-none",
        "claim picks with a plain read, then updates only if the row is still claimable:"
        " after waiting for another claimer's lock, READ COMMITTED's re-check fails and"
        " the claim returns nothing while other jobs are claimable",
        (
            (_PG_SEARCH_LOCK, 'ORDER BY seq LIMIT %(limit)s"""'),
            (
                _PG_PICKED,
                _PG_PICKED.rstrip("\n")
                + " AND jobs.deadline > %(now)s AND jobs.attempts < jobs.max_attempts"
                " AND ((jobs.status = 'pending' AND jobs.available_at <= %(now)s)"
                " OR (jobs.status = 'leased' AND jobs.lease_until <= %(now)s))\n",
            ),
        ),
        module="pgworker",
    ),
    Plant(
        "pg-quarantine-waits",
        "the quarantine sweep locks its rows FOR UPDATE without SKIP LOCKED: every claimer"
        " waits for the rows another claimer or a finish holds",
        (
            (
                "{_QUARANTINABLE} FOR UPDATE SKIP LOCKED))),",
                "{_QUARANTINABLE} FOR UPDATE))),",
            ),
        ),
        module="pgworker",
    ),
    Plant(
        "pg-finish-selects-then-updates",
        "finish checks the ticket with a SELECT, then updates the row by id: a claim"
        " between the two loses its lease to the stale finish",
        (
            (_PG_TICKET_MATCH, ""),
            (
                _PG_SETTLE_CALL,
                """    live = {n for (n,) in _rows(con, _SETTLE_CHECK[size], params)}
    fields = {key: [v for n, v in zip(sent, values) if n in live] for key, values in fields.items()}
    size = "one" if len(fields["n"]) == 1 else "many"
    params = {key: values[0] if size == "one" else values for key, values in fields.items()}
    params["now"] = now_ms
"""
                + _PG_SETTLE_CALL,
            ),
            (
                "# redrive: the job row is locked first",
                '_SETTLE_CHECK = {size: "SELECT given.n FROM jobs, " + given'
                + ' + " AND jobs.id = given.id'
                + _PG_TICKET_MATCH.replace("\n", " ")
                + '" for size, given in _SETTLE_FROM.items()}\n\n'
                "# redrive: the job row is locked first",
            ),
        ),
        module="pgworker",
    ),
    Plant(
        "pg-repeatable-read",
        "the queue runs at REPEATABLE READ and retries nothing: a claim or a finish that"
        " meets a row changed since its snapshot fails with a serialization error",
        (
            (
                "default_transaction_isolation = 'read committed'",
                "default_transaction_isolation = 'repeatable read'",
            ),
        ),
        module="pgworker",
    ),
    Plant(
        "pg-redrive-reads-unlocked",
        "redrive reads the job's status without locking its row: two operators redrive"
        " one dead job and both write an audit row",
        (
            (
                '"SELECT seq, status, token FROM jobs WHERE id = %s FOR UPDATE"',
                '"SELECT seq, status, token FROM jobs WHERE id = %s"',
            ),
        ),
        module="pgworker",
    ),
)

PLANTS = (*SQLITE_PLANTS, *PG_PLANTS)
BY_NAME = {bug.name: bug for bug in PLANTS}


def plant(bug: Plant, folder: Path, conninfo: str | None = None) -> Store:
    """Write the module with ``bug`` planted into ``folder``; the store that runs it
    (a PostgreSQL plant runs on the database of ``conninfo``)."""
    path = folder / f"{bug.module}_{bug.name.replace('-', '_')}.py"
    original = (ROOT / f"{bug.module}.py").read_text(encoding="utf-8")
    path.write_text(bug.source(original), encoding="utf-8")
    if bug.store == "sqlite":
        return SQLiteStore(str(folder), module_path=str(path))
    if conninfo is None:
        raise ValueError(f"plant {bug.name} runs on PostgreSQL: give a conninfo")
    return PostgresStore(conninfo, module_path=str(path))


# --- The measurement: python -m tests.parallel.planted ------------------------------------


class FirstFailure(BaseException):
    """Ends a hunt at its first failure (hypothesis lets a ``BaseException`` through
    without shrinking)."""


def hunt(
    bug: Plant,
    folder: Path,
    conninfo: str | None = None,
    replays: int = 10,
    first_only: bool = False,
) -> dict[str, object]:
    """Run the parallel suite's own scheduled test as CI runs it (the test function of
    ``tests/parallel/test_parallel.py``, so its derandomized sequence of programs and
    schedules, under the active profile) on the plant: the programs and the time to the
    first failure, the time shrinking took, the shrunk program, and how many of
    ``replays`` replays of the saved case fail. ``first_only``: stop at the first
    failure, nothing shrunk or replayed."""
    import contextlib
    import time

    from tests.parallel import test_parallel as ci
    from tests.parallel.case import Case, judged
    from tests.parallel.schedule import Replay
    from tests.parallel.suite import Suite

    store = plant(bug, folder, conninfo)
    started = time.monotonic()
    seen: dict[str, object] = {}

    class Hunted(Suite):
        def check(self, program: Any, schedules: Any) -> Any:
            try:
                return super().check(program, schedules)
            except AssertionError:
                seen.setdefault("first_failure_s", round(time.monotonic() - started, 1))
                seen.setdefault("programs_to_first_failure", self.programs)
                if first_only:
                    raise FirstFailure() from None
                raise

    suite = Hunted(store, bug.name, ci.SIZES.budget)
    with contextlib.suppress(AssertionError, FirstFailure):
        if bug.store == "sqlite":
            ci.test_scheduled_histories_linearize(sqlite_suite=suite)
        else:
            ci.test_scheduled_histories_linearize_on_postgres(postgres_suite=suite)
    result: dict[str, object] = {"plant": bug.name, "caught": bool(seen)}
    result |= seen
    if first_only:
        return result if seen else result | {"programs": suite.programs}
    if suite.last_failure is None:
        return result | {"programs": suite.programs}
    case, judgement, path = suite.last_failure
    total = time.monotonic() - started
    failed = sum(
        judged(case.program, store, Replay.of(Case.load(path).schedule), ci.SIZES.budget).failed
        for _ in range(replays)
    )
    return result | {
        "total_s": round(total, 1),
        "shrink_s": round(total - float(str(seen["first_failure_s"])), 1),
        "shrunk_calls": case.program.size,
        "shrunk_branches": len(case.program.branches),
        "schedule_steps": len(Replay.of(case.schedule).schedule),
        "schedule": case.schedule,
        "replays_failed": f"{failed} of {replays}",
        "caught_by": caught_by(judgement),
    }


def rates(bug: Plant, folder: Path, count: int, conninfo: str | None = None) -> dict[str, object]:
    """On the same ``count`` programs (drawn as the ``ci`` profile draws them), how many
    fail on the plant: each run once under one drawn schedule, and each run once in real
    processes (the operating system interleaving them). The fair comparison of the two
    modes: the same programs, one run each."""
    import random

    from hypothesis import HealthCheck, given, settings

    from tests.parallel.case import judged as judged_scheduled
    from tests.parallel.judge import judge
    from tests.parallel.runner import Pool
    from tests.parallel.schedule import DECISIONS, Switches
    from tests.parallel.strategies import programs

    drawn: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(programs())
    def draw(program: Any) -> None:
        drawn.append(program)

    draw()
    store = plant(bug, folder, conninfo)
    scheduled = 0
    for number, program in enumerate(drawn):
        coins = random.Random(number)
        flags = tuple(coins.random() < 0.5 for _ in range(DECISIONS))
        explicit = bug.store == "postgres" and number % 2 == 1
        scheduled += judged_scheduled(
            program, store, Switches(flags=flags, explicit=explicit)
        ).failed
    pool = Pool()
    try:
        real = sum(judge(pool.run(program, store), store).failed for program in drawn)
    finally:
        pool.close()
    return {"plant": bug.name, "programs": len(drawn), "scheduled": scheduled, "real": real}


def first_failures(
    bug: Plant,
    folder: Path,
    seeds: int,
    mode: str,
    cap: int,
    conninfo: str | None = None,
    schedules: int | None = None,
    first_seed: int = 0,
) -> dict[str, object]:
    """Programs to the first failure under each of ``seeds`` random seeds
    (``first_seed`` .. ``first_seed + seeds - 1``), in one ``mode``: ``scheduled`` (the
    ``ci`` profile's schedules per program, drawn as the suite draws them) or ``real``
    (each program once in real processes). Nothing is shrunk; a seed whose first
    ``cap`` programs all pass counts as ``None``. One derandomized sequence's first
    failure is a single draw (the seed comes from the test function's source); the
    spread over seeds is the measure of how soon a mode bites. ``schedules``: schedules
    per program instead of the profile's, to weigh another setting. ``first_seed``:
    where the seeds start; a variant chosen as the best on some seeds is judged fairly
    only on others (on the seeds it was picked on, it looks better than it is)."""
    import contextlib

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis.errors import Flaky

    from tests.parallel.case import judged as judged_scheduled
    from tests.parallel.judge import judge
    from tests.parallel.runner import Pool
    from tests.parallel.schedule import runs_of
    from tests.parallel.strategies import programs
    from tests.profiles import parallel_settings

    count = "scheduled" if bug.store == "sqlite" else "scheduled_postgres"
    _, sizes = parallel_settings(count)
    per_program = sizes.schedules if schedules is None else schedules
    store = plant(bug, folder, conninfo)
    explicit = bug.store == "postgres"
    quick = settings(
        max_examples=cap,
        derandomize=False,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    pool = Pool() if mode == "real" else None

    def fails(program: Any, drawn: Any) -> bool:
        if pool is not None:
            return judge(pool.run(program, store), store).failed
        policies = [one.policy() for one in drawn]
        return any(judged_scheduled(program, store, p, sizes.budget).failed for p in policies)

    def first_failure(number: int) -> int | None:
        tried: list[bool] = []

        @seed(number)
        @quick
        @given(drawn=runs_of(per_program, explicit), program=programs())
        def scheduled(program: Any, drawn: Any) -> None:
            tried.append(fails(program, drawn))
            assert not tried[-1]

        @seed(number)
        @quick
        @given(program=programs())
        def real(program: Any) -> None:
            tried.append(fails(program, None))
            assert not tried[-1]

        # A real-process failure may not come back when hypothesis runs it again: Flaky.
        with contextlib.suppress(AssertionError, Flaky):
            (real if mode == "real" else scheduled)()
        return len(tried) if tried and tried[-1] else None

    try:
        firsts = [first_failure(number) for number in range(first_seed, first_seed + seeds)]
    finally:
        if pool is not None:
            pool.close()
    caught = sorted(first for first in firsts if first is not None)
    median = caught[(len(firsts) - 1) // 2] if len(caught) > (len(firsts) - 1) // 2 else None
    return {
        "plant": bug.name,
        "mode": mode,
        "schedules": per_program if mode == "scheduled" else None,
        "cap": cap,
        "first_seed": first_seed,
        "first_failures": firsts,
        "median": median,
    }


def lockstep(bug: Plant, folder: Path, timeout_s: int = 900) -> dict[str, object]:
    """Run the sequential lockstep (``tests/stateful``, ci profile) against the plant, in
    a copy of the project whose worker.py is the planted one."""
    import os
    import subprocess
    import sys
    import time

    copy = folder / f"project-{bug.name}"
    copy.mkdir()
    # The committed tests, not the working tree's: a half-made edit must not count as a kill.
    parts = ["model", "courier", "tests", "pyproject.toml", "worker.py", "pgworker.py"]
    archive = subprocess.run(
        ["git", "archive", "HEAD", *parts],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    planted = copy / f"{bug.module}.py"
    planted.write_text(bug.source(planted.read_text(encoding="utf-8")), encoding="utf-8")
    suite = {
        "sqlite": "tests/stateful/test_lockstep.py",
        "postgres": "tests/contract/test_lockstep.py",
    }[bug.store]
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci", "PYTHONPATH": str(copy)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                suite,
            ],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        # A kill is a failed assertion, not an error of the rig (an import, a fixture).
        summary = (done.stdout.strip().splitlines() or [""])[-1]
        caught = done.returncode == 1 and "1 failed" in summary and "error" not in summary
    except subprocess.TimeoutExpired:
        caught = False
    return {"lockstep_catches": caught, "lockstep_s": round(time.monotonic() - started, 1)}


def _cell(result: dict[str, object], key: str, unit: str = "") -> str:
    """A measured figure of ``result``, or "-" where its run did not measure it (``--first``
    shrinks nothing; without ``--lockstep`` the sequential suite is not run; a plant never
    caught has no first failure)."""
    return "-" if result.get(key) is None else f"{result[key]}{unit}"


def table(results: list[dict[str, object]]) -> str:
    """The measured plants as the markdown table of ``docs/testing.md``."""
    lines = [
        "| plant | the mistake | lockstep (ci) | programs to the first failure | first failure"
        " | shrinking | shrunk program | schedule | replays that fail | caught by |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        bug = BY_NAME[str(result["plant"])]
        cell = functools.partial(_cell, result)
        lockstep = result.get("lockstep_catches")
        seq = "-" if lockstep is None else "catches it" if lockstep else "passes"
        shrunk = (
            "-"
            if result.get("shrunk_calls") is None
            else f"{result['shrunk_calls']} calls, {result['shrunk_branches']} branches"
        )
        lines.append(
            f"| `{bug.name}` | {bug.summary} | {seq} | {cell('programs_to_first_failure')}"
            f" | {cell('first_failure_s', ' s')} | {cell('shrink_s', ' s')} | {shrunk}"
            f" | {cell('schedule_steps', ' steps')} | {cell('replays_failed')}"
            f" | {cell('caught_by')} |"
        )
    return "\n".join(lines)


def caught_by(judgement: Any) -> str:
    """What failed the shrunk run: the history (no order explains it) or a promise of
    the judge's."""
    for problem, promise in (
        ("waited for a row lock", "claims never wait"),
        ("the write lock was refused", "locks wait their turn"),
        ("transaction open", "send outside transactions"),
    ):
        if any(problem in found for found in judgement.problems):
            return f"the judge: {promise}"
    return "the model: no order explains it"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import contextlib
    import json
    import os
    import tempfile

    parser = argparse.ArgumentParser(description="Measure the parallel suite on each plant.")
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), help="one plant")
    parser.add_argument(
        "--store", choices=("sqlite", "postgres"), help="only the plants of one kind of store"
    )
    parser.add_argument("--lockstep", action="store_true", help="also run the sequential suite")
    parser.add_argument("--no-hunt", action="store_true", help="only the sequential suite")
    parser.add_argument(
        "--first", action="store_true", help="stop each hunt at its first failure (no shrinking)"
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--table", type=Path, help="print the table of a recorded JSON")
    parser.add_argument(
        "--rates", type=int, metavar="N", help="instead: both modes on the same N programs"
    )
    parser.add_argument(
        "--seeds", type=int, metavar="K", help="instead: programs to the first failure, K seeds"
    )
    parser.add_argument("--mode", choices=("scheduled", "real"), default="scheduled")
    parser.add_argument("--cap", type=int, default=600, help="programs per seed (--seeds)")
    parser.add_argument(
        "--from-seed", type=int, default=0, metavar="N", help="the first seed (--seeds; 0)"
    )
    parser.add_argument(
        "--schedules", type=int, metavar="N", help="schedules per program (--seeds; the profile's)"
    )
    args = parser.parse_args(argv)
    for name in ("rates", "seeds", "cap", "schedules"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.schedules is not None and not (args.seeds and args.mode == "scheduled"):
        parser.error("--schedules weighs the scheduled mode of --seeds only")
    if args.from_seed < 0:
        parser.error("--from-seed must be at least 0")
    if args.from_seed and not args.seeds:
        parser.error("--from-seed says where the seeds of --seeds start")
    if args.table:
        try:
            recorded = json.loads(args.table.read_text(encoding="utf-8"))
            print(table(recorded))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as failed:
            said = f"planted: --table {args.table}: not a recorded --json file ({failed})"
            parser.exit(2, said + "\n")
        return 0
    from tests.postgres import session_server

    chosen = [
        bug
        for bug in PLANTS
        if (not args.only or bug.name in args.only)
        and (args.store is None or bug.store == args.store)
    ]
    results = []
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="planted-"))
        os.environ.setdefault("LEASE_QUEUE_FAILURES", str(Path(scratch) / "failures"))
        conninfo = None
        if any(bug.store == "postgres" for bug in chosen) and not args.no_hunt:
            server = stack.enter_context(session_server())
            conninfo = stack.enter_context(server.database())
        for bug in chosen:
            result: dict[str, object] = {"plant": bug.name}
            if args.seeds:
                result = first_failures(
                    bug,
                    Path(scratch),
                    args.seeds,
                    args.mode,
                    args.cap,
                    conninfo,
                    args.schedules,
                    args.from_seed,
                )
            elif args.rates:
                result = rates(bug, Path(scratch), args.rates, conninfo)
            elif not args.no_hunt:
                result = hunt(bug, Path(scratch), conninfo, first_only=args.first)
            if args.lockstep or args.no_hunt:
                result.update(lockstep(bug, Path(scratch)))
            results.append(result)
            shown = {key: value for key, value in result.items() if key != "example"}
            print(json.dumps(shown), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0 if all(result.get("caught", True) for result in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
