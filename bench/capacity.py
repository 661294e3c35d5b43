"""What one machine holds: sandbox starts and answered messages per minute, and memory per sandbox.

    .venv/bin/python -m bench.capacity [--people 8] [--rounds 5] [--think 0] [--runtime bwrap|docker]

The service runs as `make run` starts it (supervisord: web with the background, proxy), with
MAX_CONCURRENT_CONTAINERS = the number of people; each person has a DM wired to one agent, so each
is a session with a sandbox of its own. The model is a fake on 127.0.0.1 answering after --think
seconds (0: the figures are NanoClaw's and the SDK's own cost, the ceiling a real model only lowers).
- cold: every person writes at once; until all are answered (sandbox start + first turn each);
- warm: every person writes the next message as soon as the previous one was answered, --rounds
  times (people as concurrent users, closed loop): answered messages per minute;
- memory: resident set of each sandbox and of the host's programs at the end, and how many warm
  sandboxes the machine's available memory would hold at that size.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402
from idle import role_of, rss_mib, tree  # noqa: E402
from service_harness import SupervisedService, post  # noqa: E402

SECRET = "bench-capacity-secret-0123456789"


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--people", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--think", type=float, default=0.0, help="the fake model's answer time, seconds")
    ap.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    args = ap.parse_args()
    people = [111300000 + i for i in range(args.people)]
    free_before = available_mib()
    with tempfile.TemporaryDirectory(prefix="nanoclaw-capacity-") as tmp, \
            FakeModel(script=lambda req: Reply.say("ok", delay_s=args.think)) as model, FakeTelegram() as tg:
        setup = [["agent", "create", "Andy"]]
        for person in people:
            setup += [["user", "add", f"telegram:{person}", "--role", "member", "--agent", "andy"],
                      ["wire", "telegram", str(person), "andy"]]
        svc = SupervisedService(Path(tmp), {
            "NANOCLAW_RUNTIME": args.runtime, "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-cap",
            "MAX_CONCURRENT_CONTAINERS": str(args.people), "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_WEBHOOK_SECRET": SECRET}, setup)
        ids = iter(range(950000000, 951000000))
        lock = threading.Lock()

        def say(person: int, text: str) -> None:
            with lock:
                n = next(ids)
            update = {"update_id": n, "message": {
                "message_id": n % 100000, "from": {"id": person, "is_bot": False, "first_name": "P"},
                "chat": {"id": person, "type": "private", "first_name": "P"}, "date": int(time.time()), "text": text}}
            post(svc.port, "/webhooks/telegram", json.dumps(update).encode(), {"X-Telegram-Bot-Api-Secret-Token": SECRET})

        def answers(person: int) -> int:
            return sum(1 for c in tg.calls("sendMessage") if str(c.get("chat_id")) == str(person))

        def wait_answers(person: int, n: int, timeout: float = 300) -> None:
            deadline = time.monotonic() + timeout
            while answers(person) < n:
                if time.monotonic() > deadline:
                    raise SystemExit(f"person {person}: {answers(person)} of {n} answers after {timeout:.0f} s")
                time.sleep(0.02)
        try:
            started = time.monotonic()
            for person in people:
                say(person, "hello")
            for person in people:
                wait_answers(person, 1)
            cold = time.monotonic() - started

            per_turn: list[float] = []

            def user(person: int) -> None:
                for r in range(args.rounds):
                    t0 = time.monotonic()
                    say(person, f"round {r}")
                    wait_answers(person, 2 + r)
                    per_turn.append(time.monotonic() - t0)
            threads = [threading.Thread(target=user, args=(p,)) for p in people]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            warm = time.monotonic() - started
            time.sleep(2)
            pids, sandbox = tree(svc)
            memory: dict[str, float] = {}
            for pid in pids:
                role = role_of(pid, sandbox)
                memory[role] = memory.get(role, 0.0) + rss_mib(pid)
            sandboxes = args.people  # one session each, all warm (MAX_CONCURRENT_CONTAINERS = people)
        finally:
            svc.stop()
    answered = args.people * args.rounds
    per_sandbox = sum(v for k, v in memory.items() if k.startswith("sandbox")) / max(1, sandboxes)
    host = sum(v for k, v in memory.items() if not k.startswith("sandbox"))
    print(f"\ncapacity: {args.people} people, {args.rounds} rounds, model think time {args.think:.1f} s, "
          f"{args.runtime}, {os.cpu_count()} cores")
    print(f"  cold: {args.people} sandboxes started and answered in {cold:.1f} s = "
          f"{60 * args.people / cold:.0f} sandbox starts per minute")
    print(f"  warm: {answered} messages answered in {warm:.1f} s = {60 * answered / warm:.0f} per minute "
          f"(each person waits for the answer: p50 {statistics.median(per_turn) * 1000:.0f} ms, "
          f"max {max(per_turn) * 1000:.0f} ms)")
    print(f"  memory: {per_sandbox:.0f} MiB per warm sandbox ({sandboxes} warm), host programs {host:.0f} MiB; "
          f"{free_before / 1024:.1f} GiB available before the run holds ~{(free_before - host) / per_sandbox:.0f} "
          f"warm sandboxes at this size")


if __name__ == "__main__":
    main()
