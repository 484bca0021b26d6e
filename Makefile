# svc-nextgen: `make run` serves a demo catalogue on 127.0.0.1:7777, `make test` runs every test.
# Both install what they need on a fresh Debian 12 machine.

SHELL := /bin/bash
CARGO_TARGET_DIR ?= /var/tmp/svc-nextgen-target
export CARGO_TARGET_DIR
APT_PACKAGES := clang libclang-dev libnetcdf-dev libhdf5-dev pkg-config python3-venv netcdf-bin fuse3 unzip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VENV := .venv-test
VENV_ZARR2 := .venv-zarr2
RELEASE_SVCD := $(CARGO_TARGET_DIR)/release/svcd
DEBUG_SVCD := $(CARGO_TARGET_DIR)/debug/svcd

.PHONY: run test deps check rust-tests python-tests bench

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v cargo >/dev/null || { echo "cargo is missing: install Rust from rustup.rs"; exit 1; }

run: deps
	cargo build --release --bin svcd
	@if [ ! -d var/db ]; then \
		$(RELEASE_SVCD) demo-data var/demo && $(RELEASE_SVCD) --data-dir var index crawl var/demo; \
	fi
	@echo
	@echo "svcd serves ./var on http://127.0.0.1:7777 — try:"
	@echo "  curl -s http://127.0.0.1:7777/api/svc-nextgen/databrowser/overview"
	@echo "  curl -s 'http://127.0.0.1:7777/api/svc-nextgen/databrowser/data-search/svc/file?project=cmip6&variable=tas'"
	@echo "  curl -s 'http://127.0.0.1:7777/api/svc-nextgen/databrowser/metadata-search/cmip6/file?facets=source_id'"
	@echo
	exec $(RELEASE_SVCD) serve

$(VENV)/.installed: tests/python/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r tests/python/requirements.txt
	touch $@

$(VENV_ZARR2)/.installed: tests/python/requirements-zarr2.txt
	python3 -m venv $(VENV_ZARR2)
	$(VENV_ZARR2)/bin/pip install -q --upgrade pip
	$(VENV_ZARR2)/bin/pip install -q -r tests/python/requirements-zarr2.txt
	touch $@

check: deps
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# One feature set for every command (--workspace), so RocksDB's C++ is compiled once; the
# benchmark targets are compiled (not run) in the same feature set.
rust-tests: deps
	cargo test --workspace
	cargo test --workspace --benches --no-run

python-tests: deps $(VENV)/.installed $(VENV_ZARR2)/.installed
	cargo test --workspace --no-run
	SVCD_BIN=$(DEBUG_SVCD) ZARR2_PYTHON=$(CURDIR)/$(VENV_ZARR2)/bin/python $(VENV)/bin/pytest -q tests/python

test: check rust-tests python-tests

# The catalogue benchmark (10M records by default; BENCH_ARGS="--records 1000000" for a quick run).
bench: deps
	cargo bench --workspace --all-targets --no-run
	SVCD_BIN=$(RELEASE_SVCD) cargo bench --workspace --bench catalog -- $(BENCH_ARGS)

# The blob-manifest benchmark: resolve throughput against blobmap==0.5.0 (from .venv-test) and
# the partition of a 1M-object listing (BENCH_ARGS="--keys N --python-keys N --objects N").
.PHONY: bench-manifests
bench-manifests: deps $(VENV)/.installed
	BLOBMAP_PYTHON=$(CURDIR)/$(VENV)/bin/python cargo bench --workspace --bench manifests -- $(BENCH_ARGS)

# The STAC API benchmark: search page latency over HTTP on the catalogue benchmark's store
# (BENCH_ARGS="--dir /var/tmp/bench10m" reuses it; "--records N" for a smaller one).
.PHONY: bench-stac
bench-stac: deps
	cargo bench --workspace --all-targets --no-run
	SVCD_BIN=$(RELEASE_SVCD) cargo bench --workspace --bench stac -- $(BENCH_ARGS)

# The data-portal benchmark: conversion against xarray, first chunk after load, chunk
# throughput against nginx, side by side in one run (generated files are kept in
# /var/tmp/portal-bench; BENCH_ARGS="--size-mib 64 --samples 10 --duration 3" for a quick run).
# The mount and the cold tier: sequential and parallel reads through the mount against direct
# reads and HTTP, restore against cp, open_zarr of an archived store (root: it mounts and drops
# caches; BENCH_ARGS="--size-mib 256" for a quick run).
.PHONY: bench-tier
bench-tier: deps $(VENV)/.installed
	cargo build --release --workspace
	$(VENV)/bin/python bench/tier.py --svcd $(RELEASE_SVCD) $(BENCH_ARGS)

.PHONY: bench-aggregated
bench-aggregated: deps $(VENV)/.installed
	cargo build --release --workspace
	$(VENV)/bin/python bench/aggregated.py --svcd $(RELEASE_SVCD) $(BENCH_ARGS)

.PHONY: bench-portal
bench-portal: deps $(VENV)/.installed
	cargo build --workspace --release
	$(VENV)/bin/python bench/portal.py --svcd $(RELEASE_SVCD) $(BENCH_ARGS)
