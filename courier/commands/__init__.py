"""The commands of ``courier.cli``, one command group per module.

``courier.cli`` holds the parser (one row per command) and the boundary that turns
errors into exit statuses; each module here holds its commands' options and handlers:

- ``courier.commands.queue``: ``init``, ``enqueue``, ``status``.
- ``courier.commands.jobs``: ``jobs``, ``show``, ``dead``, ``redrives``.
- ``courier.commands.redrive``: ``redrive`` (and ``redrive_one``, which the web page uses).
- ``courier.commands.services``: ``serve``, ``run``, ``web``: the long-running ones.
- ``courier.commands.audit``: ``inbox``, ``audit``, ``demo``: deliveries checked end to end.
- ``courier.commands.conform``: ``conform``: the change feed, and the model checking it.

What they share: ``courier.commands.options`` (argument types and option builders),
``courier.commands.output`` (printing, times and exit statuses) and
``courier.commands.connection`` (how a command reaches its queue and its clock).
"""
