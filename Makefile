# Quick start:  make demo   |   make test
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# `pip install -e .` compiles the native CPU kernels (setup.py; needs a C++ compiler at install
# time only): a change to these reinstalls
BUILD_INPUTS := pyproject.toml setup.py gsprestore/native/kernels.cpp gsprestore/native/kernels_avx2.cpp

.PHONY: demo test test-fast lint install install-test native clean

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	touch $@

$(VENV)/.installed: $(VENV)/.torch $(BUILD_INPUTS)
	$(PIP) install -q -e .
	touch $@

# one build for both: the test install also stands for the plain one. It also installs the lab
# (lab/: measurement, release and research tooling, the distribution gsprestore-lab; never shipped),
# whose code the tests and benchmarks/ import as gsprestore_lab
$(VENV)/.installed-test: $(VENV)/.torch $(BUILD_INPUTS) lab/pyproject.toml
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q -e lab/
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# rebuild the kernels in place after editing kernels.cpp
native: $(VENV)/.torch
	$(PIP) install -q --no-deps -e .

demo: $(VENV)/.installed
	$(VENV)/bin/gsprestore demo

# on every core (pytest-xdist; each worker's PyTorch on one thread, tests/conftest.py; the slow
# tests are collected first, though work stealing may still leave one to run last)
test: $(VENV)/.installed-test
	$(PY) -m pytest -n auto --dist worksteal

# ruff, and mypy on the core numerical layers, with their config in pyproject.toml (the test
# install brings both; .ci/run runs this first)
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# the quick lane: everything but the tests marked slow (the GPU job's CPU rehearsal, the wheel build;
# 82 s on this project's 2 cores, quiet, 2026-11-28)
test-fast: $(VENV)/.installed-test
	$(PY) -m pytest -n auto --dist worksteal -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info lab/build lab/*.egg-info gsprestore/native/*.so
