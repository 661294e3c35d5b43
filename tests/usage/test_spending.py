"""The proxy counts every model call of an agent from the response itself and refuses the next one
once the agent's budget is spent, before it leaves the machine (real door on its unix socket, real
central database, a fake Messages API)."""
from __future__ import annotations

import gzip
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from nanoclaw.models import AgentGroup, Session
from nanoclaw.proxy import ProxyServer
from nanoclaw.proxy.model_paths import canonical
from nanoclaw.usage.tables import BudgetEvent, ModelUsage
from tests.fakes.model_api import FakeModel, Reply
from tests.proxy.test_proxy import call


@pytest.fixture
def door(sqlite_app, cli):
    settings = sqlite_app.config["NANOCLAW"]
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("agent", "create", "Bea").exit_code == 0
    Session.create(id="s-andy", agent_group=AgentGroup.get(AgentGroup.folder == "andy"))
    Session.create(id="s-bea", agent_group=AgentGroup.get(AgentGroup.folder == "bea"))
    with FakeModel(script=lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=100_000)) \
            as model:
        from dataclasses import replace
        proxy = ProxyServer(replace(settings, anthropic_upstream_url=model.url, anthropic_api_key="sk-ant-x"),
                            lambda: ["andy", "bea"], rescan_interval=0.2).start()
        proxy.model = model
        yield proxy
        proxy.stop()


def recorded(calls: int, timeout: float = 10.0) -> None:
    """Wait until the proxy has written `calls` calls to the ledger."""
    waited(lambda: sum(r.calls for r in ModelUsage.select()) >= calls, f"the ledger to get {calls} call(s)", timeout)


def waited(done, what: str, timeout: float = 10.0):
    import time
    deadline = time.monotonic() + timeout
    while not (found := done()):
        assert time.monotonic() < deadline, f"waited for {what}"
        time.sleep(0.02)
    return found


def ask(proxy, folder: str, session: str = "", stream: bool = True, *, encodings: str = "",
        url: str = "/v1/messages?beta=true", method: str = "POST", model: str = "claude-sonnet-4-5"):
    headers = {"content-type": "application/json", "x-api-key": "placeholder"}
    if session:
        headers["x-nanoclaw-session"] = session
    if encodings:
        headers["accept-encoding"] = encodings
    body = json.dumps({"model": model, "max_tokens": 10, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    return call(proxy.proxy_dir / folder / "proxy.sock", method=method, url=url,
                body=body if method == "POST" else None, headers=headers)


@pytest.fixture
def cli(sqlite_app):
    runner = sqlite_app.test_cli_runner()
    return lambda *args: runner.invoke(args=["nanoclaw", *args])


def test_each_call_is_counted_for_its_agent_and_session(door):
    assert ask(door, "andy", "s-andy")[0] == 200
    assert ask(door, "andy", "s-andy", stream=False)[0] == 200
    assert ask(door, "andy", "s-bea")[0] == 200   # another agent's session: not believed
    recorded(3)  # after the response went out, not before: the caller has every byte first
    rows = {(r.agent_folder, r.session_id): r for r in ModelUsage.select()}
    mine = rows[("andy", "s-andy")]
    assert (mine.calls, mine.input_tokens, mine.output_tokens, mine.model) == (2, 200_000, 10,
                                                                              "claude-sonnet-4-5-20250929")
    assert mine.cost_micro_usd == 2 * (100_000 * 3 + 5 * 15) and not mine.unpriced
    assert rows[("andy", "")].calls == 1 and ("bea", "s-bea") not in rows
    assert all("x-nanoclaw-session" not in r.headers for r in door.model.model_calls())  # goes no further


def test_the_searches_an_allowed_agent_has_the_provider_run_are_priced_into_its_spend(door, cli):
    """Issue 60, item 4: Andy's owner allowed web_search; the provider reports four searches run for one call:
    $0.04 joins the call's tokens in Andy's spend. Bea was not allowed: refused, nothing forwarded or spent."""
    assert cli("model", "feature", "allow", "andy", "web_search").exit_code == 0
    door.model.script = lambda req: Reply.say("found", model="claude-sonnet-4-5-20250929", input_tokens=1000,
                                              server_tool_use={"web_search_requests": 4})
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True,
                       "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
                       "messages": [{"role": "user", "content": "what is new?"}]}).encode()
    headers = {"content-type": "application/json", "x-api-key": "placeholder", "x-nanoclaw-session": "s-andy"}
    assert call(door.proxy_dir / "andy" / "proxy.sock", body=body, headers=headers)[0] == 200
    status, _, answer = call(door.proxy_dir / "bea" / "proxy.sock", body=body, headers=headers)
    assert status == 400 and b"web_search" in answer and len(door.model.requests) == 1
    recorded(1)
    row = ModelUsage.get()
    assert (row.agent_folder, row.cost_micro_usd) == ("andy", 1000 * 3 + 5 * 15 + 4 * 10_000)


