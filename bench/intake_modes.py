"""How fast a message reaches the agent by each way in: webhook, Telegram long polling, Slack
Socket Mode, measured in one run on one service.

    .venv/bin/python -m bench.intake_modes [N]      (N messages per way, default 30)

The service runs as `make run` starts it (supervisord: web, proxy, telegram-poll, slack-socket)
with bubblewrap, fake Telegram and Slack APIs (the Socket Mode server included) and a scripted
fake model. One agent is wired to a Telegram DM and a Slack DM; its sandboxes are warm (a first
message on each is not measured). For each message: the moment it is available to us (the webhook
POST starts; the update is queued at the fake Bot API; the envelope is sent on the socket) → the
model request that carries it arrives at the fake model. Messages go one at a time, each after the
previous one's answer, so the figures are the path, not a queue.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.slack_api import SIGNING_SECRET, FakeSlack  # noqa: E402
from fakes.slack_api import BOT_USER_ID, TOKEN as SLACK_TOKEN  # noqa: E402
from fakes.slack_socket import APP_TOKEN, FakeSocketMode  # noqa: E402
from fakes.telegram_api import TOKEN as TG_TOKEN  # noqa: E402
from fakes.telegram_api import FakeTelegram  # noqa: E402
from service_harness import SupervisedService, post  # noqa: E402

OWNER_TG, ALICE_SLACK, SLACK_DM = 111222333, "U0ALICE01", "D0DMALICE"
MARKER = re.compile(r"m-[A-Za-z0-9-]+")


def tg_update(n: int, marker: str) -> dict:
    return {"update_id": 930000000 + n, "message": {
        "message_id": 3000 + n, "from": {"id": OWNER_TG, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": OWNER_TG, "type": "private", "first_name": "Alice"}, "date": int(time.time()),
        "text": f"note {marker}"}}


def slack_event(n: int, marker: str) -> dict:
    ts = f"{int(time.time())}.{n:06d}"
    return {"type": "event_callback", "team_id": "T0TEAM001", "event_id": f"Ev{n:08d}",
            "event": {"type": "message", "channel_type": "im", "channel": SLACK_DM, "user": ALICE_SLACK,
                      "text": f"note {marker}", "ts": ts, "event_ts": ts}}


def slack_headers(body: bytes) -> dict:
    ts = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


class Arrivals:
    """marker → monotonic arrival of the first model request carrying it."""

    def __init__(self):
        self.at: dict[str, float] = {}
        self.cond = threading.Condition()

    def script(self, req) -> Reply:
        prompt = req.current_prompt()
        with self.cond:
            for word in MARKER.findall(prompt):
                self.at.setdefault(word, req.received_mono)
            self.cond.notify_all()
        return Reply.say("ok")

    def wait(self, marker: str, timeout: float = 60) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: marker in self.at, timeout):
                raise RuntimeError(f"{marker} never reached the model")
            return self.at[marker]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    arrivals = Arrivals()
    with tempfile.TemporaryDirectory(prefix="nanoclaw-modes-") as tmp, FakeModel(script=arrivals.script) as model, \
            FakeTelegram() as tg, FakeSlack() as slack, FakeSocketMode() as socket:
        slack.socket_url = socket.url
        svc = SupervisedService(Path(tmp), {
            "NANOCLAW_RUNTIME": "bwrap", "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-modes",
            "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TG_TOKEN,
            "SLACK_API_BASE": slack.api, "SLACK_BOT_TOKEN": SLACK_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_BOT_USER_ID": BOT_USER_ID},
            [["agent", "create", "Andy"], ["user", "add", f"telegram:{OWNER_TG}", "--role", "owner"],
             ["user", "add", f"slack:{ALICE_SLACK}", "--role", "owner"],
             ["wire", "telegram", str(OWNER_TG), "andy"], ["wire", "slack", SLACK_DM, "andy"]])
        try:
            if not socket.connected.wait(30):
                raise SystemExit("the slack-socket program did not connect")
            counter = iter(range(1, 10**6))

            def webhook(marker):
                body = json.dumps(slack_event(next(counter), marker)).encode()
                started = time.monotonic()
                post(svc.port, "/webhooks/slack/events", body, slack_headers(body))
                return started

            def polling(marker):
                started = time.monotonic()
                tg.push_update(tg_update(next(counter), marker))
                return started

            def socket_mode(marker):
                payload = slack_event(next(counter), marker)
                started = time.monotonic()
                socket.send("events_api", payload)
                return started

            ways = {"webhook (Slack events)": webhook, "Telegram long polling": polling,
                    "Slack Socket Mode": socket_mode}
            results: dict[str, list[float]] = {name: [] for name in ways}
            for name, send in ways.items():  # warm both sessions' sandboxes first
                marker = f"m-warm-{name.split()[0]}"
                send(marker)
                arrivals.wait(marker, 90)
            for i in range(n):
                for name, send in ways.items():  # interleaved, so drift hits all three alike
                    marker = f"m-{i}-{name.split()[0]}"
                    started = send(marker)
                    results[name].append(arrivals.wait(marker) - started)
                    time.sleep(0.3)  # let the turn finish: one message at a time
        finally:
            svc.stop()
    print(f"\nmessage available → its model request, {n} per way, bubblewrap, warm sandboxes")
    base = pct(results["webhook (Slack events)"], 0.5)
    for name, values in results.items():
        p50 = pct(values, 0.5)
        print(f"  {name:24s} p50 {p50 * 1000:7.1f} ms   p95 {pct(values, 0.95) * 1000:7.1f} ms   "
              f"({p50 / base:.2f} x the webhook p50)")


if __name__ == "__main__":
    main()
