# Every target works from a fresh clone: it builds the virtualenv first.
# Two stamps: `run` installs what running Setu needs (the `server` extra);
# test, lint, proto and bench install the test toolchain on top (`dev`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
ENSURE_VENV := PYTHON=$(PYTHON) VENV=$(VENV) scripts/ensure_venv.sh

.PHONY: install install-dev run test lint proto bench dist clean

$(RUN_STAMP): pyproject.toml
	$(ENSURE_VENV) server
	touch $(RUN_STAMP)

# dev includes server, so the run stamp is true too.
$(DEV_STAMP): pyproject.toml
	$(ENSURE_VENV) dev
	touch $(DEV_STAMP) $(RUN_STAMP)

install: $(RUN_STAMP)

install-dev: $(DEV_STAMP)

## run: the service for real (embedded PostgreSQL, local blobs, dev credentials)
run: $(RUN_STAMP)
	$(VENV)/bin/setu dev

## test: the whole suite (unit, integration on real PostgreSQL, e2e with real processes)
test: $(DEV_STAMP)
	scripts/ensure_test_tools.sh
	$(PY) -m pytest

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## proto: regenerate setu_client/_proto from protos/
proto: $(DEV_STAMP)
	$(PY) scripts/gen_protos.py

bench: $(DEV_STAMP)
	@set -e; for script in scripts/bench_*.py; do echo "== $$script"; $(PY) $$script; done

## dist: the wheel an agent host installs (README, "Installing an agent")
dist: $(RUN_STAMP)
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .setu dist build
