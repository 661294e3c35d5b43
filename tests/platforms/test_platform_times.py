"""Every time a platform sends is untrusted (issue 60, item 1): a sender's client sets Signal's, any
homeserver Matrix's. The pure rules: a time past its reference by more than five minutes, or a week before
it, is the reference; nothing a platform can send makes the host raise. And the hand-over rule a listener
follows: an event a running web program refuses five times in a row is set aside, an outage never is."""
from __future__ import annotations

import time
from datetime import datetime

from hypothesis import given, strategies as st

from nanoclaw.channels import handoff
from nanoclaw.channels.events import AHEAD_S, BEHIND_S, iso_utc, said_at, trusted_time
from nanoclaw.platforms.matrix import schema as mx
from nanoclaw.platforms.matrix.adapter import sent_at as matrix_sent_at
from nanoclaw.platforms.signal.adapter import sent_at as signal_sent_at

NOW = 1_800_000_000.0
EDGES = st.sampled_from([0, -1, -2**63, 2**53, 2**53 - 1, 2**62, 2**63, 2**64, 10**30, 1e308, -1e308, 0.5,
                         float("nan"), float("inf"), "12", "1e400", "soon", "", None, True, [], {}])
ANY = EDGES | st.integers() | st.floats() | st.text(max_size=12)


def parsed(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_a_time_within_its_window_is_kept():
    assert trusted_time(NOW - 3600, now=NOW) == NOW - 3600
    assert trusted_time(NOW + AHEAD_S, now=NOW) == NOW + AHEAD_S
    assert trusted_time(NOW - BEHIND_S, now=NOW) == NOW - BEHIND_S


def test_a_time_outside_its_window_is_the_reference():
    assert trusted_time(NOW + AHEAD_S + 1, now=NOW) == NOW
    assert trusted_time(NOW - BEHIND_S - 1, now=NOW) == NOW
    assert trusted_time(2**62 / 1000, now=NOW) == NOW
    # a backlog the server received two days ago keeps its own time, held to the server's
    received = NOW - 2 * 86400
    assert trusted_time(received - 5, received, now=NOW) == received - 5
    assert trusted_time(NOW, received, now=NOW) == received  # "sent" two days after the server had it


def test_a_reference_from_the_future_is_not_believed_either():
    assert trusted_time(NOW + 86400, NOW + 86400, now=NOW) == NOW


@given(claimed=ANY, reference=ANY)
def test_nothing_a_platform_sends_makes_a_time_outside_the_window(claimed, reference):
    at = trusted_time(claimed, reference, now=NOW)
    assert 0 < at <= NOW + AHEAD_S  # a positive epoch, never past the window
    iso_utc(at)


@given(value=ANY)
def test_iso_utc_never_raises(value):
    assert iso_utc(value).endswith("Z")


@given(claimed=ANY, received=ANY)
def test_signal_times_never_raise_and_stay_in_the_window(claimed, received):
    ms = claimed if isinstance(claimed, int) and not isinstance(claimed, bool) else None
    server = received if isinstance(received, int) and not isinstance(received, bool) else None
    at = parsed(signal_sent_at(ms, server))
    assert at <= datetime.now().timestamp() + 2 * AHEAD_S


def test_signal_holds_the_senders_clock_to_the_servers():
    server = int(time.time() - 60) * 1000  # the server had it a minute ago
    assert parsed(signal_sent_at(2**62, server)) == server / 1000
    assert parsed(signal_sent_at(server - 1000, server)) == server / 1000 - 1


def test_matrix_holds_the_origin_server_to_the_age_our_homeserver_gives():
    event = mx.Event(type="m.room.message", event_id="$e", sender="@m:evil.example", origin_server_ts=2**53 - 1,
                     unsigned=mx.Unsigned(age=1500))
    assert parsed(matrix_sent_at(event, now=NOW)) == NOW - 1.5
    honest = mx.Event(type="m.room.message", event_id="$f", sender="@a:example.org",
                      origin_server_ts=int(NOW * 1000) - 2000, unsigned=mx.Unsigned(age=2100))
    assert parsed(matrix_sent_at(honest, now=NOW)) == NOW - 2


def test_said_at_reads_text_and_numbers_alike():
    assert said_at("1700000000.5", 1700000001) == "2023-11-14T22:13:20.500Z"


# --- the listener's hand-over --------------------------------------------------------------------

def run_offer(statuses, keep=True):
    answers, waits, kept = iter(statuses), [], []
    outcome = handoff.offer(lambda: (next(answers), "boom"), lambda why: kept.append(why) or keep, waits.append,
                            lambda: len(waits) > 50, lambda n: float(n))
    return outcome, len(waits), kept


def test_five_refusals_in_a_row_set_the_event_aside():
    outcome, waited, kept = run_offer([500, 500, 422, 500, 500])
    assert outcome == "set aside" and waited == 4
    assert kept == ["5 times in a row (last: HTTP 500: boom)"]


def test_an_outage_between_refusals_starts_the_count_again():
    outcome, waited, _ = run_offer([500, 500, 500, 500, None, 500, 500, 500, 500, 200])
    assert outcome == "done" and waited == 9


def test_outages_and_a_key_mismatch_are_never_set_aside():
    outcome, waited, kept = run_offer([None, 503, 401, 403] * 10 + [200])
    assert outcome == "done" and waited == 40 and kept == []


def test_an_event_that_could_not_be_kept_aside_is_offered_again():
    outcome, _, kept = run_offer([500] * 6 + [200], keep=False)
    assert outcome == "done" and len(kept) == 2


def test_answers_as_the_listener_reads_them():
    assert [handoff.answer_of(s) for s in (None, 200, 204, 401, 403, 503, 500, 502, 400, 404, 413)] == \
        ["outage", "done", "done", "outage", "outage", "outage", "refused", "refused", "refused", "refused", "refused"]
