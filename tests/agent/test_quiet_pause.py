"""A runner with nudges sleeps until time itself can make work due, not a second at a time
(issue 43: a quiet sandbox wakes only for work and for the heartbeat stuck detection needs)."""
from agent_runner.poll_loop import IDLE_HEARTBEAT_S, freeze_ahead, quiet_pause, seconds_until


def test_a_quiet_runner_sleeps_until_its_next_heartbeat():
    assert quiet_pause(now=100.0, last_beat=100.0, due_in=None, freeze_in=None) == IDLE_HEARTBEAT_S
    assert quiet_pause(now=103.0, last_beat=100.0, due_in=None, freeze_in=None) == IDLE_HEARTBEAT_S - 3


def test_a_deferred_row_or_the_freeze_wakes_it_sooner_and_never_in_the_past():
    assert quiet_pause(now=100.0, last_beat=100.0, due_in=1.5, freeze_in=30.0) == 1.5
    assert quiet_pause(now=100.0, last_beat=100.0, due_in=None, freeze_in=0.25) == 0.25
    assert quiet_pause(now=100.0, last_beat=90.0, due_in=-3.0, freeze_in=None) == 0.005


def test_times_of_the_schema_are_read_and_an_unreadable_one_counts_as_now():
    assert seconds_until("2026-11-27T10:00:02.500Z", "2026-11-27T10:00:00.000Z") == 2.5
    assert seconds_until(None, "2026-11-27T10:00:00.000Z") is None
    assert seconds_until("soon", "2026-11-27T10:00:00.000Z") == 0.0


def test_a_freeze_counts_only_while_it_is_ahead():
    """A runner with no CLI to stop stays "due" for a freeze: that must not wake it every few ms."""
    assert freeze_ahead(idle_since=100.0, now=104.0, after_s=10.0, frozen=False) == 6.0
    assert freeze_ahead(idle_since=100.0, now=111.0, after_s=10.0, frozen=False) is None
    assert freeze_ahead(idle_since=100.0, now=104.0, after_s=10.0, frozen=True) is None
    assert freeze_ahead(idle_since=100.0, now=104.0, after_s=0.0, frozen=False) is None
    assert quiet_pause(now=111.0, last_beat=110.0, due_in=None,
                       freeze_in=freeze_ahead(100.0, 111.0, 10.0, False)) == IDLE_HEARTBEAT_S - 1
