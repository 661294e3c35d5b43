"""The sweep's pure decision, rule by rule."""
import pytest

from nanoclaw.sweep import (CEILING_S, CLAIM_TOLERANCE_S, IDLE_S, MAX_TRIES, Claim, Decision, Reset,
                            SessionView, decide)

NOW = 1_000_000.0


def test_quiet_running_session_is_left_alone():
    assert decide(SessionView(running=True, heartbeat_at=NOW - 5, last_work_at=NOW - 60), NOW) == Decision()


def test_not_running_with_claims_resets_with_backoff_and_wakes():
    view = SessionView(running=False, claims=(Claim("m1", NOW - 10, 0), Claim("m2", NOW - 10, 2)))
    d = decide(view, NOW)
    assert d.stop is None and d.wake
    assert d.resets == (Reset("m1", 1, NOW + 5), Reset("m2", 3, NOW + 20))


def test_not_running_with_due_work_wakes():
    assert decide(SessionView(running=False, has_due_work=True), NOW) == Decision(wake=True)
    assert decide(SessionView(running=False), NOW) == Decision()


def test_fifth_try_fails():
    d = decide(SessionView(running=False, claims=(Claim("m", NOW, MAX_TRIES - 1),)), NOW)
    assert d.failed == ("m",) and d.resets == ()


def test_stale_heartbeat_stops_and_resets():
    view = SessionView(running=True, heartbeat_at=NOW - CEILING_S - 1, claims=(Claim("m", NOW - 5, 0),))
    d = decide(view, NOW)
    assert d.stop == "heartbeat_stale" and [r.message_id for r in d.resets] == ["m"]


def test_long_bash_extends_the_ceiling():
    view = SessionView(running=True, heartbeat_at=NOW - CEILING_S - 100, current_tool="Bash",
                       tool_timeout_ms=(CEILING_S + 600) * 1000)
    assert decide(view, NOW).stop is None


def test_claim_silent_past_tolerance_is_stuck():
    claim = Claim("m", NOW - CLAIM_TOLERANCE_S - 1, 1)
    d = decide(SessionView(running=True, heartbeat_at=claim.claimed_at - 1, claims=(claim,)), NOW)
    assert d.stop == "claim_stuck" and d.resets == (Reset("m", 2, NOW + 10),)


def test_claim_with_heartbeat_since_is_alive():
    claim = Claim("m", NOW - CLAIM_TOLERANCE_S * 5, 0)
    assert decide(SessionView(running=True, heartbeat_at=NOW - 1, claims=(claim,)), NOW).stop is None


@pytest.mark.parametrize("timeout_ms, stuck", [(120_000, False), (30_000, True)])
def test_bash_timeout_sets_claim_tolerance(timeout_ms, stuck):
    claim = Claim("m", NOW - 90, 0)
    view = SessionView(running=True, heartbeat_at=claim.claimed_at, claims=(claim,), current_tool="Bash",
                       tool_timeout_ms=timeout_ms)
    assert (decide(view, NOW).stop == "claim_stuck") is stuck


def test_idle_sandbox_is_stopped_but_not_with_work():
    assert decide(SessionView(running=True, heartbeat_at=NOW - 10, last_work_at=NOW - IDLE_S - 1), NOW).stop == "idle"
    busy = SessionView(running=True, heartbeat_at=NOW - 10, last_work_at=NOW - IDLE_S - 1, has_due_work=True)
    assert decide(busy, NOW).stop is None