def test_a_spent_budget_refuses_the_next_call_before_it_leaves(door, cli):
    assert cli("budget", "set", "andy", "--daily", "0.40", "--why", "test").exit_code == 0
    assert ask(door, "andy", "s-andy")[0] == 200               # $0.30075: 75 % of it
    recorded(1)
    assert not BudgetEvent.select().exists()
    assert ask(door, "andy", "s-andy")[0] == 200               # $0.60015: over the line (this call goes)
    recorded(2)  # the warning is recorded after the call is, in the same step after the response
    warn = waited(lambda: BudgetEvent.get_or_none(BudgetEvent.kind == "warn"), "the warning")
    assert warn.period.startswith("day:") and warn.spent_micro_usd == 600_150
    before = len(door.model.model_calls())
    status, _headers, body = ask(door, "andy", "s-andy")
    assert status == 402 and len(door.model.model_calls()) == before   # refused here, never sent
    assert "daily budget of agent 'andy' is used up ($0.60 of $0.40)" in json.loads(body)["error"]["message"]
    block = BudgetEvent.get(BudgetEvent.kind == "block")
    assert block.session_id == "s-andy" and block.told_at is None
    assert ask(door, "bea")[0] == 200                          # another agent is not held
    assert cli("budget", "set", "andy", "--daily", "5").exit_code == 0
    door.model_api.spending.limits.forget()
    assert ask(door, "andy", "s-andy")[0] == 200               # raised: it goes again


def test_a_model_the_table_does_not_know_is_priced_at_the_dearest_rate(door):
    door.model.script = lambda req: Reply.say("ok", model="claude-new-9", input_tokens=1_000)
    assert ask(door, "andy", model="claude-new-9")[0] == 200
    recorded(1)
    row = ModelUsage.get()
    assert row.unpriced and row.priced_as == "claude-opus-4-1" and row.cost_micro_usd == 1_000 * 15 + 5 * 75
    # priced by the model the call asked for when the table knows it, whatever answered
    assert ask(door, "andy", model="claude-sonnet-4-5")[0] == 200
    recorded(2)
    row = ModelUsage.get(ModelUsage.asked_model == "claude-sonnet-4-5")
    assert row.model == "claude-new-9" and not row.unpriced and row.priced_as == "claude-sonnet-4-5"


# --- answers the meter reads whatever their encoding (issue 39, item 1) ---------------------------

