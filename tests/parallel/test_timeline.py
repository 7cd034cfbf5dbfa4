"""The timeline of a failing run: one lane per branch, the unexplained call marked."""

from __future__ import annotations

import model
from tests.parallel.history import Record, Run
from tests.parallel.judge import judge
from tests.parallel.program import Program
from tests.parallel.timeline import render
from tests.stores.sqlite import SQLiteStore

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 1010}
CLAIM = {"owner": "c1", "now_ms": 1000, "lease_ms": 10, "fault": None}


def two_tickets_for_one_job() -> Run:
    queue = model.QueueModel()
    queue.enqueue({"id": "a", "qty": 1}, 1000, 100)
    queue.claim("c1", 1000, 10)
    records = [
        Record(
            "p",
            0,
            "enqueue",
            {"event": {"id": "a", "qty": 1}, "now_ms": 1000, "ttl_ms": 100, "max_attempts": None},
            0,
            10,
            ("returned", True),
        ),
        Record("b1", 0, "claim", CLAIM, 1_000_000, 3_000_000, ("returned", dict(TICKET))),
        Record("b2", 0, "claim", CLAIM, 1_500_000, 2_500_000, ("returned", dict(TICKET))),
        Record("b2", 1, "claim", CLAIM, 2_600_000, None),
    ]
    return Run(Program((), ()), records, queue.rows())


def test_a_failing_run_is_drawn_lane_by_lane_with_the_unexplained_call_marked(tmp_path):
    judgement = judge(two_tickets_for_one_job(), SQLiteStore(str(tmp_path)))
    assert judgement.failed
    text = render(judgement)
    lines = text.splitlines()
    header = next(line for line in lines if "b1" in line and "b2" in line and "┌" not in line)
    assert header.index("b1") < header.index("b2")
    rows = [line for line in lines if line.strip()[:5].replace(".", "").isdigit()]
    assert [row.split()[0] for row in rows] == ["0.000", "0.500", "1.500", "1.600", "2.000"]
    b2 = header.index("b2")
    assert [row[b2 : b2 + 1] for row in rows] == ["", "┌", "└", "┌", "│"], text
    assert rows[-1].split()[1:] == ["└", "a#1", "✗", "│"], text
    assert "✗ no order explains this" in text
    assert "b2: ✝ killed during its last call" in text
    assert "verdict: illegal" in text
