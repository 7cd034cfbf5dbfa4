"""courier: the real-world side of lease-queue.

``worker.py`` (or, on PostgreSQL, ``pgworker.py``) is the queue; this package is
everything around it that touches the outside world:

- ``courier.receiver``: the downstream HTTP receiver, whose own SQLite inbox applies
  each delivery's effect at most once (deduplicated by id and qty);
- ``courier.delivery``: one delivery over HTTP, and the cause of its answer;
- ``courier.runner``: the courier loop around ``worker.run_file`` (or
  ``pgworker.run_once`` on the server's clock) with a real millisecond clock, an
  HTTP ``send`` that keeps each answer's cause, random jitter and bounded backoff;
- ``courier.backend``: where a queue lives, a SQLite file or a PostgreSQL conninfo;
- ``courier.queueview``: read-only views of a queue for operators, on either backend;
- ``courier.attempts``: the attempt log, why each delivery attempt ended as it did;
- ``courier.bulk``: jobs read from a JSON-lines or CSV file for a bulk enqueue;
- ``courier.audit``: the one check of a queue file against an inbox (nothing lost,
  nothing applied twice, no job done without its effect, tokens in order);
- ``courier.procs``: starting, killing and reaping child courier processes;
- ``courier.demo``: two couriers, one killed mid-delivery, the other recovers;
- ``courier.embedded``: a throwaway PostgreSQL server for the demo;
- ``courier.web``: the operator's web page, ``courier web QUEUE``;
- ``courier.cli``: the operator CLI, ``courier --help`` (or ``python -m courier --help``);
- ``courier.commands``: the CLI's commands, one command group per module.
"""
