"""What the service costs while nothing happens, and what a warm sandbox holds in memory.

    .venv/bin/python -m bench.idle [SECONDS] [--runtime bwrap|docker]     (default 60 s, bwrap)

The service runs as `make run` starts it (supervisord: web with the background, proxy), three
people each have a DM wired to the agent and send one message, so three sandboxes are warm (the
runner and the SDK's CLI idle, waiting for the next message). Then nothing happens for SECONDS:
the CPU time every process of the tree used meanwhile (utime + stime from /proc, children that
ended included) is summed per role, and divided by the wall time: the share of one core.
Memory: resident set of each process at the end, per role.
Target (issue 19): the whole tree at rest under 1% of one core.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.telegram_api import TOKEN, FakeTelegram  # noqa: E402
from service_harness import SupervisedService, _children, cmdline, post  # noqa: E402

SECRET = "bench-idle-secret-0123456789"
PEOPLE = (111222331, 111222332, 111222333)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime, with the children it waited for (cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def role_of(pid: int, sandbox_pids: set[int]) -> str:
    cmd = cmdline(pid)
    if pid in sandbox_pids:
        if b"-m agent_runner" in cmd:
            return "sandbox: runner (python)"
        if b"claude" in cmd.split(b" ")[0]:
            return "sandbox: SDK CLI (node)"
        return "sandbox: other (bwrap, shell)"
    for mark, role in ((b"supervisord", "supervisord"), (b"gunicorn", "web (gunicorn + background)"),
                       (b"nanoclaw.proxy", "proxy"), (b"nanoclaw proxy", "proxy")):
        if mark in cmd:
            return role
    return "other"


def tree(svc: SupervisedService) -> tuple[list[int], set[int]]:
    children = _children()
    sandbox: set[int] = set()
    for root in svc.sandbox_roots():
        todo = [root]
        while todo:
            pid = todo.pop()
            sandbox.add(pid)
            todo += children.get(pid, [])
    return sorted(set(svc.tree()) | sandbox), sandbox


def three_people_service(tmp: Path, runtime: str, model, tg, preexec=None) -> SupervisedService:
    """The service as `make run` starts it, with PEOPLE each wired to Andy in a DM of their own."""
    setup = [["agent", "create", "Andy"]]
    for person in PEOPLE:
        setup += [["user", "add", f"telegram:{person}", "--role", "member", "--agent", "andy"],
                  ["wire", "telegram", str(person), "andy"]]
    return SupervisedService(tmp, {
        "NANOCLAW_RUNTIME": runtime, "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-bench",
        "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET}, setup, preexec=preexec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", nargs="?", type=int, default=60)
    ap.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nanoclaw-idle-") as tmp, \
            FakeModel(script=lambda req: Reply.say("ok")) as model, FakeTelegram() as tg:
        svc = three_people_service(Path(tmp), args.runtime, model, tg)
        try:
            for n, person in enumerate(PEOPLE):
                update = {"update_id": 940000000 + n, "message": {
                    "message_id": 10 + n, "from": {"id": person, "is_bot": False, "first_name": f"P{n}"},
                    "chat": {"id": person, "type": "private", "first_name": f"P{n}"}, "date": int(time.time()),
                    "text": "hello"}}
                post(svc.port, "/webhooks/telegram", json.dumps(update).encode(),
                     {"X-Telegram-Bot-Api-Secret-Token": SECRET})
            deadline = time.monotonic() + 120
            while len(tg.calls("sendMessage")) < len(PEOPLE) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(5)  # the turns' tails (typing stops, acks, delivery) settle
            pids, sandbox = tree(svc)
            if len(svc.sandbox_roots()) < len(PEOPLE):
                raise SystemExit(f"expected {len(PEOPLE)} warm sandboxes, found {len(svc.sandbox_roots())}")
            before = {pid: cpu_seconds(pid) for pid in pids}
            started = time.monotonic()
            time.sleep(args.seconds)
            wall = time.monotonic() - started
            pids_after, sandbox_after = tree(svc)
            used: dict[str, float] = {}
            memory: dict[str, list[float]] = {}
            for pid in pids_after:
                role = role_of(pid, sandbox_after)
                used[role] = used.get(role, 0.0) + cpu_seconds(pid) - before.get(pid, 0.0)
                memory.setdefault(role, []).append(rss_mib(pid))
        finally:
            svc.stop()
    total = sum(used.values())
    print(f"\nidle: {len(PEOPLE)} warm sandboxes ({args.runtime}) and the service, quiet for {wall:.0f} s")
    print(f"  whole tree: {total:.2f} CPU s = {100 * total / wall:.2f}% of one core   (target < 1%)")
    for role in sorted(used, key=lambda r: -used[r]):
        rss = memory.get(role, [])
        print(f"  {role:32s} {100 * used[role] / wall:6.2f}% of a core   RSS {sum(rss):7.1f} MiB in {len(rss)} "
              f"process(es)" + (f" ({sum(rss) / len(PEOPLE):.1f} MiB per sandbox)" if role.startswith("sandbox")
                                else ""))


if __name__ == "__main__":
    main()
