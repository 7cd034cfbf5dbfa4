"""The web page's HTTP side: routes, the rules of ``courier.web``, and ``serve_web``.

Every request goes through ``_Handler._answer``: the Host rule first, then the
route; a queue that does not answer (busy, unreachable, gone) is a 503 that says
why, anything else unexpected a 500 with one log line, and every answer, errors
and methods the page does not know included, carries ``SECURITY_HEADERS``.
"""

from __future__ import annotations

import argparse
import hmac
import importlib.resources
import ipaddress
import json
import secrets
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from courier import backend, bulk
from courier.commands.connection import transient_trouble
from courier.log_lines import LogLines
from courier.stop_signal import stop_on_signals
from courier.transient import is_transient
from courier.web import views
from courier.web.data import MAX_BULK, Filters, WebPage

__all__ = ["SECURITY_HEADERS", "is_loopback", "serve_web"]

MAX_FORM_BYTES = 4096
ALLOWED = "GET, HEAD, POST"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with
    # its own form posts, which rule 3 must refuse (any other site can send that too).
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
HTML = "text/html; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
SCRIPT = importlib.resources.files("courier.web").joinpath("page.js").read_text(encoding="utf-8")

Log = Callable[[str], None]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and any loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unavailable(error: BaseException) -> bool:
    """The queue did not answer for now: busy, unreachable, or its file gone."""
    if isinstance(error, sqlite3.OperationalError) and backend.is_busy(error):
        return True
    return is_transient(error) or isinstance(error, FileNotFoundError)


