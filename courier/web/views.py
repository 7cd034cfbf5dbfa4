"""The web page's HTML: one function per view, every value escaped.

Each view is the page's frame (``frame``: the queue, the time it was read, the mode)
around a ``<main id="live">``, the part the page's script refreshes in place. Times
are ``<time>`` elements carrying their milliseconds: the script shows them in the
browser's local time (ISO 8601 with its offset); without the script they read as
UTC. Durations are in words (``in 3.2 s``, ``4 min 5 s ago``). Every value from the
queue, the log or a request is escaped for HTML and, before that, its control and
bidirectional characters are shown as escapes (``courier.printable``).
"""

from __future__ import annotations

import datetime
import html
import re
from collections.abc import Iterable
from typing import Any

from courier import backend, queueview
from courier.attempts import NO_ATTEMPT, NO_OUTCOME, cause_text
from courier.commands.output import distance
from courier.printable import printable
from courier.web.data import MAX_BULK, PAGE_SIZE, PREVIEW_SHOWN, Filters, WebPage
from model.explain import Explanation, headline, lines

__all__ = ["e", "frame", "home", "job_page", "preview", "problem"]

STYLE = """:root{color-scheme:light}
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:baseline;padding:.7em 1.2em;
background:#1d2430;color:#e8ecf2}header a{color:#fff;text-decoration:none}
header h1{font-size:1.2em;margin:0}main{padding:.6em 1.2em 2em}
h2{font-size:1.1em;margin:1.2em 0 .4em}
a{color:#0b5cad}table{border-collapse:collapse;background:#fff;margin:.3em 0 .8em}
td,th{border:1px solid #d5dae1;padding:3px 8px;vertical-align:top;text-align:left}
th{background:#eef1f5;font-weight:600}.n{text-align:right;font-variant-numeric:tabular-nums}
.tiles{display:flex;flex-wrap:wrap;gap:.6em}.tile{background:#fff;border:1px solid #d5dae1;
border-radius:6px;padding:.4em .9em;min-width:6.5em;color:inherit;text-decoration:none}
.tile b{display:block;font-size:1.5em}.tile.dead b{color:#b3261e}.msg{padding:.5em .8em;
background:#e3f4e6;border:1px solid #9fd3a8}.err{padding:.5em .8em;background:#fdecea;
border:1px solid #f3aaa4}small,.quiet{color:#5d6673}code{font-size:.95em}
form.filters{display:flex;flex-wrap:wrap;gap:.5em;align-items:end;margin:.3em 0}
form.filters label{display:flex;flex-direction:column;font-size:.9em}
.status-dead{color:#b3261e}.status-done{color:#1e7b34}.status-leased{color:#8a5a00}
ul.transitions{margin:.3em 0;padding-left:1.2em}ul.transitions li{margin:.15em 0}
time{white-space:nowrap}
.fires{color:#1e7b34}.paging a,.paging span{margin-right:1em}"""

SCRIPT_PATH = "/page.js"


def e(value: object) -> str:
    """``value`` as HTML text: control and bidi characters shown escaped, then quoted."""
    text = "-" if value is None else str(value)
    return html.escape(printable(text, newlines=False), quote=True)


def utc_iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def at(ms: int | None, now: int | None = None) -> str:
    """A time: a ``<time>`` the script shows in local time, and its distance in words."""
    if ms is None:
        return "-"
    try:
        iso = utc_iso(ms)
    except (OverflowError, OSError, ValueError):
        return e(ms)
    shown = f"<time datetime='{iso}' data-ms='{int(ms)}' title='{ms} ms, {iso}'>{iso}</time>"
    if now is None:
        return shown
    return f"{shown} <small>({e(distance(ms, now))})</small>"


# The model's sentences name times through a ``When``: on the page each is a marker
# (no identifier or number holds one) that becomes a <time> once the text is escaped.
_MARKED = re.compile("\u27e6t:(\\d+)\u27e7")
_CODE = re.compile("`([^`<>]+)`")


def _model_when(ms: int, now: int) -> str:
    return f"\u27e6t:{int(ms)}\u27e7"


