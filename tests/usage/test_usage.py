"""Usage read from real response shapes (the Messages API's JSON and SSE, cache fields, an error in
the middle of a stream), priced by the table, summed exactly; budgets decided on the sums; the day
is the owner's, not UTC's."""
from __future__ import annotations

import gzip
import json
import zlib
from datetime import date, datetime, timezone

import pytest
from hypothesis import given, strategies as st

from nanoclaw.usage import budgets, prices
from nanoclaw.usage.ledger import Spent, today
from nanoclaw.usage.meter import Meter
from nanoclaw.usage.prices import Price, Tokens, micro_usd

TABLE = prices.load()


def sse(*events) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


START = {"type": "message_start", "message": {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 1200,
                                   "cache_read_input_tokens": 30000, "output_tokens": 1}}}
DELTA = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 503}}


@pytest.mark.parametrize("cut", [1, 7, 64, 10_000])
def test_a_stream_is_read_in_whatever_pieces_it_arrives(cut):
    body = sse(START, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
               {"type": "ping"}, DELTA, {"type": "message_stop"})
    meter = Meter("text/event-stream; charset=utf-8")
    for i in range(0, len(body), cut):
        meter.feed(body[i:i + cut])
    assert meter.result() == ("claude-sonnet-4-5-20250929", Tokens(2095, 503, 1200, 30000))


@given(cuts=st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=30),
       coding=st.sampled_from(["gzip", "x-gzip", "deflate", "raw-deflate"]))
