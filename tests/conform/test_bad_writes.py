"""Writes no model step explains are flagged, whoever made them: an operator's hand-made
SQL, and a writer whose ``now`` lies after the queue's clock."""

from __future__ import annotations

from courier.conform.report import finding_dict, finding_lines
from tests.conform.fed import Fed


def _done_job(fed: Fed) -> int:
    q, con = fed.module, fed.con
    now = fed.now() - 1000
    q.enqueue(con, {"id": "a", "qty": 3}, now, 60_000)
    ticket = q.claim(con, "c1", now)
    assert q.finish(con, ticket, "ok", now + 1) == "done"
    return now


def test_an_operators_update_of_a_done_job_is_flagged(fed: Fed) -> None:
    _done_job(fed)
    fed.sql("UPDATE jobs SET status = 'pending' WHERE id = ?", "a")
    checker = fed.check()
    assert checker.transactions == 4
    (finding,) = checker.unexplained
    shown = finding_dict(finding)
    (change,) = shown["changes"]
    assert (change["before"]["status"], change["after"]["status"]) == ("done", "pending")
    assert shown["nearest"] is not None
    text = "\n".join(finding_lines(finding))
    assert "UNEXPLAINED" in text and "nearest model step" in text, text


def test_an_operators_insert_of_an_audit_row_alone_is_flagged(fed: Fed) -> None:
    now = _done_job(fed)
    fed.sql("INSERT INTO redrives (id, token, at_ms, note) VALUES ('a', 1, ?, 'x')", now + 2)
    checker = fed.check()
    assert len(checker.unexplained) == 1
    assert any("redrive" in problem for problem in checker.unexplained[0].problems)


def test_a_now_after_the_clock_is_flagged_unless_the_writers_keep_their_own(fed: Fed) -> None:
    q, con = fed.module, fed.con
    q.enqueue(con, {"id": "a", "qty": 1}, fed.now() + 600_000, 60_000)  # ten minutes ahead
    checker = fed.check()
    (finding,) = checker.unexplained
    assert any("after the clock read at the write" in p for p in finding.problems), finding
    assert not fed.check(simulated=True).unexplained
