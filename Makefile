# Homework router: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
HOMENET := .venv/bin/homenet
N ?= 10

.PHONY: deps demo down test lint unit e2e bench test-repeat agent-dist clean

# deps also builds hwdb and the web UI: the emulated home runs the real things.
deps:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory -s -C hwdb build
	@$(MAKE) --no-print-directory -s -C webui deps build PYTHON=$(CURDIR)/$(PY)

demo: deps
	@scripts/demo.sh

down:
	@if [[ -x $(HOMENET) ]]; then $(HOMENET) down; fi

test: deps lint unit e2e

lint:
	.venv/bin/ruff check .
	.venv/bin/mypy controller/homework_controller tests/homenet/homenet
	$(MAKE) -C hwdb lint PYTHON=$(CURDIR)/$(PY)
	$(MAKE) -C webui lint PYTHON=$(CURDIR)/$(PY)
	$(MAKE) -C endhost-agent lint

unit:
	$(PY) -m pytest -q controller/tests
	$(MAKE) -C hwdb test PYTHON=$(CURDIR)/$(PY)
	$(MAKE) -C webui test-py test-js PYTHON=$(CURDIR)/$(PY)
	$(MAKE) -C endhost-agent test HWDB_BIN=$(CURDIR)/hwdb/target/release/hwdb

# The end-to-end tests bring the emulated home up and down themselves; the web UI's own
# browser tests run first, against its fake controller.
e2e:
	$(MAKE) -C webui test-e2e PYTHON=$(CURDIR)/$(PY)
	$(PY) -m pytest -q tests/e2e

# make test, N times in a row from a fresh clone of HEAD (HOG=1: with a busy loop on one core).
test-repeat:
	scripts/test-repeat.sh $(N)

bench: deps
	$(PY) bench/run.py
	$(MAKE) -C endhost-agent bench

# The end-host agent's static binaries for linux/darwin/windows on amd64/arm64 (endhost-agent/dist/).
agent-dist:
	$(MAKE) -C endhost-agent dist

clean: down
	rm -rf .venv .pytest_cache
