"""Each bench that renders into a page replaces only what stands between its markers.

Rendered from the committed records (no run needed): ``render_into`` writes exactly
``render(record)`` between the bench's own marker lines and keeps the rest of the
page; a page without the markers is refused with ``ValueError``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from bench import postgres, postgres_peers
from courier.procs import project_root

DOCS = project_root() / "docs"


@pytest.mark.parametrize(
    ("bench", "record_name"),
    [(postgres, "postgres.json"), (postgres_peers, "postgres-peers.json")],
    ids=["postgres", "postgres_peers"],
)
def test_render_into_replaces_only_what_stands_between_the_markers(
    bench: ModuleType, record_name: str, tmp_path: Path
) -> None:
    record = json.loads((DOCS / record_name).read_text(encoding="utf-8"))
    begin, end = bench.BEGIN_MARK, bench.END_MARK
    page = tmp_path / "page.md"
    page.write_text(f"before\n{begin}\nold\n{end}\nafter\n")
    bench.render_into(page, record)
    assert page.read_text() == f"before\n{begin}\n{bench.render(record)}{end}\nafter\n"
    plain = tmp_path / "plain.md"
    plain.write_text("no markers here\n")
    with pytest.raises(ValueError, match="section"):
        bench.render_into(plain, record)
