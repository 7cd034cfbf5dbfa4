"""bench: long-running checks of the whole system, outside the normal test suite.

- ``bench.perf``: the performance benchmark, ``python -m bench.perf --help`` (``make
  bench``): the disk's limit, worker.py's single and batch calls against it, the peers
  (persist-queue, litequeue, huey) doing the same work, claim+finish latency from 1k
  to 1M rows, N courier processes on one file, syncs per call and every statement's
  query plan. Its parts: ``measure`` (timing), ``limits``, ``ops``, ``peers``, ``rows``
  (the latency files' shapes), ``latency``, ``slowpaths``, ``couriers``, ``syncs`` (strace),
  ``plans`` (``python -m bench.plans``), ``report`` (tables, goals) and ``chart``.
  Results and their explanation: docs/performance.md.
"""
