# CRANE developer tasks. `make demo` sets everything up and checks the bundled example; `make test` runs the
# linters (ruff, mypy) and all tests: Python (pytest), the VS Code client (tsc, vitest unit + wire tests) and the
# end-to-end code-server test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# .venv's stamp is named by PYTHON's interpreter (its version and real path, envs/python_identity.sh), so
# `PYTHON=python3.13 make test` builds (or links again) a 3.13 daemon environment where .venv was another Python's,
# and a later plain `make test` links the default one back.
PYTHON_ID := $(shell PYTHON='$(PYTHON)' envs/python_identity.sh 2>/dev/null | sha256sum | cut -c1-12)
STAMP  := $(VENV)/.crane-installed-$(PYTHON_ID)
BENCH  ?= ../shared/bench/junobench-lite
JOBS   ?= 2
# pytest workers: most tests wait on kernels and servers, so three share the two cores well; `worksteal` lets an
# idle worker take queued tests from a busy one, so the suite does not end on one worker's long tail
PYTEST_JOBS ?= 3
# Python's bytecode cache on, whatever the calling shell says (these machines set PYTHONDONTWRITEBYTECODE=1): without
# it every process of the suite compiles CRANE's sources again (a server's imports 0.92 -> 0.78 CPU-s) and every
# xdist worker rewrites the tests' asserts (collection 11.5 -> 6.1 CPU-s). __pycache__ is gitignored and left out
# of the wheel.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo lint test test-python client-then-e2e test-client vsix e2e bench bench-floors bench-today bench-pythons kernel-today \
	kernel-pythons daemon-pythons clean

setup: $(STAMP)

# .venv: CRANE editable with its extras, built once per pyproject.toml under $(DAEMON_ENV_CACHE) and linked (see
# the script). Not under ~/.cache: the tests start kernels of this interpreter as another user (test_non_root), and
# root's home is not theirs to read.
DAEMON_ENV_CACHE ?= /var/tmp/crane-envs

$(STAMP): pyproject.toml envs/make_daemon_env.sh envs/python_identity.sh
	PYTHON=$(PYTHON) envs/make_daemon_env.sh $(VENV) $(DAEMON_ENV_CACHE)
	touch $(STAMP)

demo: setup
	@echo "== crane check examples/titanic/titanic.ipynb"
	@$(BIN)/crane check examples/titanic/titanic.ipynb; rc=$$?; [ $$rc -le 1 ] || exit $$rc

# ruff (lint and import order; pyproject.toml [tool.ruff]) and mypy (pyproject.toml [tool.mypy]: crane and tests).
# mypy's incremental cache lives outside the checkout, one per checkout path, so a clean CI checkout reuses it (a
# cold check took 54 CPU-s, a warm one 1): mypy checks each file's hash, so a cached result is only reused for
# unchanged code.
MYPY_CACHE ?= $(HOME)/.cache/crane-mypy/$(shell printf %s "$(CURDIR)" | sha256sum | cut -c1-16)

lint: setup
	$(BIN)/ruff check server tests benchmarks e2e
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

# The linters, the Python suite, and the client's checks followed by the end-to-end test run side by side: the
# suite keeps the cores busy, the others mostly wait (on a browser, a kernel), so they fit in beside it.
test: setup
	$(MAKE) --no-print-directory -j3 --output-sync=target lint test-python client-then-e2e

client-then-e2e: setup
	$(MAKE) --no-print-directory test-client
	$(MAKE) --no-print-directory e2e

