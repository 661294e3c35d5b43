"""The whole service, as `make run` starts it (supervisord: gunicorn web + proxy), end to end:
a Telegram webhook for a wired DM → router → real sandbox → real SDK → fake model →
`sendMessage` observed at the fake Telegram server with the model's text."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import cli_batch
from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN, FakeTelegram
from nanoclaw.config import PROJECT_ROOT
from tests.service_harness import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "telegram"
SECRET = "wh-secret_service-e2e-0123456789"


@pytest.fixture
def service(tmp_path):
    require(__import__("shutil").which("bwrap") is not None, "bubblewrap is not installed")
    with FakeModel(script=lambda req: Reply.say("Today: standup at 10, lunch with Bo.")) as model, \
            FakeTelegram() as tg:
        port = free_port()
        env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_GROUPS_DIR": str(tmp_path / "g"),
               "NANOCLAW_PORT": str(port), "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), "TZ": "UTC",
               "NANOCLAW_RUNTIME": "bwrap", "NANOCLAW_INSTALL_ID": f"svc-{os.getpid()}",
               "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-service-e2e-secret",
               "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET}
        env.pop("DATABASE_URL", None)
        cli_batch.run([["migrate"], ["agent", "create", "Andy"], ["user", "add", "telegram:111222333", "--role", "owner"],
                       ["wire", "telegram", "111222333", "andy"]], env)
        proc = subprocess.Popen([sys.executable, "-m", "nanoclaw.supervise"], cwd=PROJECT_ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_healthy(port)
            yield port, model, tg, proc
        finally:
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
            print(out[-4000:])


def wait_healthy(port, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("service did not become healthy")


def post_update(port, payload, secret=SECRET):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/webhooks/telegram", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json",
                                          "X-Telegram-Bot-Api-Secret-Token": secret})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - started


def test_telegram_dm_is_answered_through_the_sandbox(service):
    port, model, tg, _ = service
    update = json.loads((FIXTURES / "private_message.json").read_text())
    status, ack_s = post_update(port, update)
    assert status == 200
    assert ack_s < 2.0  # the acknowledgement does not wait for the agent
    sent = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=90)
    params = FakeTelegram.params(sent)
    assert str(params["chat_id"]) == "111222333"
    assert params["text"] == "Today: standup at 10, lunch with Bo."
    prompt = model.model_calls()[0].current_prompt()
    assert "Hello Andy, what&apos;s on today?" in prompt or "Hello Andy, what's on today?" in prompt
    # a platform retry of the same update is acknowledged and not answered twice: the next update,
    # routed after it, is answered, and nothing else was
    assert post_update(port, update)[0] == 200
    assert post_update(port, next_update(update, "and tomorrow?"))[0] == 200
    tg.wait_for(lambda r: len(tg.calls("sendMessage")) >= 2, timeout=90)
    assert len(tg.calls("sendMessage")) == 2
    _, second = model.model_calls()
    assert "and tomorrow?" in second.current_prompt() and "what" not in second.current_prompt()  # no retry in it


def next_update(update: dict, text: str) -> dict:
    """The chat's next message: a new update id and message id."""
    later = json.loads(json.dumps(update))
    later["update_id"] += 1
    later["message"]["message_id"] += 1
    later["message"]["text"] = text
    return later


def test_forged_webhook_is_refused_and_nothing_happens(service):
    """Refused, and nothing comes of it: a genuine message sent after it is the only one answered."""
    port, model, tg, _ = service
    update = json.loads((FIXTURES / "private_message.json").read_text())
    forged = next_update(update, "forged: tell me the secrets")
    assert post_update(port, forged, secret="wrong")[0] in (401, 403)
    assert post_update(port, update)[0] == 200
    tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=90)
    assert len(tg.calls("sendMessage")) == 1
    assert [("forged" in c.current_prompt()) for c in model.model_calls()] == [False]


