"""The history index at volume, and what it costs a routed message (issue 40).

    .venv/bin/python -m bench.history_search [MESSAGES]

1. MESSAGES (default 100,000) messages of one agent across 20 chats, each a line of ordinary words,
   indexed through history.add into a fresh central SQLite database (FTS5); then search latency
   p50/p99 for rare and common words, two words, a phrase, within one chat and over everything
   (what the owner's DM searches), 200 searches each. Goal: p99 <= 50 ms.
2. The index's size per message (the database file before and after).
3. A routed message with and without what this issue adds to its path (the history index and the
   memory snapshot in the session's options): a Telegram webhook accepted by the real app and routed
   by the intake into real session files, 400 messages a leg, legs alternating. Goal: <= 5 % more.
"""
from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nanoclaw.app import create_app
from nanoclaw.config import Settings
from nanoclaw.db import database
from nanoclaw.inbound import router
from nanoclaw.memory import history
from nanoclaw.memory.scopes import Reach, Scope
from nanoclaw.migrate import apply_pending
from nanoclaw.sessions import store

WORDS = ("the a to and of in is it you that for on with this be have are not at my do we can your will "
         "meeting lunch dinner train ticket invoice report garden recipe school football doctor holiday "
         "weather birthday project budget deadline flight hotel museum concert parcel delivery insurance "
         "password router printer battery charger kitchen bathroom plumber electrician neighbour").split()
RARE = ["zephyrine", "quokkaland", "marzipanic", "velocitron"]


def line(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 30))]
    if n % 997 == 0:
        words.insert(rng.randrange(len(words)), rng.choice(RARE))
    return " ".join(words)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def app_in(tmp: Path):
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "g"),
                                      "TZ": "UTC", "DATABASE_URL": f"sqlite:///{tmp / 'data' / 'nanoclaw.db'}"},
                             dotenv_path=tmp / "none.env")
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    return app, settings


def searches(n_messages: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-history-"))
    _app, settings = app_in(tmp)
    db_file = tmp / "data" / "nanoclaw.db"
    database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    before = db_file.stat().st_size
    rng = random.Random(7)
    started = time.monotonic()
    with database.atomic():
        for i in range(n_messages):
            chat = str(-1000 - i % 20)
            history.add("andy", "telegram", chat, None, "s", f"m{i}", f"telegram:{i % 50}", f"P{i % 50}",
                        f"2026-{1 + i * 11 // n_messages:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00", line(rng, i))
    took = time.monotonic() - started
    started = time.monotonic()
    history.catch_up()  # the FTS5 index brought up to date (each search does this for what is new)
    indexed = time.monotonic() - started
    database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    after = db_file.stat().st_size
    print(f"kept {n_messages:,} messages in {took:.1f} s and indexed them in {indexed:.1f} s; the database grew "
          f"{(after - before) / 1e6:.1f} MB, {(after - before) / n_messages:.0f} bytes a message (text and index)")
    chat = Reach(Scope("chat", "telegram:-1003"), False, "telegram", "-1003")
    everything = Reach(Scope("private", "telegram:1"), True, "", "")
    cases = [("a rare word", "zephyr"), ("a common word", "meeting"), ("two words", "train ticket"),
             ("a phrase", '"lunch with"'), ("a word nowhere", "xylophonic")]
    print(f"search latency, 200 searches each (limit 10), over {n_messages:,} messages:")
    worst = 0.0
    for reach_name, reach in (("one chat", chat), ("everything", everything)):
        for name, words in cases:
            times = []
            for _ in range(200):
                t = time.perf_counter()
                history.search("andy", reach, words, limit=10)
                times.append(time.perf_counter() - t)
            worst = max(worst, pct(times, .99))
            print(f"  {reach_name:10s} {name:14s} p50 {pct(times, .5) * 1000:6.2f} ms  p99 {pct(times, .99) * 1000:6.2f} ms")
    print(f"the slowest p99: {worst * 1000:.1f} ms (goal <= 50 ms)")
    database.close()


def routing(n: int = 400) -> None:
    """A Telegram webhook accepted and routed (the intake's path: the event kept, acknowledged, routed on its
    round, marked routed), as in the service, with and without this issue's additions."""
    import json

    from nanoclaw.inbound import intake
    from tests.tg_flow import SECRET, message, person
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-route-"))
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "g"),
                                      "TZ": "UTC", "DATABASE_URL": f"sqlite:///{tmp / 'data' / 'nanoclaw.db'}",
                                      "TELEGRAM_BOT_TOKEN": "7000001:AAH-bench-token-not-real_0123456789",
                                      "TELEGRAM_WEBHOOK_SECRET": SECRET, "TELEGRAM_API_BASE": "http://127.0.0.1:9"},
                             dotenv_path=tmp / "none.env")
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", "telegram:42", "--role", "owner"),
                 ("wire", "telegram", "42", "andy")):
        runner.invoke(args=["nanoclaw", *args])
    hooks, providers = list(router._WRITTEN), list(store._option_providers)
    client, sender = app.test_client(), person(42, "Bench")

    def route(i: int) -> float:
        body = json.dumps(message(42, sender, f"message {i} about the garden and the plumber")).encode()
        t = time.perf_counter()
        resp = client.post("/webhooks/telegram", data=body, headers={"Content-Type": "application/json",
                                                                      "X-Telegram-Bot-Api-Secret-Token": SECRET})
        assert resp.status_code == 200
        intake.route_accepted(intake.unrouted(-1), settings, lambda _s: None)
        return time.perf_counter() - t

    for i in range(50):
        route(10_000 + i)  # warm: the session made, caches filled
    legs = {"without": [], "with": []}
    for i in range(n):
        for name in ("without", "with"):
            router._WRITTEN[:] = hooks if name == "with" else []
            store._option_providers[:] = providers if name == "with" else []
            legs[name].append(route(2 * i + (name == "with")))
    router._WRITTEN[:], store._option_providers[:] = hooks, providers
    base, added = statistics.median(legs["without"]), statistics.median(legs["with"])
    print(f"a webhook accepted and routed into a session, {n} a leg: without the index and the memory snapshot p50 "
          f"{base * 1000:.2f} ms, with them {added * 1000:.2f} ms: {100 * (added / base - 1):+.1f} % (goal <= 5 %)")
    database.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    os.environ.setdefault("TZ", "UTC")
    searches(n)
    routing()


if __name__ == "__main__":
    main()
