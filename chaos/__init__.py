"""chaos: the soak of the whole system, for developers (this package does not ship).

One receiver (``courier.receiver``, in this process) and N courier processes share
one queue file. An intake feeds M jobs (with intake retries and conflicting
enqueues among them) while a chaos driver, following a schedule drawn from the
seed, SIGKILLs couriers at random moments, right after the receiver committed their
delivery (before the queue's ``finish``) and inside every fault hook of ``claim``
and ``finish``; restarts them; pauses couriers (SIGSTOP/SIGCONT) past their lease,
sometimes starting a replacement with the same owner name while the old one is
frozen; makes the receiver answer slowly, time out, fail with 5xx or 4xx, drop the
connection after its commit, or go down for a moment; holds the queue's write lock
past the couriers' busy timeout; and redrives dead jobs as an operator would
(``python -m courier redrive``). Then chaos stops, healthy couriers drain the
queue, and a checker reads the queue file and the receiver's inbox. The first
round of chaos (every kind once, early) is forced: each of its events waits for
something to act on, the kill inside a hook, the pause in flight and the partition
are done to a courier followed until it has shown their effect, and the chaos
phase does not end before they have; so a short run under any load shows what a
long one does, and a run where one did not show fails.

With ``--postgres`` the queue is a database on a throwaway PostgreSQL server
instead, and each courier runs on a simulated host of its own (a network
namespace with its own address, reaching the server over TCP); the driver also
cuts a host off while it holds a lease and heals it later, and the checker
counts the partitions, the late finishes refused as stale and the reconnects.
Where namespaces cannot be made, that part is skipped with the reason and the
couriers connect over loopback.

The rules of the run:

1. It always stops by itself. Every loop is bounded in count and time; every child
   is killed and reaped and every temporary file removed, even on failure or Ctrl-C
   (``--workdir`` keeps the files for a post-mortem).
2. Real processes, real signals, real HTTP on loopback (port 0) or the hosts'
   hub, real milliseconds of this host's wall clock (on PostgreSQL: of the
   database server's clock), the queue's shared time base. No mocks.
3. The schedule is a pure function of the seed and the sizes (``chaos.schedule``).
4. The checker trusts files, not reports (``chaos.report``, through
   ``courier.audit``); the couriers' event logs add only what files cannot show.
5. A job quarantined as ``dead`` may still have had its effect applied: the gap the
   contract does not claim to close, reported, never a failure.

The parts, one noun each: ``schedule`` (the plan), ``child`` (a courier child),
``pgchild`` (a courier child on PostgreSQL), ``courier_process`` (one courier
incarnation and how it is started), ``fleet`` (the courier processes, made of
``roster`` (who runs, reaped and restarted), ``pauses`` (SIGSTOP and SIGCONT),
``partitions`` (hosts cut off and healed) and ``forced`` (the forced events and
their witnesses)), ``faults`` (what the receiver's plug-in does to a delivery),
``receiver`` (the receiver's faults of a run), ``intake`` (the producer), ``operator``
(redrives and a held write lock), ``store`` (the queue as the supervisor reaches
it), ``pgserver`` (the PostgreSQL server), ``hosts`` (the simulated hosts),
``witness`` (a courier a forced event was done to), ``tally`` (what the chaos
did), ``run`` (one whole soak), ``report`` (the checker and its table) and
``cli`` (``python -m chaos --help``).
"""
