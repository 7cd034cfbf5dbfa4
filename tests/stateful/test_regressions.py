"""Shrunk counterexamples, kept as ordinary tests in the form hypothesis printed them.

Each one was found by the lockstep machine against a (planted or real) bug in
worker.py; replaying it by hand keeps the bug from coming back even if the
fuzzer's random walk stops finding it.
"""

from __future__ import annotations

from tests.stateful.lockstep import QueueLockstep


def test_regression_ticket_with_a_newer_token_is_stale() -> None:
    """Found with the token check removed from finish's compare-and-set."""
    state = QueueLockstep()
    try:
        state.enqueue(job_id="a", max_attempts=1, qty=1, ttl_ms=1)
        tickets_0 = state.claim(lease_ms=1, owner="c1")
        state.finish_forged(field="token", outcome="ok", ticket=tickets_0)
        state.promises_hold()
    finally:
        state.teardown()


def test_regression_a_redrive_keeps_the_token() -> None:
    """Printed by python -m model.explore (4 steps) for a copy of the model whose redrive
    reset the token (tests/model/test_explore_planted.py): worker.py must keep it, so
    tokens_never_decrease holds across the redrive."""
    state = QueueLockstep()
    try:
        state.enqueue(job_id="a", qty=1, ttl_ms=2, max_attempts=1)
        state.promises_hold()
        tickets_0 = state.claim(owner="c1", lease_ms=1, fail_at=None)
        state.promises_hold()
        state.finish(ticket=tickets_0, outcome="retry", delay=0, fail_at=None)
        state.promises_hold()
        state.redrive(job_id="a", ttl_ms=2, note_text="ops", fail_at=None)
        state.promises_hold()
    finally:
        state.teardown()
