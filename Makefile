# Every target works from a fresh clone: it builds the virtualenv first.
# Two stamps: `run` installs what running Setu needs (the `server` extra);
# test, lint, proto and bench install the test toolchain on top (`dev`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
ENSURE_VENV := PYTHON=$(PYTHON) VENV=$(VENV) scripts/ensure_venv.sh

.PHONY: install install-dev run test lint proto bench bench-table dist clean

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

## bench: every scripts/bench_*.py (or BENCH_SCRIPTS), output kept in BENCH_LOG,
## then every TABLE line of it as one table (issue 27's); fails if any bench did
BENCH_SCRIPTS ?= $(wildcard scripts/bench_*.py)
BENCH_LOG ?= .setu/bench.log
# The table from BENCH_LOG's TABLE lines. Inlined, not `$(MAKE) bench-table`:
# make runs a recipe line that names $(MAKE) even under `make -n`.
BENCH_TABLE = echo; echo "== the table (every TABLE line of $(BENCH_LOG))"; \
	echo "| measure | floor in the same run | Setu | ratio | target | |"; \
	echo "|---|---|---|---|---|---|"; \
	sed -n 's/^TABLE \(|.*\)$$/\1 |/p' $(BENCH_LOG)
bench: $(DEV_STAMP)
	@mkdir -p $(dir $(BENCH_LOG)); : > $(BENCH_LOG); rm -f $(BENCH_LOG).failed; \
	for script in $(BENCH_SCRIPTS); do \
		echo "== $$script" | tee -a $(BENCH_LOG); \
		{ $(PY) $$script 2>&1 || echo "$$script" >> $(BENCH_LOG).failed; } | tee -a $(BENCH_LOG); \
	done; \
	$(BENCH_TABLE); \
	if [ -s $(BENCH_LOG).failed ]; then \
		echo "failed: $$(tr '\n' ' ' < $(BENCH_LOG).failed)(output in $(BENCH_LOG))"; exit 1; \
	fi

## bench-table: the table of the last `make bench` again, from BENCH_LOG
bench-table:
	@$(BENCH_TABLE)

## dist: the wheel an agent host installs (README, "Installing an agent")
dist: $(RUN_STAMP)
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .setu dist build
