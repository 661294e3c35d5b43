"""No fixed cap on a turn (issue 17): the runner allows long work unless the operator sets
NANOCLAW_MAX_TURN_MINUTES, which reaches the sandbox as NANOCLAW_TURN_TIMEOUT_S. (The turn that
really works for over ten minutes: tests/lifecycle/test_long_turn.py.)"""
from __future__ import annotations

import sys

import pytest

from nanoclaw.config import PROJECT_ROOT, SettingsError
from nanoclaw.sandboxes.manager import build_spec

sys.path.insert(0, str(PROJECT_ROOT / "container"))
from agent_runner.config import RunnerConfig  # noqa: E402


def test_the_runner_has_no_cap_unless_told():
    assert RunnerConfig.from_env({}).turn_timeout_s is None
    assert RunnerConfig.from_env({"NANOCLAW_TURN_TIMEOUT_S": "900"}).turn_timeout_s == 900.0
    assert RunnerConfig.from_env({"NANOCLAW_TURN_TIMEOUT_S": "0"}).turn_timeout_s is None


def test_the_operator_sets_a_cap_in_minutes(make_settings):
    assert "NANOCLAW_TURN_TIMEOUT_S" not in build_spec(make_settings(), "andy", "s1").env
    capped = build_spec(make_settings(NANOCLAW_MAX_TURN_MINUTES="15"), "andy", "s1")
    assert capped.env["NANOCLAW_TURN_TIMEOUT_S"] == "900"
    with pytest.raises(SettingsError, match="NANOCLAW_MAX_TURN_MINUTES"):
        make_settings(NANOCLAW_MAX_TURN_MINUTES="soon")
