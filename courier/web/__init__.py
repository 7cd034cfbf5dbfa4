"""The operator's web page: ``courier web QUEUE``.

The page an operator keeps open: how many jobs are in each status, which due job
has waited longest, the dead jobs grouped by cause (reason, and the HTTP status or
error class of their last attempt), every job in pages of ``PAGE_SIZE`` with
filters (status, reason, owner, id prefix), and one page per job with its row, the
model's explanation of it (``model.explain``: why it is where it is, what happens
next), every attempt with its cause and its audit rows. With ``--allow-redrive`` a
dead job's page redrives it with a required note, and a bulk redrive of every dead
job a filter matches first shows how many jobs it will touch and asks to confirm
(one transaction and one audit row each, as ``courier redrive --all``). Times are
shown in the browser's local time (ISO 8601), durations in words; the page
refreshes itself in place every ``--refresh-s`` seconds and stops while hidden.
The rules it keeps:

1. **Loopback unless asked.** It binds ``127.0.0.1`` on an OS-assigned port by
   default; any address that is not loopback is refused unless ``--allow-remote``
   is given, since whoever reaches the page sees the queue. Without
   ``--allow-remote`` a request whose ``Host`` is not the loopback address it was
   sent to is refused too (a DNS-rebinding page cannot reach it under its name).
2. **Read-only unless asked.** Without ``--allow-redrive`` the page has no form
   and ``POST /redrive`` and ``POST /redrive-all`` answer 403, changing nothing.
3. **No cross-site writes.** Every state-changing request must carry the token
   the page issued (a random value per server, in the form's hidden field,
   compared in constant time); a page on another site cannot read it. A request
   with an ``Origin`` that is not the page's own (``null`` included) is 403 and
   changes nothing. The page forbids framing and loads nothing from elsewhere
   (``Content-Security-Policy``: its own stylesheet inline, its own script at
   ``/page.js``), on every answer, errors and unknown methods (405) included.
4. **Nothing from a request is shown as the queue's word.** The banner after a
   redrive is read back from the audit rows its link names, never from text in the
   link; every value shown is escaped, control and bidirectional characters shown
   as escapes (``courier.printable``).
5. **A queue that does not answer is said so.** A busy file, an unreachable server
   or a missing file is a 503 page (``/status.json``: a 503 JSON body) with the
   reason, which keeps trying; the log gets one line (``courier.log_lines``).

One noun per module: ``data`` (the filters and each view's reads and writes),
``views`` (the HTML), ``server`` (the routes, the rules, ``serve_web``) and
``page.js`` (local times, the refresh).
"""

from courier.web.data import MAX_BULK, PAGE_SIZE, Filters, WebPage
from courier.web.server import SECURITY_HEADERS, is_loopback, serve_web

__all__ = [
    "MAX_BULK",
    "PAGE_SIZE",
    "SECURITY_HEADERS",
    "Filters",
    "WebPage",
    "is_loopback",
    "serve_web",
]
