# Two commands for a fresh machine (README): each sets up what is missing, then does its job.
#   make demo   install kvplan into .venv and run the main job on the bundled default
#   make test   install kvplan with its test extras, build the SGLang oracle venvs, run every test
#               (pytest-xdist: one worker per core, at most 4; a test file stays on one worker)
# Both are idempotent: the install is redone only when pyproject.toml changed (stamp files).

PYTHON ?= python3
VENV := .venv
DEMO_FLAGS := --model gpt-oss-120b --gpu H200 --tp 8 --page-size 64

.PHONY: demo test

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip

# the compiled radix core (setup.py) is rebuilt when its sources change
CORE_SRC := setup.py $(wildcard simulator/radix/_core_*.pyx simulator/radix/_core_*.pxd)

# the base install (what `kvplan run` needs)
$(VENV)/.installed-base: pyproject.toml $(CORE_SRC) | $(VENV)/bin/python
	$(VENV)/bin/pip install --quiet -e '.'
	touch $@

# the test install: pytest and friends, CPU torch + Triton (interpreter) for gpu_replay's tests
$(VENV)/.installed-test: pyproject.toml $(CORE_SRC) | $(VENV)/bin/python
	$(VENV)/bin/pip install --quiet -e '.[dev,gpu]'
	touch $@ $(VENV)/.installed-base

demo: $(VENV)/.installed-base
	$(VENV)/bin/kvplan run $(DEMO_FLAGS)

test: $(VENV)/.installed-test
	.ci/setup_oracle.sh
	KVPLAN_REQUIRE_ORACLE=1 $(VENV)/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile
