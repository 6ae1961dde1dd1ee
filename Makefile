# Homework router: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
# VENV=/path/to/venv: a venv made elsewhere (a second worktree of the repository shares the first's).
VENV ?= .venv
PY := $(VENV)/bin/python
HOMENET := $(VENV)/bin/homenet
N ?= 10

.PHONY: deps demo down test lint unit e2e bench test-repeat agent-dist image image-lock image-test clean

# deps also builds hwdb, the web UI and the end-host agent: the emulated home runs the real things.
deps:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory -s -C hwdb build
	@$(MAKE) --no-print-directory -s -C endhost-agent build
	@$(MAKE) --no-print-directory -s -C webui deps build PYTHON=$(abspath $(PY))

demo: deps
	@scripts/demo.sh

down:
	@if [[ -x $(HOMENET) ]]; then $(HOMENET) down; fi

test: deps lint unit e2e image-test

# lint-imports checks the controller's layers (pyproject.toml's contracts) on this tree's package,
# whichever tree the venv installed it from.
lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy controller/homework_controller homenet/homenet deploy/homework_deploy
	PYTHONPATH=controller $(VENV)/bin/lint-imports
	$(MAKE) -C hwdb lint PYTHON=$(abspath $(PY))
	$(MAKE) -C webui lint PYTHON=$(abspath $(PY))
	$(MAKE) -C endhost-agent lint
	$(MAKE) -C openwrt-feed lint PYTHON=$(abspath $(PY))
	$(MAKE) -C isp-flowvisor lint PY=$(abspath $(PY))
	$(MAKE) -C image lint PYTHON=$(abspath $(PY))

unit:
	$(PY) -m pytest -q controller/tests
	$(PY) -m pytest -q bench
	$(MAKE) -C hwdb test PYTHON=$(abspath $(PY))
	$(MAKE) -C webui test-py test-js PYTHON=$(abspath $(PY))
	$(MAKE) -C endhost-agent test HWDB_BIN=$(CURDIR)/hwdb/target/release/hwdb
	$(MAKE) -C openwrt-feed test PYTHON=$(abspath $(PY))
	$(MAKE) -C isp-flowvisor test PY=$(abspath $(PY))
	$(MAKE) -C image test-unit PYTHON=$(abspath $(PY))

# The end-to-end tests bring the emulated home up and down themselves: first `make demo` and
# `make down` as a newcomer runs them (tests/demo), then the web UI's own browser tests against its
# test stack (the controller's core on the fake switch), then tests/e2e (one home for the whole
# session), which runs the same browser flows again against the real home.
e2e:
	$(PY) -m pytest -q tests/demo
	$(MAKE) -C webui test-e2e PYTHON=$(abspath $(PY))
	$(PY) -m pytest -q tests/e2e

# make test, N times in a row from a fresh clone of HEAD (HOG=1: with a busy loop on one core;
# SLOW=1: the image's boot stories on one core beside a busy loop, as on a slow machine).
test-repeat:
	scripts/test-repeat.sh $(N)

# make bench QUICK=1: the same benchmarks, small (a check before submitting a change, ~15 minutes).
# bench/run.py runs every benchmark (the components' own too), stamps each result it wrote with the
# commit, date, machine and load average, and regenerates docs/PERFORMANCE.md.
bench: deps
	$(PY) bench/run.py $(if $(QUICK),--quick)

# The firmware image (build/homework-router-x86_64.img, its update bundle), compressed small.
image: deps
	$(MAKE) -C image image PYTHON=$(abspath $(PY))

image-lock:
	$(MAKE) -C image image-lock PYTHON=$(abspath $(PY))

# make test boots every commit: the same image with its root compressed quickly (zstd, not xz; the
# root is also compressed as shipped once, to hold the shipped image to its size goal),
# booted in qemu with UEFI and, side by side, with legacy BIOS then with simulated radios
# (software emulation where KVM does not work: ~20 minutes, image/README.md).
image-test: deps
	$(MAKE) -C image image IMAGE_FLAGS="--fast --prove-size" PYTHON=$(abspath $(PY))
	$(MAKE) -C image image-test PYTHON=$(abspath $(PY))

# The end-host agent's static binaries for linux/darwin/windows on amd64/arm64 (endhost-agent/dist/).
agent-dist:
	$(MAKE) -C endhost-agent dist

clean: down
	rm -rf .venv .pytest_cache
