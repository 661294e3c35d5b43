# Two entry points: `make run` and `make test`; `make check` is the quick loop while editing (lint, the
# pure and file-only tests, the layout). Everything else is plumbing for them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The stamp names the hash of the requirements, so an edited file makes the venv stale.
REQ_HASH := $(shell cat requirements.txt pyproject.toml | sha1sum | cut -c1-12)
DEV_HASH := $(shell cat requirements.txt pyproject.toml requirements-dev.txt | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(DEV_HASH)

.PHONY: run test check venv dev-venv migrate image

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

# The suite starts hundreds of Python programs from this tree (commands, services, sandboxes' runners):
# its bytecode is written once here, also where PYTHONDONTWRITEBYTECODE is set (~0.18 s a command).
test: $(DEV_STAMP)
	$(BIN)/python -m compileall -q -j 0 nanoclaw container/agent_runner tests migrations
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Tests that need no sandbox, service, browser or server: decisions, parsers, files (tests/test_layout.py
# checks that each is still there).
CHECK_TESTS := tests/agent/test_formatter.py \
	tests/internet/test_browser_where.py \
	tests/internet/test_browser_proxy.py \
	tests/agent/test_answer_watch.py \
	tests/agent/test_tool_server.py \
	tests/agent/test_retry_after.py \
	tests/inbound/test_decide.py \
	tests/platforms/test_shapes.py \
	tests/inbound/test_full_disk.py \
	tests/inbound/test_media_inbound.py \
	tests/inbound/test_sticky.py \
	tests/lifecycle/test_housekeeping_due.py \
	tests/lifecycle/test_image_prune.py \
	tests/lifecycle/test_records.py \
	tests/lifecycle/test_scheduler_stop.py \
	tests/lifecycle/test_startup_settle.py \
	tests/lifecycle/test_sweep_decide.py \
	tests/lifecycle/test_sweep_effects.py \
	tests/memory/test_memory.py \
	tests/outbound/test_delivery.py \
	tests/outbound/test_pictures_out.py \
	tests/outbound/test_progress.py \
	tests/outbound/test_text_split.py \
	tests/outbound/test_typing.py \
	tests/platforms/test_platforms.py \
	tests/platforms/test_webhook_properties.py \
	tests/remote/test_mirror.py \
	tests/remote/test_passes.py \
	tests/remote/test_trees.py \
	tests/sandboxes/test_mounts.py \
	tests/sandboxes/test_runner_code.py \
	tests/sandboxes/test_sandbox_queue.py \
	tests/sandboxes/test_turn_cap.py \
	tests/sessions/test_session_layout.py \
	tests/sessions/test_session_writer.py \
	tests/tasks/test_recurrence.py \
	tests/test_config.py \
	tests/test_db.py \
	tests/test_docs.py \
	tests/test_layout.py \
	tests/test_host_changes.py \
	tests/test_lean.py \
	tests/test_migrations.py \
	tests/test_security.py \
	tests/usage/test_usage.py \
	tests/internet/test_addresses.py \
	tests/internet/test_url_secrets_and_envelope.py \
	tests/internet/test_access.py \
	tests/web/test_health.py \
	tests/web/test_metrics.py

check: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -p no:cacheprovider $(CHECK_TESTS)

image: $(STAMP)
	$(BIN)/flask --app app nanoclaw image build