def _said(text: str, now: int) -> str:
    """A sentence of ``model.explain`` as HTML: escaped, its times as ``at``, its
    `names` as code."""
    html_text = _MARKED.sub(lambda match: at(int(match.group(1)), now), e(text))
    return _CODE.sub(r"<code>\1</code>", html_text)


def frame(page: WebPage, now: int | None, body: str, title: str = "", refresh: bool = True) -> str:
    """The whole page around ``body`` (a ``<main id="live">``): the queue, when it was
    read, the mode, and the script that keeps it fresh."""
    queue = e(backend.describe(page.queue))
    mode = "redrive allowed (with a note)" if page.allow_redrive else "read-only"
    every = page.refresh_s if refresh else 0
    read = "" if now is None else f"read at {at(now)}"
    return "".join(
        [
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{e(title) + ' · ' if title else ''}lease-queue: {queue}</title>",
            f"<style>{STYLE}</style><script src='{SCRIPT_PATH}' defer></script></head>",
            f"<body data-refresh-s='{every:g}'><header><h1><a href='/'>lease-queue</a></h1>",
            f"<span>queue <code>{queue}</code></span><span id='read-at'>{read}</span>",
            f"<span id='mode'>{mode}</span><span id='refresh-state' class='quiet'></span>",
            f"</header>{body}</body></html>",
        ]
    )


def _options(name: str, values: Iterable[str], chosen: str | None, label: str) -> str:
    items = [f"<option value=''>any {label}</option>"]
    for value in values:
        selected = " selected" if value == chosen else ""
        items.append(f"<option value='{e(value)}'{selected}>{e(value)}</option>")
    return f"<select name='{name}'>{''.join(items)}</select>"


def _message(banner: str | None, error: str | None) -> str:
    parts = []
    if banner:
        parts.append(f"<p class='msg' id='message'>{e(banner)}</p>")
    if error:
        parts.append(f"<p class='err' id='error'>{e(error)}</p>")
    return "".join(parts)


def _cause_cell(attempt: dict[str, Any] | None) -> str:
    if attempt is None:
        return f"<small>{NO_ATTEMPT}</small>"
    if attempt["outcome"] == "claimed":
        return f"claimed by {e(attempt['owner'])}, {NO_OUTCOME.split(', ', 1)[1]}"
    return f"{e(cause_text(attempt))} <small>(by {e(attempt['owner'])})</small>"


def home(
    page: WebPage,
    data: dict[str, Any],
    filters: Filters,
    banner: str | None = None,
    error: str | None = None,
) -> str:
    """The front page: counts, the oldest due job, dead jobs by cause, the job list."""
    now = data["now_ms"]
    parts = ["<main id='live'>", _message(banner, error), "<h2>Jobs by status</h2>"]
    tiles = []
    for status, count in data["counts"].items():
        tiles.append(
            f"<a class='tile {status}' href='/?status={status}'><b id='count-{status}'>"
            f"{count:,}</b>{status}</a>"
        )
    tiles.append(
        f"<a class='tile' href='/?status=pending'><b id='count-due'>{data['due']:,}</b>due now</a>"
    )
    tiles.append(
        f"<span class='tile'><b id='count-redrives'>{data['redrives']:,}</b>audit rows</span>"
    )
    parts.append(f"<div class='tiles'>{''.join(tiles)}</div>")
    oldest = data["oldest_due"]
    parts.append("<h2>Oldest due job</h2>")
    if oldest is None:
        parts.append("<p id='oldest'>none: nothing is waiting for a courier</p>")
    else:
        parts.append(
            f"<p id='oldest'><a href='/job?id={e(oldest['id'])}'><b>{e(oldest['id'])}</b></a> "
            f"({e(oldest['status'])}, qty {e(oldest['qty'])}, token {e(oldest['token'])}, "
            f"{e(oldest['attempts'])} of {e(oldest['max_attempts'])} attempts made), due since "
            f"{at(oldest['due_since'], now)}: no courier has taken it for "
            f"{e(distance(oldest['due_since'], now).removesuffix(' ago'))}</p>"
        )
    parts.append(_causes(page, data["dead_causes"], data["counts"]["dead"]))
    parts.append(_job_list(page, data, filters))
    parts.append("</main>")
    return frame(page, now, "".join(parts), "jobs")


