"""Delivery with one hostile session beside 20 honest ones (issue 39, item 3).

    .venv/bin/python -m bench.delivery_isolation [ROUNDS]

The real delivery loop (outbound/watcher.py: inotify nudges, the session pool, kept connections),
real session folders and SQLite files written by the runner's own SessionStore, and a fake Telegram
Bot API on 127.0.0.1. Each round, 20 honest sessions each commit one text reply, 20 ms apart; the
figure is the time from the runner's commit to the fake receiving that sendMessage. Three legs,
alternated round by round:

- baseline: the 20 honest sessions alone;
- hostile: the same, while a 21st session keeps sending 40 MB files to a chat whose sendDocument
  takes 2 s (a slow platform call and a large copy, each row after the last);
- hostile, one worker: the same with the pool cut to one worker, as delivery was before (one thread
  for every session).

Goal: the hostile leg's honest p50 <= 1.10x the baseline's, in the same run.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from nanoclaw.config import Settings
from nanoclaw.outbound import watcher
from nanoclaw.sessions import store
from tests.fakes.telegram_api import TOKEN, FakeTelegram

from agent_runner.store import SessionStore  # noqa: E402  (nanoclaw.sessions put container/ on the path)
from agent_runner.targets import Target  # noqa: E402

HONEST = 20
HOSTILE_CHAT = "666"
SLOW_SEND_S = 2.0
FILE_MB = 40


class Telegram(FakeTelegram):
    """Stamps the arrival of each text; the hostile chat's documents take SLOW_SEND_S."""

    def __init__(self):
        super().__init__()
        self.arrived: dict[str, float] = {}
        self.documents = 0

    def _sendMessage(self, p, req):
        self.arrived[str(p.get("text"))] = time.monotonic()
        return super()._sendMessage(p, req)

    def _sendDocument(self, p, req):
        time.sleep(SLOW_SEND_S)
        self.documents += 1
        return super()._sendDocument(p, req)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Hostile(threading.Thread):
    """A runner that writes a file row as soon as its previous one was delivered."""

    def __init__(self, runner: SessionStore, outbox: Path, tg: Telegram):
        super().__init__(daemon=True)
        self.runner, self.outbox, self.tg = runner, outbox, tg
        self.stop = threading.Event()
        self.blob = os.urandom(FILE_MB << 20)

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            name = f"{os.urandom(4).hex()}-big.bin"
            (self.outbox / name).write_bytes(self.blob)
            seen = self.tg.documents
            self.runner.write_out({"op": "file", "path": f"outbox/{name}"}, Target("telegram", HOSTILE_CHAT))
            while self.tg.documents == seen and not self.stop.wait(0.05):
                pass
            (self.outbox / name).unlink(missing_ok=True)


def leg(settings, tg, sessions, hostile_session, workers: int, round_no: int) -> list[float]:
    watcher.DELIVERY_WORKERS = workers
    live = {path: () for path, _ in sessions}
    hostile = None
    if hostile_session is not None:
        live[hostile_session[0]] = ()
    stop = threading.Event()
    loop = watcher.DeliveryLoop(settings, live, lambda: None, stop)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        time.sleep(0.3)  # the first full pass and the watches
        if hostile_session is not None:
            path, runner = hostile_session
            hostile = Hostile(runner, store.outbox_dir(path), tg)
            hostile.start()
            time.sleep(0.5)  # its first file is on its way
        wrote: dict[str, float] = {}
        for i, (path, runner) in enumerate(sessions):
            text = f"r{round_no}-w{workers}-h{int(hostile_session is not None)}-s{i}"
            wrote[text] = time.monotonic()
            runner.write_out({"op": "text", "text": text}, Target("telegram", str(1000 + i)))
            time.sleep(0.02)
        deadline = time.monotonic() + 120
        while not all(t in tg.arrived for t in wrote) and time.monotonic() < deadline:
            time.sleep(0.005)
        return [tg.arrived[t] - wrote[t] for t in wrote if t in tg.arrived]
    finally:
        if hostile is not None:
            hostile.stop.set()
            hostile.join(10)
        stop.set()
        loop.interrupt()
        thread.join(10)
        loop.close()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-delivery-"))
    with Telegram() as tg:
        settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "g"),
                                          "TZ": "UTC", "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE": tg.url},
                                 dotenv_path=tmp / "none.env")
        sessions = []
        for i in range(HONEST):
            path = tmp / "sessions" / f"honest{i}"
            store.prepare(path, Target("telegram", str(1000 + i)))
            sessions.append((path, SessionStore.of_session(path)))
        path = tmp / "sessions" / "hostile"
        store.prepare(path, Target("telegram", HOSTILE_CHAT))
        hostile = (path, SessionStore.of_session(path))
        figures: dict[str, list[float]] = {"baseline": [], "hostile": [], "hostile, one worker": []}
        for r in range(rounds):
            figures["baseline"] += leg(settings, tg, sessions, None, 8, r)
            figures["hostile"] += leg(settings, tg, sessions, hostile, 8, r)
            figures["hostile, one worker"] += leg(settings, tg, sessions, hostile, 1, r)
    print(f"Delivery of {HONEST} honest sessions' replies ({rounds} rounds), commit -> the platform received it; "
          f"the hostile session's {FILE_MB} MB files delivered meanwhile: {tg.documents}")
    for name, values in figures.items():
        print(f"  {name:20s} n={len(values):3d}  p50 {pct(values, .5) * 1000:7.1f} ms  p99 {pct(values, .99) * 1000:7.1f} ms"
              f"  mean {statistics.mean(values) * 1000:7.1f} ms")
    base = pct(figures["baseline"], .5)
    print(f"honest p50 beside a hostile session / baseline: x{pct(figures['hostile'], .5) / base:.2f} (goal <= 1.10); "
          f"with one worker (as before): x{pct(figures['hostile, one worker'], .5) / base:.2f}")


if __name__ == "__main__":
    main()