def test_the_upstream_is_asked_for_plain_answers_and_a_compressed_one_is_still_counted(door):
    """The CLI asks for gzip; the door asks the provider for identity, and when a provider compresses
    anyway (streamed or not) the meter decodes its own copy: the caller gets the bytes as sent."""
    for stream in (True, False):
        status, headers, body = ask(door, "andy", "s-andy", stream=stream, encodings="gzip, deflate, br, zstd")
        assert status == 200 and "content-encoding" not in {k.lower() for k in headers}
    assert all(r.headers.get("accept-encoding") == "identity" for r in door.model.model_calls())
    door.model.compress = "gzip"  # one that ignores what it is asked
    for stream in (True, False):
        status, headers, body = ask(door, "andy", "s-andy", stream=stream, encodings="gzip")
        assert status == 200 and headers.get("content-encoding") == "gzip"
        assert b"ok" in gzip.decompress(body)  # relayed as the provider sent it
    recorded(4)
    row = ModelUsage.get(ModelUsage.session_id == "s-andy")
    assert (row.calls, row.input_tokens, row.output_tokens) == (4, 400_000, 20)
    assert row.cost_micro_usd == 4 * (100_000 * 3 + 5 * 15)


def test_an_answer_whose_usage_cannot_be_read_is_charged_the_estimate_never_nothing(door, caplog):
    """An encoding nobody here can decode, or a success without usage: input = body bytes / 3 tokens,
    output = max_tokens, at the table's dearest rates; logged once per model."""
    door.model.compress = "br"
    caplog.set_level("WARNING", logger="nanoclaw.proxy.spending")
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 2_000, "stream": True,
                       "messages": [{"role": "user", "content": "x" * 2_990}]}).encode()
    for _ in range(2):
        assert call(door.proxy_dir / "andy" / "proxy.sock", body=body,
                    headers={"content-type": "application/json", "accept-encoding": "br"})[0] == 200
    recorded(2)
    row = ModelUsage.get()
    expected_in = -(-len(body) // 3)
    assert (row.input_tokens, row.output_tokens) == (2 * expected_in, 2 * 2_000)
    assert row.priced_as == "claude-opus-4-1" and row.cost_micro_usd == 2 * (expected_in * 15 + 2_000 * 75)
    lines = [r for r in caplog.records if "without usage the proxy can read" in r.getMessage()]
    assert len(lines) == 1 and "claude-sonnet-4-5" in lines[0].getMessage()


# --- only model endpoints, spelled plainly, reach the provider (item 2) ------------------------------

def test_batches_and_other_spellings_never_reach_the_provider(door, cli):
    sock = door.proxy_dir / "andy" / "proxy.sock"
    body = json.dumps({"requests": [{"custom_id": "a", "params": {"model": "claude-sonnet-4-5", "max_tokens": 10,
                                                                     "messages": []}}]}).encode()
    for path, status in (("/v1/messages/batches", 404), ("/v1/messages/batches/", 404), ("/v1//messages", 400),
                         ("/v1/messages/%2e%2e/batches", 400), ("/v1/%252e%252e/complete", 400),
                         ("/v1/complete", 404), ("/V1/messages", 404), ("/v1/files", 404)):
        got, _, answer = call(sock, url=path, body=body, headers={"content-type": "application/json"})
        assert got == status, path
        assert json.loads(answer)["error"]["message"].startswith("nanoclaw proxy:")
    assert call(sock, method="GET", url="/v1/messages", body=None)[0] == 405
    assert door.model.requests == []
    # an escaped spelling of the one billed endpoint is that endpoint: sent plainly, counted, capped
    assert ask(door, "andy", "s-andy", url="/v1/%6dessages?beta=true")[0] == 200
    assert [r.path for r in door.model.requests] == ["/v1/messages"]
    recorded(1)
    assert cli("budget", "set", "andy", "--daily", "0.10").exit_code == 0
    door.model_api.spending.limits.forget()
    assert ask(door, "andy", "s-andy", url="/v1/%6dessages")[0] == 402
    assert ask(door, "andy", "s-andy", url="/v1/messages/")[0] == 402
    assert len(door.model.requests) == 1


_SEGMENT = st.one_of(st.sampled_from(["v1", "messages", "count_tokens", "models", "batches", "complete", ".", "..",
                                      "", "%2e", "%2E%2e", "%6dessages", "MESSAGES", "%2f", "%252e", "%00", "a;b",
                                      "claude-sonnet-4-5", "%76%31"]),
                     st.text(alphabet="abcdefgmorstuv%2._-/", max_size=8))


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=st.lists(_SEGMENT, min_size=1, max_size=5), method=st.sampled_from(["GET", "POST"]))
def test_any_path_reaches_the_provider_only_as_a_model_endpoint_and_every_billed_call_is_counted(
        door, segments, method):
    """Judged by what the provider saw, not by the door's own path rules (issue 61, item 6): a request that
    reached it went to a model endpoint, spelled as the caller's path decoded, and a POST that reached
    /v1/messages (the one billed endpoint) is in the ledger; one that reached nothing was refused."""
    from urllib.parse import unquote
    path = "/" + "/".join(segments)
    before_requests = len(door.model.requests)
    before_calls = sum(r.calls for r in ModelUsage.select())
    status, _, _ = ask(door, "andy", "s-andy", method=method, url=path)
    reached = door.model.requests[before_requests:]
    if not reached:
        assert status in (400, 404, 405), (path, status)
        return
    assert len(reached) == 1 and status == 200, (path, status)
    assert reached[0].path == unquote(path).rstrip("/"), (path, reached[0].path)
    assert reached[0].path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/models") or \
        reached[0].path.startswith("/v1/models/"), path
    if method == "POST" and reached[0].path == "/v1/messages":
        recorded(before_calls + 1)


