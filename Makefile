# Homework router: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
HOMENET := tests/homenet/homenet
export PYTHONPATH := $(CURDIR)/controller

.PHONY: deps demo down test unit e2e bench clean

# deps also builds hwdb and the web UI: the emulated home runs the real things.
deps:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory -s -C hwdb build
	@$(MAKE) --no-print-directory -s -C webui deps build PYTHON=$(CURDIR)/$(PY)

demo: deps
	@scripts/demo.sh

down:
	@$(HOMENET) down

test: deps unit e2e

unit:
	$(PY) -m pytest -q controller/tests
	$(MAKE) -C hwdb test PYTHON=$(CURDIR)/$(PY)
	$(MAKE) -C webui test-py test-js PYTHON=$(CURDIR)/$(PY)

# The end-to-end tests bring the emulated home up and down themselves; the web UI's own
# browser tests run first, against its fake controller.
e2e:
	$(MAKE) -C webui test-e2e PYTHON=$(CURDIR)/$(PY)
	$(PY) -m pytest -q tests/e2e

bench: deps
	$(PY) bench/run.py

clean: down
	rm -rf .venv .pytest_cache