class _Server(ThreadingHTTPServer):
    # As courier.receiver's server, on purpose: server_close() joins handler threads only
    # if they are not daemons, so a stopped page leaks none.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], page: WebPage, log: Log) -> None:
        self.page = page
        self.log = log
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server_version = "courier-web/1"

    @property
    def page(self) -> WebPage:
        assert isinstance(self.server, _Server)
        return self.server.page

    def _log(self, line: str) -> None:
        assert isinstance(self.server, _Server)
        self.server.log(line)

    def log_message(self, format: str, *args: Any) -> None:
        """No stderr access log (failures are logged by ``_answer``)."""

    def __getattr__(self, name: str) -> Any:
        # http.server answers a method it finds no do_<METHOD> for with its own HTML 501,
        # without our headers: every other method gets a 405 of ours instead.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals (a bad request line, headers too long), in our form."""
        self.close_connection = True
        status = HTTPStatus(code)
        if self.request_version == "HTTP/0.9":  # the line did not parse: answer as HTTP/1.0
            self.request_version = "HTTP/1.0"
        self._send(status, f"{code} {message or status.phrase}\n", TEXT)

    def _send(
        self,
        status: HTTPStatus,
        body: str,
        kind: str = HTML,
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

    def _answer(self, respond: Callable[[urllib.parse.SplitResult], None]) -> None:
        """Run one route: the Host rule first; a queue that does not answer is a 503
        that says why (HTML, or JSON for a ``.json`` path), any other error a 500."""
        url = urllib.parse.urlsplit(self.path)
        wants_json = url.path.endswith(".json")
        if not self._host_ok():
            self._send(HTTPStatus.FORBIDDEN, "unexpected Host header\n", TEXT)
            return
        try:
            respond(url)
        except Exception as error:
            status = (
                HTTPStatus.SERVICE_UNAVAILABLE
                if unavailable(error)
                else HTTPStatus.INTERNAL_SERVER_ERROR
            )
            reason = f"{type(error).__name__}: {error}" if status == 500 else str(error)
            word = "the queue did not answer" if status == 503 else "the page failed"
            self._log(f"{self.command} {url.path} {int(status)}: {word}: {reason}")
            if wants_json:
                body = json.dumps(
                    {"error": "unavailable" if status == 503 else "internal", "detail": reason}
                )
                self._send(status, body, JSON)
            else:
                self._send(status, views.problem(self.page, word, reason, refresh=status == 503))

    def _not_allowed(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            f"{self.command} is not allowed here: {ALLOWED}\n",
            TEXT,
            {"Allow": ALLOWED},
        )

    def _host_ok(self) -> bool:
        if self.page.allow_remote:
            return True
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]")
        return is_loopback(host)

    # --- GET ----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._answer(self._get)

    do_HEAD = do_GET

    def _get(self, url: urllib.parse.SplitResult) -> None:
        query = dict(urllib.parse.parse_qsl(url.query))
        routes: dict[str, Callable[[dict[str, str]], None]] = {
            "/": self._home,
            "/status.json": self._status_json,
            "/job": self._job,
            "/job.json": self._job_json,
            "/redrive-all": self._preview,
        }
        if url.path == "/page.js":
            self._send(HTTPStatus.OK, SCRIPT, "text/javascript; charset=utf-8")
            return
        route = routes.get(url.path)
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, "no such page\n", TEXT)
            return
        route(query)

    def _filters(self, query: dict[str, str]) -> Filters | None:
        """The query's filters; a bad one answers 400 (the page, its error said) and ``None``."""
        try:
            return Filters.parse(query)
        except ValueError as error:
            data = self.page.home(Filters())
            self._send(
                HTTPStatus.BAD_REQUEST, views.home(self.page, data, Filters(), error=str(error))
            )
            return None

    def _home(self, query: dict[str, str]) -> None:
        filters = self._filters(query)
        if filters is None:
            return
        data = self.page.home(filters)
        self._send(HTTPStatus.OK, views.home(self.page, data, filters, banner=self._banner(query)))

    def _banner(self, query: dict[str, str]) -> str | None:
        """What a redrive just did, read back from the audit rows it names (never text
        from the request: a link cannot make the page say anything the queue does not)."""
        first_last = query.get("redriven", "")
        parts = first_last.split("-")
        if not 1 <= len(parts) <= 2 or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        first, last = int(parts[0]), int(parts[-1])
        if not 0 < first <= last or last - first >= MAX_BULK:
            return None
        rows = self.page.audit_range(first, last)
        if len(rows) != last - first + 1:
            return None
        notes = sorted({row["note"] for row in rows})
        if len(rows) == 1:
            row = rows[0]
            return f"redriven {row['id']}: audit row #{row['seq']} (note {row['note']})"
        return (
            f"redriven {len(rows)} jobs: audit rows #{first} to #{last} (note {', '.join(notes)})"
        )

    def _status_json(self, query: dict[str, str]) -> None:
        filters = self._filters(query)
        if filters is not None:
            self._send(HTTPStatus.OK, json.dumps(self.page.home(filters)), JSON)

    def _job_data(self, query: dict[str, str]) -> dict[str, Any] | None:
        try:
            job_id = bulk.check_id("job id", query.get("id", ""))
        except ValueError as error:
            self._send(HTTPStatus.BAD_REQUEST, f"{error}\n", TEXT)
            return None
        data = self.page.job(job_id)
        if data is None:
            self._send(HTTPStatus.NOT_FOUND, f"no job {job_id!r}\n", TEXT)
        return data

    def _job(self, query: dict[str, str]) -> None:
        data = self._job_data(query)
        if data is not None:
            self._send(HTTPStatus.OK, views.job_page(self.page, data, self._banner(query)))

    def _job_json(self, query: dict[str, str]) -> None:
        data = self._job_data(query)
        if data is not None:
            shown = {**data, "explanation": data["explanation"].as_dict()}
            self._send(HTTPStatus.OK, json.dumps(shown), JSON)

    def _preview(self, query: dict[str, str]) -> None:
        if not self.page.allow_redrive:
            self._send(HTTPStatus.FORBIDDEN, f"{READ_ONLY}\n", TEXT)
            return
        filters = self._filters(query)
        if filters is None:
            return
        ids = self.page.matching_dead(filters)
        total = self.page.count_matching_dead(filters)
        now = self.page.now_ms()
        self._send(HTTPStatus.OK, views.preview(self.page, filters, ids, total, now))

    # --- POST ---------------------------------------------------------------------

    def do_POST(self) -> None:
        self._answer(self._post)

    def _post(self, url: urllib.parse.SplitResult) -> None:
        routes = {"/redrive": self._redrive, "/redrive-all": self._redrive_all}
        route = routes.get(url.path)
        if route is None:
            self._send(HTTPStatus.NOT_FOUND, "no such page\n", TEXT)
            return
        form = self._form()
        refusal = self._refusal(form)
        if refusal is not None:
            self._send(HTTPStatus.FORBIDDEN, f"{refusal}\n", TEXT)
            return
        route(form)

    def _redrive(self, form: dict[str, str]) -> None:
        try:
            job_id = bulk.check_id("job id", form.get("id", ""))
            note = bulk.check_id("note", form.get("note", ""))
            row = self.page.redrive(job_id, note)
        except ValueError as error:
            self._send(
                HTTPStatus.BAD_REQUEST,
                views.problem(self.page, "not redriven", str(error), refresh=False),
            )
            return
        location = "/job?" + urllib.parse.urlencode({"id": job_id, "redriven": row["seq"]})
        self._send(HTTPStatus.SEE_OTHER, f"see {location}\n", TEXT, {"Location": location})

    def _redrive_all(self, form: dict[str, str]) -> None:
        try:
            filters = Filters.parse(form)
            note = bulk.check_id("note", form.get("note", ""))
        except ValueError as error:
            self._send(
                HTTPStatus.BAD_REQUEST,
                views.problem(self.page, "not redriven", str(error), refresh=False),
            )
            return
        rows = self.page.redrive_all(filters, note)
        if not rows:
            location = "/?" + filters.dead().query()
        else:
            seqs = f"{rows[0]['seq']}-{rows[-1]['seq']}"
            location = "/?" + urllib.parse.urlencode({"redriven": seqs})
        self._send(HTTPStatus.SEE_OTHER, f"see {location}\n", TEXT, {"Location": location})

    def _form(self) -> dict[str, str]:
        length_text = self.headers.get("Content-Length", "")
        length = int(length_text) if length_text.isascii() and length_text.isdigit() else 0
        body = self.rfile.read(min(length, MAX_FORM_BYTES)) if length else b""
        return dict(urllib.parse.parse_qsl(body.decode("utf-8", errors="replace")))

    def _refusal(self, form: dict[str, str]) -> str | None:
        """Why this state-changing request is refused (rules 2 and 3), or ``None``."""
        if not self.page.allow_redrive:
            return READ_ONLY
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{self.headers.get('Host')}":
            return f"cross-site request refused (Origin {origin!r} is not this page's)"
        if not hmac.compare_digest(form.get("token", ""), self.page.token):
            return "missing or wrong page token: reload the page and try again"
        return None


