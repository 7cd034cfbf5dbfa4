"""Private stays private: no ``_name`` of worker.py is used outside worker.py, its sibling
pgworker.py and tests/unit.

pgworker.py is the other half of the same distribution, not a user of it: it shares
worker.py's front end (the argument checks, the hooks, run_once's round) by importing
it. The benchmark, the soak, the courier and the other suites reach ``worker.py`` through
its public calls (or the contract's schema, with SQL of their own), so that renaming a
private constant touches worker.py and its own unit tests only. The check reads every
``.py`` file of the project (the virtualenv and mutation copies left out) and finds,
by its syntax tree, ``worker._name`` on any name the module is imported as, ``from
worker import _name``, ``getattr(worker, "_name")``, and, in the text, ``worker._name``
in a comment or docstring. The public names that took the place of private ones
(``is_identifier``, ``classify_send``) are checked against the rules they stand for.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

import worker
from courier.procs import project_root
from tests.support import BAD_IDENTIFIERS, GOOD_IDENTIFIERS, RecordingSend

ROOT = project_root()
ALLOWED = (ROOT / "worker.py", ROOT / "pgworker.py", ROOT / "tests" / "unit")
LEFT_OUT = {"mutants", "build", "dist", "node_modules"}  # and every folder starting with "."
IN_TEXT = re.compile(r"\bworker\._[A-Za-z]\w*")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _use(node: ast.AST, names: set[str]) -> str | None:
    """The private name of ``worker`` that ``node`` uses, as written, or ``None``."""
    if isinstance(node, ast.ImportFrom) and node.module == "worker":
        imported = [alias.name for alias in node.names if is_private(alias.name)]
        return f"from worker import {', '.join(imported)}" if imported else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        used = node.value.id in names and is_private(node.attr)
        return f"{node.value.id}.{node.attr}" if used else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
        target, attribute = node.args[0], node.args[1]
        if (
            node.func.id in ("getattr", "hasattr")
            and isinstance(target, ast.Name)
            and target.id in names
            and isinstance(attribute, ast.Constant)
            and isinstance(attribute.value, str)
            and is_private(attribute.value)
        ):
            return f"{node.func.id}({target.id}, {attribute.value!r})"
    return None


def private_uses(source: str) -> list[tuple[int, str]]:
    """Each use of a private name of ``worker`` in ``source``: ``(line, what)``, sorted."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "worker"
    }
    uses = {
        (getattr(node, "lineno", 0), use)
        for node in ast.walk(tree)
        if (use := _use(node, names)) is not None
    }
    for number, line in enumerate(source.splitlines(), start=1):
        uses |= {(number, f"{match} (in the text)") for match in IN_TEXT.findall(line)}
    return sorted(uses)


def project_files() -> list[Path]:
    """Every ``.py`` file of the project outside worker.py and tests/unit."""
    files = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if any(part.startswith(".") or part in LEFT_OUT for part in parts[:-1]):
            continue
        if any(path == allowed or allowed in path.parents for allowed in ALLOWED):
            continue
        files.append(path)
    return files


def test_no_private_name_of_worker_is_used_outside_worker_pgworker_and_unit_tests() -> None:
    files = project_files()
    assert ROOT / "bench" / "perf.py" in files and ROOT / "courier" / "cli.py" in files
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in private_uses(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "private names of worker.py used outside it:\n" + "\n".join(found)


def test_the_check_finds_every_form_of_use() -> None:
    source = """
import worker
import worker as w
from worker import _LEASE, claim
# a comment naming worker._SETTLE
print(worker._CLAIM_HEAD_WINDOW, w._lowest_due, worker.claim, worker.__doc__)
getattr(worker, "_nothing_known")
hasattr(w, "MAX_NOW_MS")
"""
    assert private_uses(source) == [
        (4, "from worker import _LEASE"),
        (5, "worker._SETTLE (in the text)"),
        (6, "w._lowest_due"),
        (6, "worker._CLAIM_HEAD_WINDOW"),
        (6, "worker._CLAIM_HEAD_WINDOW (in the text)"),
        (7, "getattr(worker, '_nothing_known')"),
    ]


# --- The public names that took the place of private ones --------------------------------


@pytest.mark.parametrize("value", GOOD_IDENTIFIERS)
def test_is_identifier_accepts_what_the_contract_calls_an_identifier(value: str) -> None:
    assert worker.is_identifier(value) is True


@pytest.mark.parametrize("value", BAD_IDENTIFIERS)
def test_is_identifier_refuses_what_the_calls_refuse(value: object, tmp_path: Path) -> None:
    assert worker.is_identifier(value) is False
    con = worker.open_queue(tmp_path / "q.sqlite")
    try:
        with pytest.raises(ValueError, match="'owner' must be a str of 1-64 ASCII"):
            worker.claim(con, value, 0)  # type: ignore[arg-type]
    finally:
        con.close()


TICKET: dict[str, Any] = {
    "id": "a",
    "qty": 3,
    "owner": "c1",
    "token": 1,
    "attempt": 2,
    "lease_until": 10,
}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, ("ok", 0)),
        (worker.Retryable("busy"), ("retry", worker.retry_delay(2, 100, 1000, 0.5))),
        (worker.Permanent("refused"), ("permanent", 0)),
    ],
)
def test_classify_send_classifies_as_run_once_does(answer: object, expected: object) -> None:
    send = RecordingSend(answer)
    assert worker.classify_send(send, dict(TICKET), 0.5) == expected
    assert send.deliveries == [{"id": "a", "qty": 3}]


@pytest.mark.parametrize("answer", [1, None, "True", False])
def test_classify_send_refuses_anything_but_true(answer: object) -> None:
    with pytest.raises(worker.BadAck, match="exactly True"):
        worker.classify_send(RecordingSend(answer), dict(TICKET), 0.5)


def test_classify_send_refuses_a_send_that_is_not_callable() -> None:
    with pytest.raises(ValueError, match="'send' must be a callable"):
        worker.classify_send("send", dict(TICKET), 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ticket", "jitter", "named"),
    [({**TICKET, "qty": 0}, 0.5, "'ticket['qty']'"), ({**TICKET}, 1.5, "'jitter'")],
)
def test_classify_send_refuses_malformed_arguments_before_sending(
    ticket: dict[str, Any], jitter: float, named: str
) -> None:
    send = RecordingSend(True)
    with pytest.raises(ValueError, match=re.escape(named)):
        worker.classify_send(send, ticket, jitter)
    assert send.deliveries == []
