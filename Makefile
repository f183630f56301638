# llmperf: the two commands of the README's quick start.
#   make run   set up what is missing, build, profile the built-in default
#   make test  set up what is missing, run every test
SHELL := /bin/bash
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
# tch finds libtorch in the venv's torch wheel unless the user has their own LIBTORCH.
ifeq ($(LIBTORCH),)
export LIBTORCH_USE_PYTORCH := 1
endif
CARGO_FLAGS := --release --locked
BIN := target/release/llmperf

.PHONY: setup setup-run build run test fuzz clean
# What a run needs (libclang, Nsight, the venv with torch and transformers)...
setup-run:
	@bash scripts/setup.sh run

# ...and what only the tests need too (Chromium, Open MPI, Slurm and munge, actionlint).
setup:
	@bash scripts/setup.sh all

build: setup-run
	cargo build $(CARGO_FLAGS)

run: build
	$(BIN) profile

# `cargo test` builds the plugin's test harness, not libllmperf_torch.so itself:
# build first, so the tests load a plugin from the same sources. Tests that
# need the shared corpus (LLMPERF_CORPUS, else ../shared/fixtures) skip without
# it, and the last line says how many did.
test: setup
	cargo build $(CARGO_FLAGS)
	@rm -f target/tmp/skipped-tests.txt
	cargo test $(CARGO_FLAGS) --all-targets
	@bash scripts/skipped-tests.sh

# CI also runs this (.ci/run); needs rustup's nightly toolchain.
fuzz:
	bash scripts/fuzz.sh 60

clean:
	cargo clean
