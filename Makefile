# Every target sets itself up from nothing: a fresh clone needs only python3 (>= 3.11).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test nightly demo fuzz mutants diagram explore reference bench bench-postgres bench-peers clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## test: ruff, mypy and the whole pytest suite (what CI runs), on two workers
WORKERS ?= 2
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -n $(WORKERS) --dist worksteal

## nightly: the whole suite with long draws and random seeds (the nightly profile: about
## ten times the draws of make test), see docs/testing.md
nightly: $(STAMP)
	HYPOTHESIS_PROFILE=nightly $(PY) -m pytest -n $(WORKERS) --dist worksteal

## demo: the project's main job, two couriers on a temporary queue file; it runs from the
## checkout on the standard library alone, so it installs nothing (no .venv, no test extra)
demo:
	$(PYTHON) -m courier demo

## fuzz: a time-bounded random campaign (MINUTES=5 by default) of the lockstep machine;
## MODE=parallel: parallel programs under random schedules (tests/parallel), on worker.py;
## MODE=parallel-postgres: the same on pgworker.py (a throwaway server, or LEASE_QUEUE_PG);
## MODE=parallel-real: parallel programs with each branch in a real process;
## MODE=exhaustive: every interleaving of every small program (not timed by MINUTES)
MINUTES ?= 5
MODE ?= lockstep
FUZZ_MODULE_lockstep := tests.stateful.fuzz --minutes $(MINUTES)
FUZZ_MODULE_parallel := tests.parallel.fuzz --minutes $(MINUTES)
FUZZ_MODULE_parallel-postgres := tests.parallel.fuzz --store postgres --minutes $(MINUTES)
FUZZ_MODULE_parallel-real := tests.parallel.fuzz --real --minutes $(MINUTES)
FUZZ_MODULE_exhaustive := tests.parallel.exhaustive
fuzz: $(STAMP)
	@test -n "$(FUZZ_MODULE_$(MODE))" || { echo "MODE must be lockstep, parallel, parallel-postgres, parallel-real or exhaustive"; exit 2; }
	$(PY) -m $(FUZZ_MODULE_$(MODE))

## bench: the performance benchmark (about 9 min with the feed's cost; never on tmpfs), see docs/performance.md; then the change feed's cost (docs/conform.json)
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m bench.perf --json docs/performance.json --page docs/performance.md
	$(PY) -m bench.conform --json docs/conform.json

## bench-postgres: PostgreSQL beside SQLite on the same disk (a few minutes), rendered into docs/postgres.md
bench-postgres: $(STAMP)
	$(PY) -m bench.postgres --json docs/postgres.json --doc docs/postgres.md

## bench-peers: pgworker beside procrastinate and pgqueuer on one PostgreSQL server (about 4 min), rendered into docs/postgres.md
PEERS_STAMP := $(VENV)/.installed-peers
$(PEERS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,peers]'
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)
	$(PY) -m bench.postgres_peers --json docs/postgres-peers.json --doc docs/postgres.md

## mutants: mutation testing of worker.py against the stateful suite alone (about 16 min on 2 cores)
mutants: $(STAMP)
	$(PY) -m pip install --quiet "mutmut>=3.3,<4"
	rm -rf mutants
	HYPOTHESIS_PROFILE=mutation $(VENV)/bin/mutmut run --max-children 2 || true
	$(VENV)/bin/mutmut results

## diagram: regenerate docs/state-machine.md from model/ (and the explorer's record it renders)
diagram: $(STAMP)
	$(PY) -m model.explore --record docs/state-machine.json
	$(PY) -m model.diagram

## reference: regenerate the command reference in docs/operations.md from courier/cli.py's parser
reference: $(STAMP)
	$(PY) -m courier.reference --write docs/operations.md

## explore: the bounded model checker of model/ on its default bounds (larger: EXPLORE="--depth 9")
EXPLORE ?=
explore: $(STAMP)
	$(PY) -m model.explore $(EXPLORE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
