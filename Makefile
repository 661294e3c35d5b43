# Two entry points: `make run` and `make test`. Everything else is plumbing for them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The stamp names the hash of the requirements, so an edited file makes the venv stale.
REQ_HASH := $(shell cat requirements.txt pyproject.toml | sha1sum | cut -c1-12)
DEV_HASH := $(shell cat requirements.txt pyproject.toml requirements-dev.txt | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(DEV_HASH)

.PHONY: run test venv dev-venv migrate image

$(STAMP):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $@

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements-dev.txt
	@touch $@

venv: $(STAMP)
dev-venv: $(DEV_STAMP)

migrate: $(STAMP)
	$(BIN)/flask --app app nanoclaw migrate

run: $(STAMP) migrate
	exec $(BIN)/python -m nanoclaw.supervise

test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

image: $(STAMP)
	$(BIN)/flask --app app nanoclaw image build
