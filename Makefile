# Every target works from a fresh clone: it builds the virtualenv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint proto bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## run: the service for real (embedded PostgreSQL, local blobs, dev credentials)
run: $(STAMP)
	$(VENV)/bin/setu dev

## test: the whole suite (unit, integration on real PostgreSQL, e2e with real processes)
test: $(STAMP)
	scripts/ensure_test_tools.sh
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## proto: regenerate setu_client/_proto from protos/
proto: $(STAMP)
	$(PY) scripts/gen_protos.py

bench: $(STAMP)
	@set -e; for script in scripts/bench_*.py; do echo "== $$script"; $(PY) $$script; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .setu
