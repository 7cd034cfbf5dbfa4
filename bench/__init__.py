"""bench: the performance benchmark, ``python -m bench.perf --help`` (``make bench``).

It measures what users ask, through worker.py's public calls and the contract's
schema only: the disk's limit and what the durability settings cost (``limits``,
``syncs`` with strace), worker.py's single and batch calls beside that limit
(``ops``), the peers persist-queue, litequeue and huey doing the same work
(``peers``), claim+finish latency from 1k to 1M rows (``latency``, on the shapes of
``rows``), N courier processes on one file (``couriers``) and the queue states that
are slow (``slowpaths``). ``measure`` times, ``perf`` runs the sections, ``report``
renders docs/performance.md from the recorded JSON and ``chart`` draws its chart.
A backend with a benchmark of its own adds one module here and one section to
``perf.SECTIONS``. The soak of the whole system is ``chaos`` (not part of bench).
"""