def _causes(page: WebPage, causes: list[dict[str, Any]], dead: int) -> str:
    parts = [f"<h2>Dead jobs by cause ({dead:,})</h2>"]
    if not causes:
        return parts[0] + "<p id='no-dead'>no dead jobs</p>"
    parts.append(
        "<table id='causes'><tr><th>reason</th><th>last cause</th><th class='n'>jobs</th>"
        "<th></th></tr>"
    )
    for number, group in enumerate(causes, start=1):
        chosen = Filters(status="dead", reason=group["reason"], cause=group["cause"])
        actions = f"<a href='/?{e(chosen.query())}'>list</a>"
        if page.allow_redrive:
            actions += f" · <a href='/redrive-all?{e(chosen.query())}'>redrive all…</a>"
        parts.append(
            f"<tr id='cause-{number}'><td>{e(group['reason'])}</td><td>{e(group['cause'])}</td>"
            f"<td class='n'>{group['jobs']:,}</td><td>{actions}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def _job_list(page: WebPage, data: dict[str, Any], filters: Filters) -> str:
    now, jobs, total = data["now_ms"], data["jobs"], data["total"]
    parts = [
        "<h2>Jobs</h2><form class='filters' id='filters' method='get' action='/'>",
        f"<label>status {_options('status', queueview.STATUSES, filters.status, 'status')}</label>",
        f"<label>reason {_options('reason', queueview.REASONS, filters.reason, 'reason')}</label>",
        f"<label>owner <input name='owner' value='{e(filters.owner or '')}' size='10'></label>",
        f"<label>id prefix <input name='prefix' value='{e(filters.prefix or '')}' size='12'>"
        "</label>",
    ]
    if filters.cause:
        parts.append(f"<input type='hidden' name='cause' value='{e(filters.cause)}'>")
    parts.append("<button type='submit'>filter</button> <a href='/'>clear</a></form>")
    if filters.cause:
        parts.append(f"<p>dead jobs whose last cause is <b>{e(filters.cause)}</b></p>")
    if not jobs:
        parts.append(f"<p id='no-jobs'>no job matches ({total:,} in all)</p>")
    else:
        first, last = jobs[0]["seq"], jobs[-1]["seq"]
        parts.append(
            f"<p id='shown'>{len(jobs)} of {total:,} matching jobs, seq {first} to {last}</p>"
        )
        parts.append(
            "<table id='jobs'><tr><th class='n'>seq</th><th>id</th><th class='n'>qty</th>"
            "<th>status</th><th>reason</th><th class='n'>attempts</th><th class='n'>token</th>"
            "<th>owner</th><th>due / lease until</th><th>deadline</th><th>last cause</th></tr>"
        )
        for job in jobs:
            parts.append(_job_row(job, now))
        parts.append("</table>")
        parts.append(_paging(filters, jobs))
    can_bulk = page.allow_redrive and filters.status in (None, "dead") and filters.owner is None
    if can_bulk and data["counts"]["dead"]:
        chosen = filters.dead()
        parts.append(
            f"<p><a id='bulk' href='/redrive-all?{e(chosen.query())}'>redrive every dead job "
            "of this filter…</a> <small>(shows how many first, and asks)</small></p>"
        )
    return "".join(parts)


def _job_row(job: dict[str, Any], now: int) -> str:
    status = job["status"]
    due = job["lease_until"] if status == "leased" else job["available_at"]
    due_cell = at(due, now) if status in ("pending", "leased") else "-"
    deadline = at(job["deadline"], now) if status in ("pending", "leased") else "-"
    cause = _cause_cell(job.get("last_attempt")) if status == "dead" else ""
    return (
        f"<tr id='job-{e(job['id'])}'><td class='n'>{job['seq']}</td>"
        f"<td><a href='/job?id={e(job['id'])}'>{e(job['id'])}</a></td>"
        f"<td class='n'>{e(job['qty'])}</td><td class='status-{e(status)}'>{e(status)}</td>"
        f"<td>{e(job['reason'] or '')}</td>"
        f"<td class='n'>{e(job['attempts'])}/{e(job['max_attempts'])}</td>"
        f"<td class='n'>{e(job['token'])}</td><td>{e(job['owner'] or '')}</td>"
        f"<td>{due_cell}</td><td>{deadline}</td><td>{cause}</td></tr>"
    )


def _paging(filters: Filters, jobs: list[dict[str, Any]]) -> str:
    links = [f"<a id='first' href='/?{e(filters.first_page().query())}'>first page</a>"]
    if filters.after is not None or filters.before is not None:
        back = filters.query(after=None, before=jobs[0]["seq"])
        links.append(f"<a id='prev' href='/?{e(back)}'>&larr; previous {PAGE_SIZE}</a>")
    if len(jobs) == PAGE_SIZE:
        on = filters.query(before=None, after=jobs[-1]["seq"])
        links.append(f"<a id='next' href='/?{e(on)}'>next {PAGE_SIZE} &rarr;</a>")
    return f"<p class='paging'>{''.join(links)}</p>"


def job_page(page: WebPage, data: dict[str, Any], banner: str | None = None) -> str:
    """One job: its row, the model's explanation, every attempt, its audit rows."""
    now, job = data["now_ms"], data["job"]
    explanation: Explanation = data["explanation"]
    parts = [
        "<main id='live'>",
        _message(banner, None),
        f"<h2>Job <code>{e(job['id'])}</code></h2>",
    ]
    parts.append("<table id='row'>")
    for column in queueview.JOB_COLUMNS:
        value = job[column]
        shown = (
            at(value, now) if column in ("available_at", "deadline", "lease_until") else e(value)
        )
        parts.append(f"<tr><th>{column}</th><td id='field-{column}'>{shown}</td></tr>")
    parts.append("</table><h2>Why it is here, and what happens next</h2>")
    parts.append(f"<p id='headline'><b>{_said(headline(explanation, _model_when), now)}</b></p>")
    described = lines(explanation, _model_when)
    if described:
        parts.append(
            "<p class='quiet'>Every transition from this state (rows of "
            "<code>docs/state-machine.md</code>), who fires it, and what stands in its way:</p>"
            "<ul class='transitions' id='transitions'>"
        )
        for row, line in zip(explanation.rows, described, strict=True):
            mark = " class='fires'" if row.enabled else ""
            parts.append(f"<li{mark}>{_said(line, now)}</li>")
        parts.append("</ul>")
    parts.append(_attempts(data["attempts"]))
    parts.append(_audit(data["redrives"]))
    if job["status"] == "dead" and page.allow_redrive:
        parts.append(
            "<h2>Redrive</h2><form method='post' action='/redrive' id='redrive'>"
            f"<input type='hidden' name='token' value='{e(page.token)}'>"
            f"<input type='hidden' name='id' value='{e(job['id'])}'>"
            "<input name='note' required pattern='[A-Za-z0-9_-]{1,64}' "
            "placeholder='note, e.g. ticket-4711' size='20'> "
            "<button type='submit'>redrive</button> <small>one audit row, pending again with a "
            "fresh budget and deadline, the token kept</small></form>"
        )
    parts.append("</main>")
    return frame(page, now, "".join(parts), str(job["id"]))


def _attempts(attempts: list[dict[str, Any]]) -> str:
    if not attempts:
        return "<h2>Attempts</h2><p id='no-attempts'>no attempt recorded</p>"
    parts = [
        f"<h2>Attempts ({len(attempts)})</h2><table id='attempts'><tr><th class='n'>token</th>"
        "<th>courier</th><th>claimed at</th><th>outcome at</th><th>outcome</th><th>status</th>"
        "<th>cause</th></tr>"
    ]
    for attempt in attempts:
        if attempt["outcome"] is None:
            tail = "<td colspan='4'>no outcome recorded (the courier stopped or was killed)</td>"
        else:
            tail = (
                f"<td>{at(attempt['at_ms'])}</td><td>{e(attempt['outcome'])}</td>"
                f"<td>{e(attempt['status'])}</td><td>{e(cause_text(attempt))}</td>"
            )
        claimed = at(attempt["claimed_at_ms"]) if attempt["claimed_at_ms"] is not None else "-"
        parts.append(
            f"<tr><td class='n'>{e(attempt['token'] if attempt['token'] is not None else '?')}"
            f"</td><td>{e(attempt['owner'])}</td><td>{claimed}</td>{tail}</tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def _audit(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<h2>Redrive audit rows</h2><p id='no-audit'>none</p>"
    parts = [
        f"<h2>Redrive audit rows ({len(rows)})</h2><table id='audit'><tr><th class='n'>seq</th>"
        "<th>at</th><th class='n'>token</th><th>note</th></tr>"
    ]
    for row in rows:
        parts.append(
            f"<tr><td class='n'>{row['seq']}</td><td>{at(row['at_ms'])}</td>"
            f"<td class='n'>{e(row['token'])}</td><td>{e(row['note'])}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def preview(page: WebPage, filters: Filters, ids: list[str], total: int, now: int) -> str:
    """What a bulk redrive of ``filters`` would touch, and the form that confirms it."""
    chosen = filters.dead()
    said = [f"reason <b>{e(chosen.reason)}</b>"] if chosen.reason else []
    said += [f"last cause <b>{e(chosen.cause)}</b>"] if chosen.cause else []
    said += [f"id prefix <b>{e(chosen.prefix)}</b>"] if chosen.prefix else []
    which = ", ".join(said) or "any reason"
    taken = min(total, MAX_BULK)
    parts = [
        "<main id='live'><h2>Redrive dead jobs</h2>",
        f"<p id='preview-count'>This redrives <b>{taken:,}</b> dead jobs ({which}): each back to "
        "pending with a fresh budget and deadline, in its own transaction with its own audit "
        "row.</p>",
    ]
    if total > MAX_BULK:
        parts.append(
            f"<p class='err' id='capped'>{total:,} dead jobs match: one redrive from the page "
            f"takes the first {MAX_BULK:,}; confirm again for the next ones, or use "
            "<code>courier redrive --all</code>.</p>"
        )
    if not ids:
        parts.append("<p id='nothing'>No dead job matches: nothing to redrive.</p>")
        return frame(page, now, "".join([*parts, "</main>"]), "redrive", refresh=False)
    shown = ", ".join(f"<a href='/job?id={e(i)}'>{e(i)}</a>" for i in ids[:PREVIEW_SHOWN])
    more = f" and {taken - PREVIEW_SHOWN:,} more" if taken > PREVIEW_SHOWN else ""
    parts.append(f"<p id='preview-ids'>{shown}{more}</p>")
    hidden = "".join(
        f"<input type='hidden' name='{name}' value='{e(value)}'>"
        for name, value in (
            ("token", page.token),
            ("reason", chosen.reason),
            ("cause", chosen.cause),
            ("prefix", chosen.prefix),
            ("expect", taken),
        )
        if value is not None
    )
    parts.append(
        f"<form method='post' action='/redrive-all' id='confirm'>{hidden}"
        "<input name='note' required pattern='[A-Za-z0-9_-]{1,64}' "
        "placeholder='note, e.g. ticket-4711' size='20'> "
        f"<button type='submit'>redrive {taken:,} jobs</button> "
        f"<a href='/?{e(chosen.query())}'>cancel</a></form></main>"
    )
    return frame(page, now, "".join(parts), "redrive", refresh=False)


def problem(page: WebPage, title: str, reason: str, refresh: bool = True) -> str:
    """A page that says what went wrong (the queue did not answer, a bad request); it
    keeps trying every few seconds when ``refresh``."""
    again = (
        f" This page tries again every {page.refresh_s:g} s." if refresh and page.refresh_s else ""
    )
    body = (
        f"<main id='live'><h2>{e(title)}</h2><p class='err' id='unavailable'>{e(reason)}</p>"
        f"<p class='quiet'>{again}</p></main>"
    )
    return frame(page, None, body, title, refresh=refresh)