def test_canonical_paths_are_plain():
    assert canonical("/v1/%6dessages") == "/v1/messages"
    for bad in ("/v1//messages", "/v1/%2e%2e/x", "/v1/%252e", "/v1/messages\\x", "/v1/%0amessages", "v1/messages",
                "/v1/%ff"):
        assert canonical(bad) is None, bad


# --- calls in flight hold their estimate (item 8) -------------------------------------------------

def test_thirty_calls_at_once_overshoot_a_budget_by_at_most_one_reservation(door, cli):
    """Each call reserves its estimate (body bytes / 3 input, max_tokens output, at the dearest rate)
    until its answer is counted: a call is admitted only while spent + reserved is below the limit."""
    assert cli("budget", "set", "andy", "--daily", "2").exit_code == 0
    door.model.script = lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=100_000,
                                              delay_s=0.2)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 1_000, "stream": True,
                       "messages": [{"role": "user", "content": "y" * 299_900}]}).encode()
    reservation = -(-len(body) // 3) * 15 + 1_000 * 75  # micro-USD at claude-opus-4-1's rates

    def one(_):
        return call(door.proxy_dir / "andy" / "proxy.sock", body=body,
                    headers={"content-type": "application/json", "x-nanoclaw-session": "s-andy"})[0]

    with ThreadPoolExecutor(30) as pool:
        statuses = list(pool.map(one, range(30)))
    answered = statuses.count(200)
    assert statuses.count(402) == 30 - answered and answered == len(door.model.model_calls())
    recorded(answered)
    spent = sum(r.cost_micro_usd for r in ModelUsage.select())
    assert spent >= 2_000_000 and spent <= 2_000_000 + reservation, (answered, spent)
    assert door.model_api.spending.reserved("andy") == 0  # every reservation was given back


class Clock:
    """The time the proxy's spending code goes by, moved by the test (no product setting moves it)."""

    def __init__(self, at: str):
        from datetime import datetime
        self.at = datetime.fromisoformat(at)

    def __call__(self):
        return self.at

    def set(self, at: str) -> None:
        from datetime import datetime
        self.at = datetime.fromisoformat(at)


def test_the_budget_starts_afresh_at_the_owners_midnight_and_on_the_first(sqlite_app, cli):
    """Owner in Berlin: $0.50 a day, $0.80 a month, $0.30 a call. The second call of the day passes
    the daily line (80 % warned), the third is refused until Berlin's midnight; the next day's
    second call is refused by the month until the 1st; all by a clock the test moves."""
    from dataclasses import replace
    settings = sqlite_app.config["NANOCLAW"]
    assert cli("agent", "create", "Andy").exit_code == 0
    Session.create(id="s-andy", agent_group=AgentGroup.get(AgentGroup.folder == "andy"))
    assert cli("budget", "set", "andy", "--daily", "0.50", "--monthly", "0.80", "--why", "test").exit_code == 0
    clock = Clock("2026-11-29T22:30:00+00:00")  # 23:30 in Berlin, Sunday the 29th
    with FakeModel(script=lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=100_000)) \
            as model:
        door = ProxyServer(replace(settings, anthropic_upstream_url=model.url, anthropic_api_key="sk-ant-x",
                                   timezone="Europe/Berlin"), lambda: ["andy"], rescan_interval=0.2).start()
        door.model_api.spending.clock = clock
        door.model = model
        try:
            assert [ask(door, "andy", "s-andy")[0] for _ in range(2)] == [200, 200]
            recorded(2)
            assert {r.day.isoformat() if hasattr(r.day, "isoformat") else r.day for r in ModelUsage.select()} == \
                {"2026-11-29"}  # the owner's date, not UTC's
            warn = waited(lambda: BudgetEvent.get_or_none(BudgetEvent.kind == "warn"), "the 80 % warning")
            assert warn.period == "day:2026-11-29"
            status, _h, body = ask(door, "andy", "s-andy")
            message = json.loads(body)["error"]["message"]
            assert status == 402 and "daily budget" in message and "resets 2026-11-30 00:00 CET" in message

            clock.set("2026-11-29T23:00:30+00:00")  # 00:00:30 in Berlin: a new day, the same month
            assert ask(door, "andy", "s-andy")[0] == 200  # $0.90 in November now
            recorded(3)
            status, _h, body = ask(door, "andy", "s-andy")
            message = json.loads(body)["error"]["message"]
            assert status == 402 and "monthly budget" in message and "resets 2026-12-01 00:00 CET" in message

            clock.set("2026-11-30T23:00:30+00:00")  # 00:00:30 on the 1st in Berlin
            assert ask(door, "andy", "s-andy")[0] == 200
            recorded(4)
            assert [b.period for b in BudgetEvent.select().where(BudgetEvent.kind == "block")
                    .order_by(BudgetEvent.id)] == ["day:2026-11-29", "month:2026-11"]
        finally:
            door.stop()


