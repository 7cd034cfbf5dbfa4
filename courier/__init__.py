"""courier: the real-world side of lease-queue.

``worker.py`` (or, on PostgreSQL, ``pgworker.py``) is the queue; this package is
everything around it that touches the outside world:

- ``courier.receiver``: the downstream HTTP receiver, over its inbox;
- ``courier.inbox``: the receiver's own SQLite inbox, which applies each delivery's
  effect at most once (deduplicated by id and qty);
- ``courier.delivery_request``: what a delivery request must be, and the ``Problem``
  a request that is not gets;
- ``courier.interference``: the receiver's one plug-in point (refuse, delay or drop
  a delivery), and the reply delay that ships;
- ``courier.request_head``: one HTTP request head, read by hand (the receiver's);
- ``courier.delivery``: one delivery over HTTP, and the cause of its answer;
- ``courier.wire``: one HTTP/1.1 client connection, a request written and its answer read;
- ``courier.send_loop``: deliveries in flight on one thread, each on a kept-alive
  connection (``--in-flight`` above 1);
- ``courier.runner``: the courier loop, round after round of a ``Rounds``, with an
  HTTP ``send`` that keeps each answer's cause, random jitter and bounded backoff;
- ``courier.file_rounds``: a courier's rounds on a queue file (``worker.run_once``
  on a kept connection, in turns at writing);
- ``courier.pg_rounds``: a courier's rounds on PostgreSQL (``pgworker.run_once`` on
  the server's clock);
- ``courier.batch_rounds``: a courier's rounds in batches (``claim_many``, deliveries in
  flight, ``finish_many``), batches in a pipeline;
- ``courier.run_parts``: what ``courier run`` hands the loop besides the queue (its
  attempt log, rounds one job or one batch at a time, and send), one way for the
  command and its benchmark;
- ``courier.stop_rules``: when a courier stops by itself;
- ``courier.stop_signal``: SIGINT and SIGTERM as a stop event, and pauses it cuts short;
- ``courier.transient``: which errors a courier waits out (a busy file, a lost server);
- ``courier.crash_drill``: a courier that stalls after an acknowledged delivery;
- ``courier.clock``: the host's wall clock in milliseconds, a queue file's time base;
- ``courier.backend``: where a queue lives, a SQLite file or a PostgreSQL conninfo;
- ``courier.queueview``: read-only views of a queue for operators, on either backend;
- ``courier.attempts``: the attempt log, why each delivery attempt ended as it did;
- ``courier.bulk``: jobs read from a JSON-lines or CSV file for a bulk enqueue;
- ``courier.audit``: the one check of a queue file against an inbox (nothing lost,
  nothing applied twice, no job done without its effect, tokens in order);
- ``courier.procs``: starting, killing and reaping child courier processes;
- ``courier.demo``: two couriers, one killed mid-delivery, the other recovers;
- ``courier.embedded``: a throwaway PostgreSQL server for the demo;
- ``courier.printable``: text from outside (a receiver's answer, an error) with its
  control and bidirectional characters escaped, before it is printed;
- ``courier.log_lines``: the log of ``run``, ``serve`` and ``web``: one timestamped
  line per event, an unchanged failure folded into a count;
- ``courier.web``: the operator's web page, ``courier web QUEUE`` (its data, views
  and server, one module each);
- ``courier.cli``: the operator CLI, ``courier --help`` (or ``python -m courier --help``);
- ``courier.reference``: the CLI reference, rendered as markdown from the parser;
- ``courier.commands``: the CLI's commands, one command group per module.
"""