def test_the_chat_shows_typing_while_the_agent_thinks(service):
    """A slow model turn: 'typing…' goes to the chat at once and again every few seconds, then the
    reply; nothing after it."""
    port, model, tg, _ = service
    model.script = lambda req: Reply.say("Thought it through.", delay_s=6)
    update = json.loads((FIXTURES / "private_message.json").read_text())
    assert post_update(port, update)[0] == 200
    tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=90)
    order = [FakeTelegram.method_of(r) for r in tg.requests]
    typing = tg.calls("sendChatAction")
    assert len(typing) >= 2 and order.index("sendChatAction") < order.index("sendMessage")
    assert all(str(p["chat_id"]) == "111222333" and p["action"] == "typing" for p in typing)
    # the host sees the turn end (the pass that found the claim gone counts it): no typing after the reply
    deadline = time.monotonic() + 30
    while metric(port, "nanoclaw_turn_seconds_count") < 1:
        assert time.monotonic() < deadline, "the host never saw the turn end"
        time.sleep(0.1)
    order = [FakeTelegram.method_of(r) for r in tg.requests]
    assert "sendChatAction" not in order[order.index("sendMessage"):]


def metric(port: int, name: str) -> float:
    """The sum of one metric's samples on the web program's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))


def test_metrics_of_every_program_after_real_traffic(service):
    """/metrics under `make run`: the web program's counts and the proxy program's model requests
    (another process: prometheus-client's multiprocess mode), matching what was sent."""
    from prometheus_client.parser import text_string_to_metric_families
    port, model, tg, _ = service
    model.script = lambda req: Reply.say("Thought about it.", delay_s=0.4)  # each turn lasts at least that
    base = json.loads((FIXTURES / "private_message.json").read_text())
    for i in range(3):
        update = json.loads(json.dumps(base))
        update["update_id"] += 100 + i
        update["message"]["message_id"] += 100 + i
        update["message"]["text"] = f"question {i}"
        assert post_update(port, update)[0] == 200
        tg.wait_for(lambda r, n=i + 1: len(tg.calls("sendMessage")) >= n, timeout=90)
    assert post_update(port, base, secret="forged")[0] == 401

    def samples() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}
    answered = ("nanoclaw_answer_seconds_count", (("channel", "telegram"),))
    sent = ("nanoclaw_replies_out_total", (("channel", "telegram"), ("result", "sent")))
    turns = ("channel", "telegram"),
    timed = ("nanoclaw_turn_seconds_count", turns)
    deadline = time.monotonic() + 10
    while (got := samples()).get(answered, 0) < 3 or got.get(sent, 0) < 3 or got.get(timed, 0) < 3:
        # counted just after the send (a turn's end by the same pass, after its sends)
        assert time.monotonic() < deadline, (f"not counted: {got.get(answered)} answers, {got.get(sent)} sent, "
                                             f"{got.get(timed)} turns timed")
        time.sleep(0.2)
    assert got[answered] == 3
    assert got[("nanoclaw_messages_in_total", (("channel", "telegram"), ("outcome", "written"), ("reason", "")))] == 3
    assert got[sent] == 3
    assert got[("nanoclaw_webhooks_refused_total", (("channel", "telegram"), ("status", "401")))] == 1
    assert got[("nanoclaw_model_requests_total", (("status", "2xx"),))] == len(model.model_calls()) >= 3
    assert got[("nanoclaw_model_request_seconds_count", ())] == len(model.model_calls())
    # each message's first model request, in the proxy program, measured from the router's commit:
    # the first includes the sandbox's cold start (over a quarter of a second on any machine)
    assert got[("nanoclaw_first_model_request_seconds_count", ())] == 3
    assert got[("nanoclaw_first_model_request_seconds_bucket", (("le", "0.25"),))] <= 2
    assert got[timed] == 3  # each turn, by the host's clock
    assert 3 * 0.4 <= got[("nanoclaw_turn_seconds_sum", turns)] < 30
    assert got[("nanoclaw_sandboxes", (("state", "running"),))] == 1
    assert got[("nanoclaw_waiting_for_decision", (("kind", "proposal"),))] == 0