def test_the_start_gate_opens_at_the_owners_midnight(sqlite_app, cli):
    """The sandbox manager's gate (a spent agent's sandbox is not started) goes by the same clock."""
    from dataclasses import replace

    from nanoclaw.usage import ledger, prices
    from nanoclaw.usage.gate import SpendGate
    settings = replace(sqlite_app.config["NANOCLAW"], timezone="Europe/Berlin")
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("budget", "set", "andy", "--daily", "0.50", "--why", "test").exit_code == 0
    ledger.record("andy", "s1", "claude-sonnet-4-5", prices.Tokens(input=200_000),
                  prices.price_of("claude-sonnet-4-5", prices.load(None)),
                  ledger.today("Europe/Berlin", Clock("2026-11-29T22:59:00+00:00")()))
    clock = Clock("2026-11-29T22:59:00+00:00")
    gate = SpendGate(settings, clock=clock)
    assert gate.spent_up("andy")
    clock.set("2026-11-29T23:00:01+00:00")
    assert not gate.spent_up("andy")


def test_usage_budget_list_and_clear_and_the_cost_metric_agree_with_the_ledger(door, cli, sqlite_app):
    """What the owner reads (usage, budget list, /metrics) is the ledger's figures; clearing a budget
    lets a spent agent's next call go."""
    from prometheus_client.parser import text_string_to_metric_families

    def cost_metric() -> float:
        response = sqlite_app.test_client().get("/metrics")
        assert response.status_code == 200
        return sum(s.value for f in text_string_to_metric_families(response.get_data(as_text=True))
                   for s in f.samples if s.name == "nanoclaw_model_cost_usd_total" and s.labels.get("agent") == "andy")

    assert "no model calls in the last 30 day(s)" in cli("usage").output
    assert "no budgets" in cli("budget", "list").output
    before = cost_metric()
    assert cli("budget", "set", "andy", "--daily", "0.50", "--monthly", "20", "--why", "test").exit_code == 0
    assert [ask(door, "andy", "s-andy")[0] for _ in range(2)] == [200, 200]   # $0.30075 each
    recorded(2)
    assert ask(door, "andy", "s-andy")[0] == 402
    assert ask(door, "bea", "s-bea")[0] == 200
    recorded(3)

    usage = cli("usage").output
    lines = {line.split()[1]: line for line in usage.splitlines() if line[:4].isdigit()}
    assert " 2 " in lines["andy"] and "$0.60" in lines["andy"] and "$0.30" in lines["bea"]
    assert "total: $0.90" in usage
    only = cli("usage", "andy").output
    assert "bea" not in only and "total: $0.60" in only
    listed = cli("budget", "list").output
    andy = next(line for line in listed.splitlines() if line.startswith("andy"))
    assert "daily $0.50, monthly $20.00" in andy and andy.count("$0.60") == 2  # today and this month
    spent = sum(r.cost_micro_usd for r in ModelUsage.select().where(ModelUsage.agent_folder == "andy"))
    assert spent == 600_150 and cost_metric() - before == pytest.approx(spent / 1e6, abs=1e-9)

    cleared = cli("budget", "clear", "andy", "--why", "done testing")
    assert cleared.exit_code == 0 and "andy: no budget" in cleared.output
    again = cli("budget", "clear", "andy")
    assert again.exit_code == 2 and again.output.strip().endswith("andy has no budget")
    assert "Traceback" not in again.output
    door.model_api.spending.limits.forget()
    assert ask(door, "andy", "s-andy")[0] == 200   # no budget: it goes
    assert cli("usage", "nobody").exit_code == 2


