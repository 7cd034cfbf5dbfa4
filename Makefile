# Every target sets itself up from nothing: a fresh clone needs only python3 (>= 3.11).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck unit clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## test: ruff, mypy and the whole pytest suite (what CI runs)
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest

## demo: the project's main job, two couriers on a temporary queue file
demo: $(STAMP)
	$(PY) -m courier demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
