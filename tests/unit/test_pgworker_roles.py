"""Least-privileged roles on a PostgreSQL queue: docs/postgres.md's grants, run as written.

The queue's owner runs ``courier init`` (the tables and the attempt log) and the docs'
``GRANT`` block, with the docs' three roles named apart for this test; each call is then
made under each role (``SET ROLE`` through the conninfo's options, so the server's own user
needs no password for them). What a role is granted works, attempt log included; what it
is not is refused with ``InsufficientPrivilege`` and changes nothing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pgworker
from courier import attempts, backend
from courier.cli import EXIT_OK, main

ROLES = ("producer", "courier", "operator")
DOC = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"


def docs_grants() -> str:
    """The one SQL block of docs/postgres.md's "Roles" section."""
    section = DOC.read_text(encoding="utf-8").split("\n## Roles\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sql\n(.*?)```", section, flags=re.S)
    return str(block)


def _as(conninfo: str, role: str) -> str:
    """``conninfo``, its session acting as ``role``."""
    options = conninfo_to_dict(conninfo).get("options") or ""
    return make_conninfo(conninfo, options=f"{options} -c role={role}".strip())


@pytest.fixture
def roles(pg_conninfo: str) -> Iterator[dict[str, str]]:
    """A queue made by its owner, and a conninfo acting as each of the docs' roles."""
    with psycopg.connect(pg_conninfo, autocommit=True) as admin:
        row = admin.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if row is None or not row[0]:
            pytest.skip("the server's user may not create roles")
        names = {role: f"lq_{role}_{uuid.uuid4().hex[:8]}" for role in ROLES}
        for name in names.values():
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
        try:
            assert main(["init", pg_conninfo]) == EXIT_OK  # as the owner: the log too
            grants = docs_grants()
            for role, name in names.items():
                grants = re.sub(rf"\b{role}\b", name, grants)
            admin.execute(grants.encode())
            yield {role: _as(pg_conninfo, name) for role, name in names.items()}
        finally:
            for name in names.values():
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _statuses(conninfo: str) -> dict[str, tuple[str, int]]:
    with psycopg.connect(conninfo, autocommit=True) as con:
        rows = con.execute("SELECT id, status, token FROM jobs ORDER BY id").fetchall()
    return {job_id: (status, token) for job_id, status, token in rows}


def test_each_role_makes_its_own_calls(pg_conninfo: str, roles: dict[str, str]) -> None:
    producer = pgworker.open_queue(roles["producer"])
    courier = pgworker.open_queue(roles["courier"])
    operator = pgworker.open_queue(roles["operator"])
    log = attempts.AttemptLog(roles["courier"])
    try:
        now = backend.server_clock_ms(producer) - 1000
        assert pgworker.enqueue(producer, {"id": "a", "qty": 1}, now, 60_000) is True
        batch = [{"id": "b", "qty": 1}, {"id": "c", "qty": 2}]
        assert pgworker.enqueue_many(producer, batch, now, 60_000) == [True, True]
        ticket = pgworker.claim(courier, "c1", now + 1)
        assert ticket is not None and ticket["id"] == "a"
        tickets = pgworker.claim_many(courier, "c1", now + 1, 2)
        assert [t["id"] for t in tickets] == ["b", "c"]
        log.claimed_many([(t["id"], t["token"]) for t in tickets], "c1", now + 1)
        assert pgworker.finish(courier, ticket, "permanent", now + 2) == "dead"
        items = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
        assert pgworker.finish_many(courier, items, now + 2) == ["done", "done"]
        assert pgworker.redrive(operator, "a", now + 3, 60_000, "ops") is True
        read = attempts.attempts_of(roles["operator"], "b")
    finally:
        log.close()
        for con in (producer, courier, operator):
            con.close()
    assert [(row["outcome"], row["token"]) for row in read] == [(attempts.CLAIMED, 1)]
    assert _statuses(pg_conninfo) == {"a": ("pending", 1), "b": ("done", 1), "c": ("done", 1)}


def test_a_call_outside_a_roles_grants_is_refused_and_changes_nothing(
    pg_conninfo: str, roles: dict[str, str]
) -> None:
    owner = pgworker.open_queue(pg_conninfo)
    now = backend.server_clock_ms(owner) - 1000
    pgworker.enqueue(owner, {"id": "a", "qty": 1}, now, 60_000)
    dead = pgworker.claim(owner, "c1", now + 1)
    assert dead is not None and pgworker.finish(owner, dead, "permanent", now + 2) == "dead"
    owner.close()
    before = _statuses(pg_conninfo)
    refused: dict[str, Callable[[psycopg.Connection[Any]], object]] = {
        "producer": lambda con: pgworker.claim(con, "c1", now + 3),
        "courier": lambda con: pgworker.enqueue(con, {"id": "x", "qty": 1}, now, 60_000),
        "operator": lambda con: pgworker.enqueue_many(con, [{"id": "y", "qty": 1}], now, 60_000),
    }
    for role, call in refused.items():
        con = pgworker.open_queue(roles[role])
        try:
            with pytest.raises(errors.InsufficientPrivilege):
                call(con)
            assert con.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            con.close()
    courier = pgworker.open_queue(roles["courier"])
    try:
        with pytest.raises(errors.InsufficientPrivilege):
            pgworker.redrive(courier, "a", now + 3, 60_000, "ops")
    finally:
        courier.close()
    assert _statuses(pg_conninfo) == before


def test_the_roles_calls_are_recorded_by_the_change_feed(
    pg_conninfo: str, roles: dict[str, str]
) -> None:
    """With ``courier conform --install`` run by the owner, the roles make the same calls
    unchanged (the feed's triggers write its events with the owner's rights, not the
    caller's), and the check explains every one of them."""
    assert main(["conform", pg_conninfo, "--install"]) == EXIT_OK
    test_each_role_makes_its_own_calls(pg_conninfo, roles)
    assert main(["conform", pg_conninfo, "--json"]) == EXIT_OK
