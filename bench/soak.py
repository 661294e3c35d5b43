"""Soak: the whole service under mixed traffic for a long while, agents answering.

    .venv/bin/python -m bench.soak [SECONDS] [--runtime bwrap|docker] [--rate PER_SECOND]

The service runs as `make run` starts it (nanoclaw.supervise: supervisord, gunicorn `web`,
`background`, `proxy`), with fake Telegram, Slack, WhatsApp and Discord APIs and a scripted fake
model on 127.0.0.1. An open loop sends RATE requests a second (default 4), signed as each
platform signs them, spread over the platforms:
  - a DM to the agent on Telegram, Slack or WhatsApp, each carrying a unique marker;
  - one in ten is sent again (a platform retry), one in twenty is malformed under a valid
    signature, one in fifty is forged; Discord gets signed PINGs and clicks on unknown cards.
The model answers every turn with the markers of its prompt, so each marker's answer can be found
at the fake platform. Every 5 s the service's processes (supervisord and its programs, not the
sandboxes) are sampled: resident memory and open files.

Printed: webhook acknowledgement p50/p99/max, memory and open files after the first minute vs at
the end (and the least-squares slope per 10 minutes), markers sent, answered, lost, answered twice.
Targets: memory and open files flat, p99 < 50 ms, nothing lost, nothing answered twice.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import random
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.discord_api import FakeDiscord  # noqa: E402
from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.slack_api import SIGNING_SECRET, FakeSlack  # noqa: E402
from fakes.slack_api import TOKEN as SLACK_TOKEN  # noqa: E402
from fakes.telegram_api import TOKEN as TG_TOKEN  # noqa: E402
from fakes.telegram_api import FakeTelegram  # noqa: E402
from fakes.whatsapp_api import PHONE_NUMBER_ID, FakeWhatsApp  # noqa: E402
from fakes.whatsapp_api import TOKEN as WA_TOKEN  # noqa: E402
from nacl.signing import SigningKey  # noqa: E402
from service_harness import SupervisedService, post  # noqa: E402

TG_SECRET = "soak-webhook-secret-0123456789"
WA_SECRET = "soak-wa-app-secret"
DISCORD_KEY = SigningKey.generate()
MARKER = re.compile(r"soak-\d+")
ALICE_TG, ALICE_SLACK, SLACK_DM, ALICE_WA = 111222333, "U0ALICE01", "D0DMALICE", "16505551234"


def answer(req) -> Reply:
    found = sorted(set(MARKER.findall(req.current_prompt())), key=lambda m: int(m.split("-")[1]))
    return Reply.say("ack " + " ".join(found) if found else "ok")


# --- requests, signed as each platform signs them ------------------------------------------------

def telegram(n: int, marker: str) -> tuple[str, bytes, dict]:
    update = {"update_id": 800000000 + n, "message": {
        "message_id": n, "from": {"id": ALICE_TG, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": ALICE_TG, "type": "private", "first_name": "Alice"}, "date": int(time.time()),
        "text": f"note {marker}"}}
    return "/webhooks/telegram", json.dumps(update).encode(), {"X-Telegram-Bot-Api-Secret-Token": TG_SECRET}


def slack_headers(body: bytes, secret: str = SIGNING_SECRET) -> dict:
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def slack(n: int, marker: str) -> tuple[str, bytes, dict]:
    ts = f"{int(time.time())}.{n:06d}"
    body = json.dumps({"type": "event_callback", "team_id": "T0TEAM001", "event_id": f"Ev{n:08d}",
                       "event": {"type": "message", "channel_type": "im", "channel": SLACK_DM, "user": ALICE_SLACK,
                                 "text": f"note {marker}", "ts": ts, "event_ts": ts}}).encode()
    return "/webhooks/slack/events", body, slack_headers(body)


def whatsapp(n: int, marker: str) -> tuple[str, bytes, dict]:
    body = json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550783881", "phone_number_id": PHONE_NUMBER_ID},
        "contacts": [{"profile": {"name": "Alice"}, "wa_id": ALICE_WA}],
        "messages": [{"from": ALICE_WA, "id": f"wamid.soak{n:010d}", "timestamp": str(int(time.time())),
                      "type": "text", "text": {"body": f"note {marker}"}}]}}]}]}).encode()
    sig = hmac.new(WA_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return "/webhooks/whatsapp", body, {"X-Hub-Signature-256": f"sha256={sig}"}


def discord(n: int) -> tuple[str, bytes, dict]:
    payload = {"type": 1, "id": str(n), "application_id": "999", "token": "t", "version": 1} if n % 2 else {
        "type": 3, "id": str(1190000000000000000 + n), "application_id": "999", "token": "t", "version": 1,
        "channel_id": "1", "data": {"custom_id": f"nsa-{os.urandom(16).hex()}:allow", "component_type": 2},
        "user": {"id": "80351110224678912", "username": "alice"}, "message": {"id": "5", "content": "card"}}
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    return "/webhooks/discord/interactions", body, {
        "X-Signature-Ed25519": DISCORD_KEY.sign(ts.encode() + body).signature.hex(), "X-Signature-Timestamp": ts}


def malformed(path: str, body: bytes, headers: dict) -> tuple[str, bytes, dict]:
    """The same platform, a payload that does not fit, under a valid signature."""
    bad = json.dumps({"update_id": "x", "message": "not an object", "entry": 7, "event": [1]}).encode()
    if path.endswith("telegram"):
        return path, bad, headers
    if path.endswith("whatsapp"):
        return path, bad, {"X-Hub-Signature-256": "sha256=" + hmac.new(WA_SECRET.encode(), bad, hashlib.sha256).hexdigest()}
    return path, bad, slack_headers(bad)


def forged(path: str, body: bytes, headers: dict) -> tuple[str, bytes, dict]:
    return path, body, {k: ("0" * len(v) if "ignature" in k or "Secret" in k else v) for k, v in headers.items()}


# --- the service ----------------------------------------------------------------------------------

def start_service(root: Path, runtime: str, fakes: dict, model: FakeModel) -> SupervisedService:
    tg, sl, wa, dc = fakes["telegram"], fakes["slack"], fakes["whatsapp"], fakes["discord"]
    return SupervisedService(root, {
        "NANOCLAW_RUNTIME": runtime, "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-soak-secret",
        "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TG_TOKEN, "TELEGRAM_WEBHOOK_SECRET": TG_SECRET,
        "SLACK_API_BASE": sl.api, "SLACK_BOT_TOKEN": SLACK_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_BOT_USER_ID": "U0BOTANDY",
        "WHATSAPP_API_BASE": wa.url, "WHATSAPP_TOKEN": WA_TOKEN, "WHATSAPP_APP_SECRET": WA_SECRET,
        "WHATSAPP_VERIFY_TOKEN": "v", "WHATSAPP_PHONE_NUMBER_ID": PHONE_NUMBER_ID,
        "DISCORD_API_BASE": dc.url, "DISCORD_PUBLIC_KEY": DISCORD_KEY.verify_key.encode().hex(),
        "DISCORD_APPLICATION_ID": "999"},
        [["agent", "create", "Andy"],
         ["user", "add", f"telegram:{ALICE_TG}", "--role", "owner"],
         ["user", "add", f"slack:{ALICE_SLACK}", "--role", "member", "--agent", "andy"],
         ["user", "add", f"whatsapp:{ALICE_WA}", "--role", "member", "--agent", "andy"],
         ["wire", "telegram", str(ALICE_TG), "andy"], ["wire", "slack", SLACK_DM, "andy"],
         ["wire", "whatsapp", ALICE_WA, "andy"]])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares change per 600 s."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    return 600 * sum((p[0] - mx) * (p[1] - my) for p in points) / var if var else 0.0


def answered(fakes: dict) -> dict[str, int]:
    """marker -> how many messages carrying it the platforms received from the bot."""
    counts: dict[str, int] = {}
    for fake in (fakes["telegram"], fakes["slack"], fakes["whatsapp"]):
        for req in fake.accepted():
            text = json.dumps(req.json) if req.json is not None else json.dumps(req.form)
            if "ack " not in text:
                continue
            for marker in set(MARKER.findall(text)):
                counts[marker] = counts.get(marker, 0) + 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", nargs="?", type=int, default=600)
    ap.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    ap.add_argument("--rate", type=float, default=4.0, help="requests per second (default 4)")
    args = ap.parse_args()
    rnd = random.Random(15)
    with tempfile.TemporaryDirectory(prefix="nanoclaw-soak-") as tmp, FakeModel(script=answer) as model, \
            FakeTelegram() as tg, FakeSlack() as sl, FakeWhatsApp() as wa, FakeDiscord() as dc:
        fakes = {"telegram": tg, "slack": sl, "whatsapp": wa, "discord": dc}
        service = start_service(Path(tmp), args.runtime, fakes, model)
        acks: list[float] = []
        statuses: dict[int, int] = {}
        sent: set[str] = set()
        samples: list[tuple[float, float, int]] = []
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                rss, fds = service.sample()
                samples.append((time.monotonic(), rss, fds))
                stop.wait(5)

        threading.Thread(target=sampler, daemon=True).start()
        try:
            started = time.monotonic()
            n = 0
            kinds = (telegram, slack, whatsapp)
            while time.monotonic() - started < args.seconds:
                n += 1
                due = started + n / args.rate
                time.sleep(max(0.0, due - time.monotonic()))
                roll = rnd.random()
                if n % 8 == 0:
                    request = discord(n)
                else:
                    marker = f"soak-{n}"
                    request = kinds[n % 3](n, marker)
                    if roll < 0.02:
                        request = forged(*request)
                    elif roll < 0.07:
                        request = malformed(*request)
                    else:
                        sent.add(marker)
                status, took = post(service.port, *request)
                acks.append(took)
                statuses[status] = statuses.get(status, 0) + 1
                if roll > 0.9 and n % 8:  # the platform retries the same delivery
                    status, took = post(service.port, *request)
                    acks.append(took)
                    statuses[status] = statuses.get(status, 0) + 1
                if n % max(1, int(args.rate * 60)) == 0:
                    print(f"  {int(time.monotonic() - started)} s: {len(acks)} requests, "
                          f"{len(answered(fakes))}/{len(sent)} markers answered", flush=True)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and not sent <= set(answered(fakes)):
                time.sleep(1)
        finally:
            stop.set()
            service.stop()
        counts = answered(fakes)
        lost = sorted(sent - set(counts), key=lambda m: int(m.split("-")[1]))
        twice = sorted(m for m, c in counts.items() if c > 1)
        warm = [s for s in samples if s[0] - samples[0][0] >= 60] or samples
        print(f"\nsoak: {args.seconds} s at {args.rate}/s on {args.runtime}; {len(acks)} requests {dict(sorted(statuses.items()))}")
        print(f"  webhook ack   p50 {pct(acks, .5) * 1000:.1f} ms   p99 {pct(acks, .99) * 1000:.1f} ms   "
              f"max {max(acks) * 1000:.1f} ms   (target p99 < 50 ms)")
        print(f"  memory        {warm[0][1]:.0f} MiB after 1 min -> {warm[-1][1]:.0f} MiB at the end "
              f"(max {max(s[1] for s in warm):.0f}; slope {slope([(s[0], s[1]) for s in warm]):+.1f} MiB/10 min)")
        print(f"  open files    {warm[0][2]} after 1 min -> {warm[-1][2]} at the end "
              f"(max {max(s[2] for s in warm)}; slope {slope([(s[0], s[2]) for s in warm]):+.1f}/10 min)")
        print(f"  markers       sent {len(sent)}, answered {len(sent & set(counts))}, lost {len(lost)}, "
              f"answered twice {len(twice)}; model turns {len(model.model_calls())}")
        if lost or twice:
            print(f"  lost: {lost[:20]}  twice: {twice[:20]}")


if __name__ == "__main__":
    main()