def test_a_compressed_stream_is_read_as_the_plain_one_in_any_pieces(cuts, coding):
    """The answer as the caller gets it, compressed as a provider may send it, split anywhere."""
    plain = sse(START, {"type": "ping"}, DELTA, {"type": "message_stop"})
    if coding in ("gzip", "x-gzip"):
        packed = gzip.compress(plain)
    else:
        packer = zlib.compressobj(wbits=zlib.MAX_WBITS if coding == "deflate" else -zlib.MAX_WBITS)
        packed = packer.compress(plain) + packer.flush()
    meter = Meter("text/event-stream", "deflate" if coding == "raw-deflate" else coding)
    at = 0
    for cut in cuts * (len(packed) // sum(cuts) + 1):
        meter.feed(packed[at:at + cut])
        at += cut
        if at >= len(packed):
            break
    assert meter.result() == ("claude-sonnet-4-5-20250929", Tokens(2095, 503, 1200, 30000)) and meter.reported


def test_an_encoding_the_meter_cannot_read_reports_nothing_and_says_so():
    for coding, data in (("br", b"\x1b\x00\x00"), ("gzip, gzip", gzip.compress(gzip.compress(sse(START)))),
                         ("gzip", b"not gzip at all")):
        meter = Meter("text/event-stream", coding)
        meter.feed(data)
        assert meter.result() == (None, Tokens()) and not meter.reported and meter.unreadable


def test_an_error_mid_stream_keeps_what_was_reported():
    meter = Meter("text/event-stream")
    meter.feed(sse(START, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    assert meter.result() == ("claude-sonnet-4-5-20250929", Tokens(2095, 1, 1200, 30000))
    assert meter.error == "overloaded_error"


def test_a_json_answer_and_crlf_events():
    meter = Meter("application/json")
    meter.feed(json.dumps({"type": "message", "model": "claude-haiku-4-5", "content": [],
                           "usage": {"input_tokens": 10, "output_tokens": 20}}).encode())
    assert meter.result() == ("claude-haiku-4-5", Tokens(10, 20))
    crlf = Meter("text/event-stream")
    crlf.feed(sse(START).replace(b"\n", b"\r\n"))
    assert crlf.result()[1].input == 2095


def test_the_providers_own_tools_are_counted_and_priced_per_use(tmp_path):
    """Issue 60, item 4: a call whose agent was allowed web_search reports the searches the provider ran
    (`usage.server_tool_use`, in the JSON answer and in the stream's last `message_delta`); each is priced
    at the table's rate ($10 per 1,000 searches), and an owner's file may set its own."""
    usage = {"input_tokens": 100, "output_tokens": 20, "server_tool_use": {"web_search_requests": 3,
                                                                           "web_fetch_requests": 2}}
    meter = Meter("application/json")
    meter.feed(json.dumps({"type": "message", "model": "claude-haiku-4-5", "usage": usage}).encode())
    assert meter.result() == ("claude-haiku-4-5", Tokens(100, 20, web_search=3, web_fetch=2))
    stream = Meter("text/event-stream")
    stream.feed(sse(START) + sse({"type": "message_delta", "delta": {}, "usage": {
        "output_tokens": 9, "server_tool_use": {"web_search_requests": 4}}}))
    assert stream.result()[1] == Tokens(2095, 9, 1200, 30000, web_search=4)
    haiku = prices.price_of("claude-haiku-4-5", TABLE)
    assert micro_usd(Tokens(100, 20, web_search=3, web_fetch=2), haiku) == 100 * 1 + 20 * 5 + 3 * 10_000
    own = tmp_path / "prices.json"
    own.write_text(json.dumps({"server_tool_use": {"web_search_requests": 25.0}}))
    assert micro_usd(Tokens(web_search=2), prices.price_of("claude-haiku-4-5", prices.load(own))) == 50_000
    assert micro_usd(Tokens(web_search=2), prices.price_for("m", "m", {})) == 0  # a free upstream


def test_prices_follow_the_table_and_an_unknown_model_is_never_free():
    sonnet = prices.price_of("claude-sonnet-4-5-20250929", TABLE)
    assert sonnet.name == "claude-sonnet-4-5" and sonnet.known
    # 2095 in at $3, 503 out at $15, 1200 cache writes at $3.75, 30000 cache reads at $0.30, per million
    assert micro_usd(Tokens(2095, 503, 1200, 30000), sonnet) == 6285 + 7545 + 4500 + 9000
    assert prices.price_of("claude-opus-4-1-2025", TABLE).rates["output"] == 75.0
    unknown = prices.price_of("claude-fake-1", TABLE)
    assert not unknown.known and unknown.rates == max(TABLE.values(), key=lambda r: r["output"])
    assert unknown.rates["web_search"] == 10_000  # $10 per 1,000, kept per million like the tokens


def test_the_owners_file_overrides_an_entry(tmp_path):
    own = tmp_path / "prices.json"
    own.write_text(json.dumps({"models": {"claude-sonnet-4-5": {"input": 1, "output": 2, "cache_write": 0,
                                                                "cache_read": 0}}}))
    assert prices.price_of("claude-sonnet-4-5-x", prices.load(own)).rates["output"] == 2
    own.write_text("{not json")
    assert prices.price_of("claude-sonnet-4-5-x", prices.load(own)).rates["output"] == 15.0


counts = st.integers(0, 10**9)


@given(st.lists(st.tuples(counts, counts, counts, counts), max_size=20))
def test_the_sum_of_the_costs_is_the_cost_of_the_sum(calls):
    price = Price("p", {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3}, True)
    tokens = [Tokens(*c) for c in calls]
    total = sum(micro_usd(t, price) for t in tokens)
    together = sum(tokens, Tokens())
    assert abs(total - micro_usd(together, price)) <= len(tokens)  # each call rounds to a micro-dollar at most
    assert all(micro_usd(t, price) >= 0 for t in tokens)


def test_a_budget_refuses_once_spent_and_warns_at_80_percent():
    limits = budgets.Limits(daily_micro=5_000_000, monthly_micro=50_000_000)
    day = date(2026, 11, 26)
    assert not budgets.verdict(limits, Spent(4_999_999, 10_000_000), day).blocked
    v = budgets.verdict(limits, Spent(5_000_000, 10_000_000), day)
    assert v.blocked and v.period == "day:2026-11-26"
    assert budgets.verdict(limits, Spent(0, 50_000_000), day).period == "month:2026-11"
    assert budgets.warnings(limits, Spent(4_000_000, 1), day) == [("day:2026-11-26", 4_000_000, 5_000_000)]
    assert budgets.warnings(budgets.Limits(), Spent(10**9, 10**9), day) == []


def test_the_day_is_the_owners():
    late_in_utc = datetime(2026, 11, 26, 23, 30, tzinfo=timezone.utc)
    assert today("UTC", late_in_utc) == date(2026, 11, 26)
    assert today("Europe/Berlin", late_in_utc) == date(2026, 11, 27)
    assert today("America/Los_Angeles", late_in_utc) == date(2026, 11, 26)
    resets = budgets.resets_at("day:2026-11-26", "Europe/Berlin")
    assert resets.isoformat() == "2026-11-27T00:00:00+01:00"
    assert budgets.resets_at("month:2026-12", "Asia/Tokyo").isoformat() == "2027-01-01T00:00:00+09:00"


def test_the_bundled_clis_default_model_is_in_the_price_table(tmp_path):
    """A fresh install runs the CLI's default model: it must be priced as itself, not as the dearest
    model "not in the price table". The CLI is asked once, against the fake model, which model it sends."""
    import glob
    import os
    import subprocess

    from tests.fakes.model_api import FakeModel
    [cli] = glob.glob(os.path.join(os.path.dirname(__import__("claude_agent_sdk").__file__), "_bundled", "claude"))
    with FakeModel() as model:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANTHROPIC_BASE_URL": model.url,
               "ANTHROPIC_API_KEY": "placeholder", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"}
        subprocess.run([cli, "-p", "hello"], env=env, capture_output=True, timeout=120, check=True)
        sent = {c.body["model"] for c in model.model_calls()}
    assert sent and all(prices.price_of(m, TABLE).known for m in sent), sent
