"""Long work is allowed (issue 17): a turn that works for more than ten minutes through several
tool calls is answered once, with no retry notice (tests/long_turn_scenario.py, real SDK and CLI
in a real bubblewrap sandbox against the scripted fake model).

It takes over ten minutes, so it runs in a process of its own, started when the suite is collected
(conftest.py) and run beside the other tests; this test, moved to the end of the run, waits for
it and reports its outcome."""
from __future__ import annotations

import long_turn


def test_a_turn_longer_than_ten_minutes_is_answered_once():
    code, output = long_turn.result()
    assert code == 0, output[-6000:]
