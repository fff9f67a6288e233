# Every target installs what it needs into .venv first (idempotent: a second
# `make venv` takes seconds). Only a Python 3.11 interpreter is required.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench
DEPS := setup.cfg pyproject.toml requirements/constraints.txt
# Test files run on this many worker processes (pytest-xdist; 0 runs them in this process).
TEST_WORKERS ?= 2
PIP := $(BIN)/python -m pip install --disable-pip-version-check -q -c requirements/constraints.txt

.PHONY: venv demo test bench notebooks docs clean

venv: $(STAMP)

$(STAMP): $(DEPS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[test]'
	@touch $@

$(BENCH_STAMP): $(STAMP)
	$(PIP) -e '.[test,bench]'
	@touch $@

demo: venv
	$(BIN)/python -m launch.demo --workdir=runs/demo

# pytest exits 5 when it collects nothing: report that as a failure, loudly.
test: venv
	@$(BIN)/python -m pytest tests -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: $(BENCH_STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/python -m launch.bench --out=runs/bench

# Execute every notebook at smoke size and store its outputs (run before committing a notebook).
notebooks: venv
	$(BIN)/python -m launch.notebooks

# The documentation site (docs/ and the API reference from the docstrings), strict: a broken link fails.
docs: venv
	$(BIN)/python -m mkdocs build --strict --site-dir runs/site

clean:
	rm -rf runs .pytest_cache
