"""bench: long-running checks of the whole system, outside the normal test suite.

- ``bench.soak``: the chaos soak, ``python -m bench.soak --help``: one receiver, many
  courier processes on one queue file, random kills, pauses, outages and receiver
  faults, then a checker that reads both files and fails on anything lost, applied
  twice or finished by a stale ticket.
"""