READ_ONLY = "read-only: start 'courier web' with --allow-redrive to redrive from the page"


def serve_web(args: argparse.Namespace) -> int:
    """``courier web``: check the queue and the bind, then serve until Ctrl-C or SIGTERM.

    A queue that is busy or out of reach at the start is served all the same: the page
    says so (503) until it answers.
    """
    if not is_loopback(args.host) and not args.allow_remote:
        raise ValueError(
            f"--host {args.host} is not a loopback address: anyone who can reach it would see "
            "the queue (and redrive, with --allow-redrive); add --allow-remote to mean it"
        )
    port = bulk.check_int("--port", args.port, 0, 65535)
    trouble = transient_trouble(args.queue)  # never a page over a file that is no queue
    log = LogLines()
    page = WebPage(
        args.queue,
        args.allow_redrive,
        args.allow_remote,
        secrets.token_urlsafe(32),
        refresh_s=args.refresh_s,
    )
    try:
        server = _Server((args.host, port), page, log)
    except OSError as error:
        raise OSError(f"cannot listen on {args.host} port {port}: {error.strerror}") from None
    page.port = int(server.server_address[1])
    stop = stop_on_signals()
    mode = "redrive allowed" if args.allow_redrive else "read-only"
    shown = f"[{args.host}]" if ":" in args.host else args.host
    log(f"web page on http://{shown}:{page.port}/ ({mode}), queue {backend.describe(args.queue)}")
    if trouble is not None:
        log(f"the queue does not answer yet ({trouble}): the page says so until it does")
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
    log("web page stopped")
    log.close()
    return 0
