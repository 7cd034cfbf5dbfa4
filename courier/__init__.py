"""courier: the real-world side of lease-queue.

``worker.py`` is the queue; this package is everything around it that touches the
outside world:

- ``courier.receiver``: the downstream HTTP receiver, whose own SQLite inbox applies
  each delivery's effect at most once (deduplicated by id and qty);
- ``courier.runner``: the courier loop around ``worker.run_file`` with a real
  millisecond clock, an HTTP ``send``, random jitter and bounded backoff;
- ``courier.queueview``: read-only views of a queue file for operators;
- ``courier.audit``: the one check of a queue file against an inbox (nothing lost,
  nothing applied twice, no job done without its effect, tokens in order);
- ``courier.procs``: starting, killing and reaping child courier processes;
- ``courier.demo``: two couriers, one killed mid-delivery, the other recovers;
- ``courier.cli``: the operator CLI, ``python -m courier --help``.
"""
