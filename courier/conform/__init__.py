"""Conformance of real runs: every committed change of a queue explained as one model step.

An opt-in **change feed** records, in the same transaction as the change, every row
that any writer inserts, updates or deletes in ``jobs`` and ``redrives``
(``courier conform --install QUEUE`` adds it, ``--uninstall`` removes it); the
**checker** replays the feed against the executable specification in ``model/`` and
explains each committed transaction as the effect of one model operation, for
argument values it infers. The parts, one noun per module:

- ``courier.conform.feed``: what the feed holds (``Event``, ``Txn``) and the rows'
  column orders; ``courier.conform.sqlite_feed`` and ``courier.conform.postgres_feed``:
  installing, removing and reading the feed on each backend (SQLite row triggers;
  PostgreSQL statement triggers, each event with its writer's transaction id);
- ``courier.conform.tables``: the queue's two tables as the checker replays them;
- ``courier.conform.inference``: which operation, with which arguments, could have
  made a transaction (the arithmetic of the guards: ranges of ``now``);
- ``courier.conform.judge``: the model's verdict on the inferred step (its transitions
  fired on ``model.job.Job`` rows) and the nearest step for a change nothing explains;
- ``courier.conform.checker``: the replay itself (once, or ``follow``ing new commits);
- ``courier.conform.report``: what the checker prints, for a person or as JSON.

``docs/operations.md`` says how an operator runs it and reads a report;
``docs/testing.md`` what it checks that the test suites do not.
"""
