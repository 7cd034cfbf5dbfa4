"""The operator's web page: ``courier web QUEUE``.

One page, for the questions an operator asks first: how many jobs are in each
status, which due job has waited longest, and which jobs are dead, why, and what
each of their attempts got back. With ``--allow-redrive`` each dead job has a form
that redrives it with a required note (one audit row, as ``courier redrive``).
The rules it keeps:

1. **Loopback unless asked.** It binds ``127.0.0.1`` on an OS-assigned port by
   default; any address that is not loopback is refused unless ``--allow-remote``
   is given, since whoever reaches the page sees the queue. Without
   ``--allow-remote`` a request whose ``Host`` is not the loopback address it was
   sent to is refused too (a DNS-rebinding page cannot reach it under its name).
2. **Read-only unless asked.** Without ``--allow-redrive`` the page has no form
   and ``POST /redrive`` answers 403, changing nothing.
3. **No cross-site writes.** Every state-changing request must carry the token
   the page issued (a random value per server, in the form's hidden field,
   compared in constant time); a page on another site cannot read it. A request
   without it, or with an ``Origin`` that is not the page's, is 403 and changes
   nothing. The page also forbids framing and loads nothing from elsewhere
   (``Content-Security-Policy``).
4. Every value shown is escaped; every read is one snapshot of the queue
   (``courier.queueview``), every redrive one transaction of the queue's module.
"""

from __future__ import annotations

import argparse
import hmac
import html
import ipaddress
import json
import secrets
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from courier import backend, bulk, queueview
from courier.attempts import attempts_of
from courier.backend import Target
from courier.clock import clock_ms
from courier.commands.output import when
from courier.commands.redrive import redrive_one
from courier.stop_signal import stop_on_signals

__all__ = ["WebPage", "is_loopback", "serve_web"]

