"""GET /metrics (issue 18, first part): after real traffic through the webhook and delivery, the
Prometheus text the endpoint serves, parsed with prometheus_client's own parser, counts what was
sent; it is served to loopback only, or with NANOCLAW_METRICS_TOKEN."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nanoclaw.outbound.delivery import deliver_session
from tests.outbound.recorder import Recorder, agent_writes, session  # noqa: F401  (session is a fixture)
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import SECRET, message, person, post, telegram_app, tg  # noqa: F401  (tg is a fixture)

STRANGER = person(5151, "Bob")


def samples(client, **kwargs) -> dict[tuple, float]:
    resp = client.get("/metrics", **kwargs)
    assert resp.status_code == 200, resp.data
    found = {}
    for family in text_string_to_metric_families(resp.get_data(as_text=True)):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def app(make_settings, sqlite_url, tg):  # noqa: F811
    with telegram_app(make_settings, sqlite_url, tg, *SETUP) as app:
        yield app


def test_the_counts_match_the_traffic(app):
    client = app.test_client()
    before = samples(client)
    post(app, message(4242, ANNA, "one"))
    post(app, message(4242, ANNA, "two"))
    post(app, message(5151, STRANGER, "hello?"))  # a stranger's DM nobody wired
    client.post("/webhooks/telegram", json={"update_id": "x", "message": "not an object"},
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
    after = samples(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)
    assert delta("nanoclaw_messages_in_total", channel="telegram", outcome="written", reason="") == 2
    assert delta("nanoclaw_messages_in_total", channel="telegram", outcome="dropped", reason="no_agent_wired") == 1
    assert delta("nanoclaw_webhooks_malformed_total", channel="telegram", kind="message") == 1


def test_replies_out_are_counted(app, session):  # noqa: F811
    client = app.test_client()
    before = samples(client)
    Recorder.failures_left = 1
    agent_writes(session, {"op": "text", "text": "hi"}, {"op": "text", "text": "there"})
    deliver_session(session, settings=None)
    deliver_session(session, settings=None, now=datetime.now(timezone.utc) + timedelta(seconds=10))
    after = samples(client)
    assert value(after, "nanoclaw_replies_out_total", channel="rec", result="sent") \
        - value(before, "nanoclaw_replies_out_total", channel="rec", result="sent") == 2
    assert value(after, "nanoclaw_replies_out_total", channel="rec", result="retry") \
        - value(before, "nanoclaw_replies_out_total", channel="rec", result="retry") == 1


def test_only_loopback_or_the_token(make_settings, sqlite_url, tg):  # noqa: F811
    with telegram_app(make_settings, sqlite_url, tg) as app:
        client = app.test_client()
        assert client.get("/metrics", headers={"X-Forwarded-For": "203.0.113.5"}).status_code == 403
        assert client.get("/metrics", environ_base={"REMOTE_ADDR": "203.0.113.5"}).status_code == 403
    with telegram_app(make_settings, sqlite_url, tg, NANOCLAW_METRICS_TOKEN="metrics-token-0123456789") as app:
        client = app.test_client()
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        samples(client, headers={"Authorization": "Bearer metrics-token-0123456789",
                                 "X-Forwarded-For": "203.0.113.5"})


def test_the_first_model_request_takes_the_oldest_mark_once(tmp_path):
    from nanoclaw import metrics
    metrics.mark_awaiting(tmp_path, "andy", 100.0)
    metrics.mark_awaiting(tmp_path, "andy", 105.0)  # a second message before any request: the first counts
    metrics.mark_awaiting(tmp_path, "bea", 200.0)
    assert metrics.take_awaiting(tmp_path, "andy") == 100.0
    assert metrics.take_awaiting(tmp_path, "andy") is None  # the turn's later requests observe nothing
    assert metrics.take_awaiting(tmp_path, "bea") == 200.0


def test_a_mark_no_request_took_for_long_is_dropped_not_observed(tmp_path):
    import time

    from nanoclaw import metrics
    count = lambda: metrics.FIRST_MODEL_REQUEST_SECONDS.collect()[0].samples  # noqa: E731
    before = {s.name: s.value for s in count() if s.name.endswith(("_count", "_sum"))}
    metrics.mark_awaiting(tmp_path, "andy", time.time() - 3600)  # a /clear an hour ago never asked the model
    metrics.observe_first_request(tmp_path, "andy")
    metrics.mark_awaiting(tmp_path, "andy", time.time() - 2)
    metrics.observe_first_request(tmp_path, "andy")
    after = {s.name: s.value for s in count() if s.name.endswith(("_count", "_sum"))}
    name = "nanoclaw_first_model_request_seconds"
    assert after[f"{name}_count"] == before[f"{name}_count"] + 1  # the stale mark was not observed
    assert 2 <= after[f"{name}_sum"] - before[f"{name}_sum"] < 60


def test_the_first_request_is_timed_to_its_arrival_when_observed_after_the_call(tmp_path):
    """The proxy reads the router's mark after the model call (off the answer's path): the figure is
    still the wait until the request arrived, not until its answer was relayed."""
    import time

    from nanoclaw import metrics
    count = lambda: metrics.FIRST_MODEL_REQUEST_SECONDS.collect()[0].samples  # noqa: E731
    name = "nanoclaw_first_model_request_seconds"
    before = {s.name: s.value for s in count() if s.name.endswith(("_count", "_sum"))}
    now = time.time()
    metrics.mark_awaiting(tmp_path, "cleo", now - 30)
    metrics.observe_first_request(tmp_path, "cleo", arrived=now - 28)  # the answer took ~28 s more
    after = {s.name: s.value for s in count() if s.name.endswith(("_count", "_sum"))}
    assert after[f"{name}_count"] == before[f"{name}_count"] + 1
    assert 1.9 <= after[f"{name}_sum"] - before[f"{name}_sum"] <= 2.1