test-python: setup kernel-today kernel-pythons daemon-pythons
	@logs=$$(mktemp -d); pids=""; for dir in $(DAEMON_PYTHON_DIRS); do \
	  [ -x $$dir/bin/python ] || continue; \
	  ( CRANE_SERVER_PYTHON=$(CURDIR)/$$dir/bin/python $(BIN)/python -m pytest -q -p no:cacheprovider \
	      $(SERVER_TESTS) -k "$(SERVER_TESTS_K)" >$$logs/$${dir##*/} 2>&1 ) & pids="$$pids $$!:$$dir"; \
	done; \
	echo "$(BIN)/python -m pytest -q -n $(PYTEST_JOBS) --dist worksteal --durations=25"; \
	$(BIN)/python -m pytest -q -n $(PYTEST_JOBS) --dist worksteal --durations=25; rc=$$?; \
	for p in $$pids; do dir=$${p#*:}; wait $${p%%:*} || rc=1; \
	  echo "== the language server's kernel-following tests with the server on $$($$dir/bin/python -V) ($$dir)"; \
	  cat $$logs/$${dir##*/}; \
	done; rm -rf $$logs; exit $$rc

# A second kernel environment on today's versions (IPython 9, numpy 2, pandas 3, TensorFlow/Keras 3, JAX, polars,
# xgboost, lightgbm; envs/kernel-today.txt): the tests run kernels in it beside the bench environment's IPython 8
# ones. Built once per version of the file under $(ENV_CACHE), outside the checkout, so CI runs reuse it.
ENV_CACHE ?= $(HOME)/.cache/crane-envs
KERNEL_TODAY := build/kernel-today

kernel-today:
	envs/make_env.sh envs/kernel-today.txt $(ENV_CACHE) $(KERNEL_TODAY)

# Kernels of every supported Python the machine has (envs/find_python.sh finds them): a small environment per
# version (envs/kernel-py3XX.txt: ipykernel, IPython 9, numpy, pandas, scikit-learn) in build/kernel-py3XX, built
# once per version of its file under $(ENV_CACHE) like kernel-today. A version with no interpreter here is left out
# (the tests that need it are skipped and say so).
KERNEL_PYTHONS ?= 3.11 3.12 3.13

kernel-pythons:
	@for v in $(KERNEL_PYTHONS); do n=$$(echo $$v | tr -d .); \
	  exe=$$(envs/find_python.sh $$v) || { echo "== no Python $$v on this machine: no build/kernel-py$$n"; continue; }; \
	  PYTHON=$$exe envs/make_env.sh envs/kernel-py$$n.txt $(ENV_CACHE) build/kernel-py$$n || exit 1; \
	done

# The language server on the other Pythons the machine has (Python 3.13 hid a private name of a thread class of
# ours once, tests/architecture/test_stdlib_subclasses.py): CRANE alone (no extras) in build/daemon-py3XX for each
# of SERVER_PYTHONS other than .venv's; `make test-python` runs SERVER_TESTS (live squiggles, busy, restart, a
# background run stopped when the user runs a cell) again with the server on each (CRANE_SERVER_PYTHON; pytest
# itself stays in .venv): the Pythons at once, each pass without xdist (its four tests on three workers set
# test_live's module fixtures up twice and started three workers: 20 vs 11 CPU-s a pass), started before the main
# suite and running beside it (they mostly wait on kernels and servers: ~21 s of wall after the suite before),
# each pass's output printed after the suite's, and every failure, the suite's or a pass's, fails the target.
SERVER_PYTHONS ?= 3.11 3.12 3.13
SERVER_TESTS ?= tests/lsp/test_live.py tests/lsp/test_kernel_lifecycle.py tests/lsp/test_background.py
SERVER_TESTS_K ?= live_squiggles or busy_kernel or death_then_restart or stops_on_edit
DAEMON_PYTHON_DIRS = $(foreach v,$(SERVER_PYTHONS),build/daemon-py$(subst .,,$(v)))

daemon-pythons: setup
	@own=$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	for v in $(SERVER_PYTHONS); do n=$$(echo $$v | tr -d .); \
	  rm -f build/daemon-py$$n; [ "$$v" != "$$own" ] || continue; \
	  exe=$$(envs/find_python.sh $$v) || { echo "== no Python $$v on this machine: the server is not tested on it"; continue; }; \
	  PYTHON=$$exe EXTRAS= envs/make_daemon_env.sh build/daemon-py$$n $(DAEMON_ENV_CACHE) || exit 1; \
	done

# The bench's kernels on the other Pythons the machine has: pyproject.toml's bench extra (the versions the bench was
# labelled with wherever they have a wheel for that Python, so a variant behaves as labelled: issue 44) in
# build/bench-py3XX, built once per pyproject.toml under $(DAEMON_ENV_CACHE) like .venv (whose own Python has it);
# `crane bench $(BENCH) --python build/bench-py313/bin/python`. A version with no interpreter here is left out.
BENCH_PYTHONS ?= 3.12 3.13

bench-pythons:
	@for v in $(BENCH_PYTHONS); do n=$$(echo $$v | tr -d .); \
	  exe=$$(envs/find_python.sh $$v) || { echo "== no Python $$v on this machine: no build/bench-py$$n"; continue; }; \
	  PYTHON=$$exe EXTRAS=bench envs/make_daemon_env.sh build/bench-py$$n $(DAEMON_ENV_CACHE) || exit 1; \
	done

# `crane bench` with kernels of that environment (dl-lite's README lists the versions it was labelled with).
bench-today: setup kernel-today
	$(BIN)/crane bench $(BENCH) --jobs $(JOBS) --python $(KERNEL_TODAY)/bin/python

# The client's node_modules, installed once per package-lock.json (`make test` needs them for the client's
# checks and again for the vsix the end-to-end test installs): in $(NPM_MODULES_CACHE), outside the checkout, and
# linked (envs/npm_modules.sh), so clean CI checkouts on the same machine reuse them.
NPM_STAMP := vscode-client/node_modules/.crane-installed
NPM_MODULES_CACHE ?= $(HOME)/.cache/crane-npm

$(NPM_STAMP): vscode-client/package-lock.json envs/npm_modules.sh
	envs/npm_modules.sh vscode-client $(NPM_MODULES_CACHE)
	touch $@

test-client: setup $(NPM_STAMP)
	cd vscode-client && npm run typecheck && npm test && CRANE_PYTHON=$(abspath $(BIN)/python) npm run test:wire

vsix: $(NPM_STAMP)
	cd vscode-client && npm run package

# The extension in a real VS Code (code-server) driven by headless Chromium, alone and beside Microsoft's
# Jupyter extension (../shared/vendor): installs code-server, Debian's chromium and playwright-core on first
# use (cached in build/e2e), screenshots in build/e2e/screenshots.
e2e: setup vsix
	e2e/run.sh

bench: setup
	$(BIN)/crane bench $(BENCH) --jobs $(JOBS)

# The accuracy floors on the whole of junobench-lite (static and auto, kernels left unchanged) in one auto run;
# exit 1 when one is missed. The suite runs the same checks on a sample of one case per library.
bench-floors: setup
	$(BIN)/python benchmarks/junobench_floors.py $(BENCH) --jobs $(JOBS)

clean:
	rm -rf $(VENV) build *.egg-info server/*.egg-info .pytest_cache .mypy_cache .ruff_cache