def test_a_budgeted_agent_has_at_most_two_calls_at_the_provider(door, cli, monkeypatch):
    """Issue 60, item 4: whatever the estimate, an overshoot is bounded by a constant: while an agent has a
    budget, two of its calls are at the provider at once; a third waits its turn (then goes), and one that
    waited too long gets a 429 with retry-after, which the CLI retries. An agent without a budget is not
    held back."""
    import time
    from nanoclaw.proxy import spending
    assert cli("budget", "set", "andy", "--daily", "50").exit_code == 0
    door.model.script = lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=10, delay_s=0.6)

    def at_once(folder: str, n: int):
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(lambda _: ask(door, folder), range(n)))

    def most_at_once(calls) -> int:
        spans = [(c.received_mono, c.received_mono + (c.handled_s or 0)) for c in calls]
        return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)

    assert [status for status, _h, _b in at_once("andy", 4)] == [200] * 4
    assert most_at_once(door.model.model_calls()) == 2
    before = len(door.model.model_calls())
    assert [status for status, _h, _b in at_once("bea", 4)] == [200] * 4  # no budget: all four at once
    assert most_at_once(door.model.model_calls()[before:]) == 4

    monkeypatch.setattr(spending, "IN_FLIGHT_WAIT_S", 0.2)
    door.model.script = lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=10, delay_s=1.5)
    answers = at_once("andy", 3)
    busy = [(h, b) for status, h, b in answers if status == 429]
    assert len(busy) == 1 and sorted(s for s, _h, _b in answers) == [200, 200, 429]
    headers, body = busy[0]
    assert {k.lower(): v for k, v in headers.items()}["retry-after"] == str(spending.RETRY_AFTER_S)
    assert b"2 model calls under way" in body
    deadline = time.monotonic() + 10
    while door.model_api.spending._flying.get("andy"):  # every place given back once the answers are counted
        assert time.monotonic() < deadline
        time.sleep(0.02)
