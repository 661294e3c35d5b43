"""The sweep's pure decision, rule by rule."""
import pytest

from nanoclaw.lifecycle.sweep import (CEILING_S, CLAIM_TOLERANCE_S, IDLE_S, MAX_TRIES, Claim, Decision, Reset,
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


def test_a_failed_turn_is_retried_without_a_stop():
    view = SessionView(running=True, heartbeat_at=NOW - 1, failures=(Claim("m", NOW - 2, 1),))
    assert decide(view, NOW) == Decision(resets=(Reset("m", 2, NOW + 10),))
    stopped = SessionView(running=False, failures=(Claim("m", NOW - 2, 0),))
    assert decide(stopped, NOW) == Decision(resets=(Reset("m", 1, NOW + 5),), wake=True)


def test_idle_threshold_is_the_callers():
    view = SessionView(running=True, heartbeat_at=NOW - 1, last_work_at=NOW - 61)
    assert decide(view, NOW).stop is None
    assert decide(view, NOW, idle_s=60).stop == "idle"


# An exhaustive grid over the inputs: the invariants hold in every combination.
AGES = (None, 0, 30, CLAIM_TOLERANCE_S + 1, CEILING_S - 1, CEILING_S + 1, 3 * CEILING_S)


@pytest.mark.parametrize("running", [True, False])
@pytest.mark.parametrize("heartbeat_age", AGES)
@pytest.mark.parametrize("claim_age", [None, 0, CLAIM_TOLERANCE_S - 1, CLAIM_TOLERANCE_S + 1, CEILING_S + 1])
@pytest.mark.parametrize("tries", [0, MAX_TRIES - 2, MAX_TRIES - 1])
@pytest.mark.parametrize("bash_ms", [None, 10_000, (CEILING_S + 3600) * 1000])
@pytest.mark.parametrize("due", [False, True])
def test_invariants(running, heartbeat_age, claim_age, tries, bash_ms, due):
    claims = () if claim_age is None else (Claim("m", NOW - claim_age, tries),)
    view = SessionView(running=running, heartbeat_at=None if heartbeat_age is None else NOW - heartbeat_age,
                       claims=claims, current_tool="Bash" if bash_ms else None, tool_timeout_ms=bash_ms,
                       last_work_at=NOW - 10, has_due_work=due)
    d = decide(view, NOW)
    released = {r.message_id for r in d.resets} | set(d.failed)
    # a claim is never both retried and failed, and never dropped silently when it is released
    assert not ({r.message_id for r in d.resets} & set(d.failed))
    assert released in (set(), {c.message_id for c in claims})
    for r in d.resets:  # one more try, later by 5 s·2^tries
        assert r.tries == tries + 1 and r.process_after == NOW + 5 * 2 ** tries
    assert (set(d.failed) == {"m"}) == (bool(released) and tries + 1 >= MAX_TRIES)
    if not running:
        assert d.stop is None and released == {c.message_id for c in claims}
        assert d.wake == (bool(d.resets) or due)
    else:
        assert not d.wake
        if d.stop:  # a stop always gives the claims back
            assert released == {c.message_id for c in claims}
        fresh_beat = heartbeat_age is not None and heartbeat_age <= CEILING_S
        beat_after_claim = claims and heartbeat_age is not None and heartbeat_age < claim_age
        if fresh_beat and (not claims or beat_after_claim):
            assert d.stop is None  # alive: a heartbeat since the claim and within the ceiling
        if d.stop == "idle":
            assert not claims and not due
