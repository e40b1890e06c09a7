# CRANE developer tasks. `make demo` sets everything up and checks the bundled example; `make test` runs all tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.crane-installed
BENCH  ?= ../shared/bench/junobench-lite
JOBS   ?= 2

.PHONY: setup demo test test-python test-client vsix bench bench-json clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench,llm]'
	touch $(STAMP)

demo: setup
	@echo "== crane check examples/titanic/titanic.ipynb"
	@$(BIN)/crane check examples/titanic/titanic.ipynb; rc=$$?; [ $$rc -le 1 ] || exit $$rc

test: test-python test-client

test-python: setup
	$(BIN)/python -m pytest -q

NPM_CI := cd vscode-client && npm ci --no-audit --no-fund --loglevel=error

test-client: setup
	$(NPM_CI) && npm run typecheck && npm test && CRANE_PYTHON=$(abspath $(BIN)/python) npm run test:wire

vsix:
	$(NPM_CI) && npm run package

bench: setup
	$(BIN)/crane bench $(BENCH) --jobs $(JOBS)

clean:
	rm -rf $(VENV) build *.egg-info server/*.egg-info .pytest_cache
