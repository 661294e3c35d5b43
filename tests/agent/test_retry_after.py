"""A remote runner that lost the door tries again after a wait that doubles and is drawn at random
(issue 44: a door restart with thousands of sandboxes connected must not bring them all back in
the same instant, again at each doubling, into the gate's limit on connections without a pass)."""
import random

from agent_runner.remote import BACKOFF_FIRST_S, BACKOFF_MAX_S, retry_after


def test_the_wait_doubles_from_the_first_up_to_the_most():
    ceilings = [retry_after(n, draw=lambda: 1.0) for n in range(1, 8)]
    assert ceilings == [0.2, 0.4, 0.8, 1.6, 3.2, BACKOFF_MAX_S, BACKOFF_MAX_S]
    assert retry_after(1, draw=lambda: 0.0) == BACKOFF_FIRST_S / 2
    assert retry_after(10_000, draw=lambda: 0.5) <= BACKOFF_MAX_S


def test_a_thousand_sandboxes_that_lost_the_door_together_come_back_spread_out():
    rng = random.Random(44)
    for failures in (1, 3, 6):
        waits = sorted(retry_after(failures, draw=rng.random) for _ in range(1000))
        ceiling = min(BACKOFF_FIRST_S * 2 ** (failures - 1), BACKOFF_MAX_S)
        assert ceiling / 2 <= waits[0] and waits[-1] <= ceiling
        window = ceiling / 40  # a twentieth of the spread holds about 50 of them, never a tenth of all
        assert max(sum(1 for w in waits if start <= w < start + window) for start in waits) <= 100
