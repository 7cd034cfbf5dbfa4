"""bench: the benchmarks. ``make bench`` (``bench.perf``: docs/performance.md),
``make bench-postgres`` (``bench.postgres``) and ``make bench-peers``
(``bench.postgres_peers``), both into docs/postgres.md; ``python -m bench.slowpaths``
times the slow queue states alone on either backend.

They measure through the queues' public calls and the contract's schema only.
``measure`` is the harness every bench uses (timing, percentiles, medians of rounds,
fleets of child processes, the record's command line), ``backends`` gives fresh queues
of either backend (and the PostgreSQL server), ``rows`` fills them with SQL, ``ops``
times any queue in the same phases, and ``report`` renders every page from its record.
The soak of the whole system is ``chaos`` (not part of bench).
"""