MAX_FORM_BYTES = 4096
DEFAULT_TTL_MS = 60_000
DEAD_SHOWN = 200
ATTEMPTS_SHOWN = 10
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STYLE = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3;text-align:left}.n{text-align:right}.msg{padding:.5em;background:#e8f5e9}
.err{padding:.5em;background:#ffebee}small{color:#666}"""

Log = Callable[[str], None]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and any loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _e(value: object) -> str:
    return html.escape("-" if value is None else str(value), quote=True)


@dataclass
class WebPage:
    """What each request handler needs: the queue, the rules and the page's token."""

    queue: Target
    allow_redrive: bool
    allow_remote: bool
    token: str
    ttl_ms: int = DEFAULT_TTL_MS
    port: int = 0

    def snapshot(self) -> dict[str, Any]:
        """The page's data, read in one snapshot: overview, dead jobs and their attempts."""
        con = backend.connect_existing(self.queue)
        try:
            now = backend.server_clock_ms(con) if backend.is_conninfo(self.queue) else clock_ms()
            view = queueview.overview(con, now)
            with queueview.snapshot(con):
                dead = queueview.find_jobs(con, "dead", limit=DEAD_SHOWN)
                oldest = queueview.oldest_due(con, now)
        finally:
            con.close()
        for job in dead:
            job["attempts_log"] = attempts_of(self.queue, job["id"])[-ATTEMPTS_SHOWN:]
        return {**view, "dead_jobs": dead, "oldest_due": oldest}

    def redrive(self, job_id: str, note: str) -> dict[str, Any]:
        """Redrive one dead job with ``note``; the audit row it wrote."""
        con = backend.open_existing(self.queue)
        try:
            return redrive_one(con, self.queue, job_id, self.ttl_ms, note)
        finally:
            con.close()


def _cause(attempt: dict[str, Any]) -> str:
    if attempt["kind"] == "answer":
        return f"HTTP {attempt['http_status']} {attempt['detail'] or ''}".strip()
    if attempt["kind"] is None:
        return str(attempt["outcome"])
    return f"{attempt['kind']}: {attempt['detail']}"


def render(page: WebPage, data: dict[str, Any], message: str = "", error: str = "") -> str:
    """The whole page as HTML (every value escaped)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>lease-queue: {_e(backend.describe(page.queue))}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>lease-queue</h1><p>queue <code>{_e(backend.describe(page.queue))}</code>, "
        f"read at <span id='now'>{_e(when(data['now_ms']))}</span></p>",
    ]
    if message:
        parts.append(f"<p class='msg' id='message'>{_e(message)}</p>")
    if error:
        parts.append(f"<p class='err' id='error'>{_e(error)}</p>")
    parts.append("<h2>Jobs by status</h2><table><tr><th>status</th><th>jobs</th></tr>")
    for status, count in data["counts"].items():
        parts.append(f"<tr><td>{status}</td><td class='n' id='count-{status}'>{count}</td></tr>")
    parts.append(f"<tr><td>due now</td><td class='n' id='count-due'>{data['due']}</td></tr>")
    parts.append(
        f"<tr><td>redrive audit rows</td><td class='n' id='count-redrives'>"
        f"{data['redrives']}</td></tr></table>"
    )
    oldest = data["oldest_due"]
    parts.append("<h2>Oldest due job</h2>")
    if oldest is None:
        parts.append("<p id='oldest'>none: nothing is waiting for a courier</p>")
    else:
        parts.append(
            f"<p id='oldest'><b>{_e(oldest['id'])}</b> ({_e(oldest['status'])}, qty "
            f"{_e(oldest['qty'])}, token {_e(oldest['token'])}, attempts {_e(oldest['attempts'])}/"
            f"{_e(oldest['max_attempts'])}), due for {_e(oldest['due_for_ms'])} ms</p>"
        )
    parts.append(_dead_section(page, data["dead_jobs"], data["counts"]["dead"]))
    mode = "redrive allowed (with a note)" if page.allow_redrive else "read-only"
    parts.append(f"<p><small>{mode}; reload for fresh figures</small></p></body></html>")
    return "".join(parts)


def _dead_section(page: WebPage, dead: list[dict[str, Any]], total: int) -> str:
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for job in dead:
        by_reason.setdefault(str(job["reason"]), []).append(job)
    shown = f", the first {len(dead)} shown" if total > len(dead) else ""
    parts = [f"<h2>Dead jobs ({total}{shown})</h2>"]
    if not dead:
        parts.append("<p id='no-dead'>no dead jobs</p>")
    for reason, jobs in sorted(by_reason.items()):
        parts.append(f"<h3 id='reason-{_e(reason)}'>{_e(reason)} ({len(jobs)})</h3><table>")
        parts.append(
            "<tr><th>id</th><th>qty</th><th>token</th><th>attempts</th><th>attempt history</th>"
            + ("<th>redrive</th>" if page.allow_redrive else "")
            + "</tr>"
        )
        for job in jobs:
            history = (
                "<br>".join(
                    f"{_e(when(a['at_ms']))} token {_e(a['token'])} {_e(a['owner'])}: "
                    f"{_e(a['outcome'])} &rarr; {_e(a['status'])} ({_e(_cause(a))})"
                    for a in job["attempts_log"]
                )
                or "<small>no attempt recorded</small>"
            )
            row = (
                f"<tr id='dead-{_e(job['id'])}'><td>{_e(job['id'])}</td><td class='n'>"
                f"{_e(job['qty'])}</td><td class='n'>{_e(job['token'])}</td><td class='n'>"
                f"{_e(job['attempts'])}/{_e(job['max_attempts'])}</td><td>{history}</td>"
            )
            if page.allow_redrive:
                row += (
                    f"<td><form method='post' action='/redrive' id='redrive-{_e(job['id'])}'>"
                    f"<input type='hidden' name='token' value='{_e(page.token)}'>"
                    f"<input type='hidden' name='id' value='{_e(job['id'])}'>"
                    "<input name='note' required pattern='[A-Za-z0-9_-]{1,64}' "
                    "placeholder='note, e.g. ticket-4711' size='18'> "
                    "<button type='submit'>redrive</button></form></td>"
                )
            parts.append(row + "</tr>")
        parts.append("</table>")
    return "".join(parts)


class _Server(ThreadingHTTPServer):
    # As courier.receiver's server, on purpose: server_close() joins handler threads only
    # if they are not daemons, so a stopped page leaks none.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], page: WebPage) -> None:
        self.page = page
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server_version = "courier-web/1"

    @property
    def page(self) -> WebPage:
        assert isinstance(self.server, _Server)
        return self.server.page

    def log_message(self, format: str, *args: Any) -> None:
        """No stderr access log."""

    def _send(
        self,
        status: HTTPStatus,
        body: str,
        kind: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in {**SECURITY_HEADERS, **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _host_ok(self) -> bool:
        if self.page.allow_remote:
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return is_loopback(host)

    def do_GET(self) -> None:
        if not self._host_ok():
            self._send(HTTPStatus.FORBIDDEN, "unexpected Host header", "text/plain")
            return
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/status.json":
            data = self.page.snapshot()
            self._send(HTTPStatus.OK, json.dumps(data), "application/json")
            return
        if url.path != "/":
            self._send(HTTPStatus.NOT_FOUND, "no such page", "text/plain")
            return
        query = urllib.parse.parse_qs(url.query)
        message = query.get("done", [""])[0]
        self._send(HTTPStatus.OK, render(self.page, self.page.snapshot(), message=message[:200]))

    do_HEAD = do_GET

    def do_POST(self) -> None:
        if not self._host_ok():
            self._send(HTTPStatus.FORBIDDEN, "unexpected Host header", "text/plain")
            return
        if urllib.parse.urlsplit(self.path).path != "/redrive":
            self._send(HTTPStatus.NOT_FOUND, "no such page", "text/plain")
            return
        form = self._form()
        refusal = self._refusal(form)
        if refusal is not None:
            self._send(HTTPStatus.FORBIDDEN, refusal, "text/plain")
            return
        try:
            job_id = bulk.check_id("job id", form.get("id", ""))
            note = bulk.check_id("note", form.get("note", ""))
            row = self.page.redrive(job_id, note)
        except ValueError as error:
            page = render(self.page, self.page.snapshot(), error=f"not redriven: {error}")
            self._send(HTTPStatus.BAD_REQUEST, page)
            return
        done = f"redriven {job_id}: audit row #{row['seq']} (note {note})"
        location = "/?" + urllib.parse.urlencode({"done": done})
        self._send(HTTPStatus.SEE_OTHER, done, "text/plain", {"Location": location})

    def _form(self) -> dict[str, str]:
        length_text = self.headers.get("Content-Length", "")
        length = int(length_text) if length_text.isascii() and length_text.isdigit() else 0
        body = self.rfile.read(min(length, MAX_FORM_BYTES)) if length else b""
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", errors="replace"))
        return dict(pairs)

    def _refusal(self, form: dict[str, str]) -> str | None:
        """Why this state-changing request is refused (rules 2 and 3), or ``None``."""
        if not self.page.allow_redrive:
            return "read-only: start 'courier web' with --allow-redrive to redrive from the page"
        origin = self.headers.get("Origin")
        if origin is not None and origin != "null":
            host = urllib.parse.urlsplit(origin).netloc
            if host != self.headers.get("Host"):
                return "cross-site request refused"
        if not hmac.compare_digest(form.get("token", ""), self.page.token):
            return "missing or wrong page token: reload the page and try again"
        return None


def serve_web(args: argparse.Namespace, out: Log) -> int:
    """``courier web``: check the queue and the bind, then serve until Ctrl-C or SIGTERM."""
    if not is_loopback(args.host) and not args.allow_remote:
        raise ValueError(
            f"--host {args.host} is not a loopback address: anyone who can reach it would see "
            "the queue (and redrive, with --allow-redrive); add --allow-remote to mean it"
        )
    port = bulk.check_int("--port", args.port, 0, 65535)
    backend.connect_existing(args.queue).close()
    page = WebPage(args.queue, args.allow_redrive, args.allow_remote, secrets.token_urlsafe(32))
    try:
        server = _Server((args.host, port), page)
    except OSError as error:
        raise OSError(f"cannot listen on {args.host} port {port}: {error.strerror}") from None
    page.port = int(server.server_address[1])
    stop = stop_on_signals()
    mode = "redrive allowed" if args.allow_redrive else "read-only"
    shown = f"[{args.host}]" if ":" in args.host else args.host
    out(f"web page on http://{shown}:{page.port}/ ({mode}), queue {backend.describe(args.queue)}")
    if args.port_file is not None:
        args.port_file.write_text(f"{page.port}\n", encoding="utf-8")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        stop.wait(args.max_seconds)
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
    out("web page stopped")
    return 0
