"""What the whole install costs, at rest and warm: memory (RSS, with PSS beside it) and CPU of every
process of the tree, per role and in total.

    .venv/bin/python -m bench.footprint [SECONDS] [--runtime bwrap|docker]   (default 60 s a phase)

The service runs as `make run` starts it (supervisord: web with the background jobs, proxy), three
people each have a DM wired to the agent. Three phases, one run:
  1. at rest: started, no message yet, no sandbox ever started; quiet for SECONDS;
  2. after 20 messages (round robin over the three people, each answered before the next): memory
     of every process;
  3. warm and quiet: the three sandboxes idle for SECONDS;
  4. one web read (the reading worker starts, reads a local page, leaves after WEB_IDLE_S idle), then
     warm and quiet again: the host programs as in 3 (issue 62: reading leaves nothing behind).
CPU is what the kernel's cgroup accounting counted for the service's cgroup over the phase's wall
time, as a share of one core: every thread and process that ran, ended ones included, in ns
(bench/cgroup_cpu.py; where no cgroup can be made, /proc's ticks, and the report says so); memory is the sum of RSS of every process (PSS from smaps_rollup beside it:
shared pages counted once). Issue 43's goals: at rest ≤ 150 MB and ≤ 0.1 % of a core; warm, three
sandboxes, ≤ 0.3 % for the whole tree and the host programs ≤ 150 MB together.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.telegram_api import FakeTelegram  # noqa: E402
from cgroup_cpu import Accounting, container_usage_ns  # noqa: E402
from idle import PEOPLE, SECRET, cpu_seconds, role_of, rss_mib, three_people_service, tree  # noqa: E402
from service_harness import cmdline, post  # noqa: E402

MESSAGES = 20
WEB_IDLE_S = 10  # the reading worker's idle time here (the default is 300 s)


def pss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def memory(svc) -> dict[str, tuple[float, float, int]]:
    """role -> (RSS MiB, PSS MiB, processes)."""
    pids, sandbox = tree(svc)
    out: dict[str, tuple[float, float, int]] = {}
    for pid in pids:
        role = role_of(pid, sandbox)
        rss, pss, n = out.get(role, (0.0, 0.0, 0))
        out[role] = (rss + rss_mib(pid), pss + pss_mib(pid), n + 1)
    return out


ACCT: Accounting | None = None  # the service's cgroup, where the machine lets us make one
METHOD = {True: "CPU from the service's cgroup (cpuacct, ns): every thread and process that ran in the phase, "
                "ended ones included; Docker containers from their own cgroups",
          False: "CPU from /proc utime + stime (10 ms ticks; processes alive at the end and ended children "
                 "their parent waited for; no cgroup could be made here, so a lower bound)"}


def quiet(svc, seconds: int) -> tuple[dict[str, float], float]:
    """role -> CPU seconds over a quiet period; its wall time."""
    pids, sandbox = tree(svc)
    if ACCT is None:
        before = {pid: cpu_seconds(pid) for pid in pids}
        started = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - started
        pids_after, sandbox = tree(svc)
        used: dict[str, float] = {}
        for pid in pids_after:
            role = role_of(pid, sandbox)
            used[role] = used.get(role, 0.0) + cpu_seconds(pid) - before.get(pid, 0.0)
        return used, wall
    # Our own descendants (host programs, bubblewrap sandboxes) go into their role's cgroup; a Docker
    # container's processes are not ours to move and are read from the container's cgroup.
    ours = set(svc.tree())
    names = {}
    for pid in pids:
        if pid in ours:
            role = role_of(pid, sandbox)
            if ACCT.place(pid, role):
                names[ACCT.child(role).name] = role
    containers = [pid for pid in svc.sandbox_roots() if pid not in ours]
    before, c_before = ACCT.roles(), {pid: container_usage_ns(pid) for pid in containers}
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    after, c_after = ACCT.roles(), {pid: container_usage_ns(pid) for pid in containers}
    used = {}
    for name, ns in after.items():
        role = names.get(name, name)
        used[role] = used.get(role, 0.0) + (ns - before.get(name, 0)) / 1e9
    for pid in containers:
        if c_before.get(pid) is not None and c_after.get(pid) is not None:
            used["sandbox: Docker containers"] = used.get("sandbox: Docker containers", 0.0) + (c_after[pid] - c_before[pid]) / 1e9
    return used, wall


def page_server():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading
    body = ("<html><head><title>A page</title></head><body><article><h1>A page</h1>"
            + "<p>Words to read, kept as the main text of the page.</p>" * 200 + "</article></body></html>").encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    server = ThreadingHTTPServer(("127.0.0.2", 0), Page)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def send(svc, tg, n: int, text: str = "") -> None:
    person = PEOPLE[n % len(PEOPLE)]
    update = {"update_id": 950000000 + n, "message": {
        "message_id": 100 + n, "from": {"id": person, "is_bot": False, "first_name": f"P{n % 3}"},
        "chat": {"id": person, "type": "private", "first_name": f"P{n % 3}"}, "date": int(time.time()),
        "text": text or f"message {n}"}}
    before = len(tg.calls("sendMessage"))
    post(svc.port, "/webhooks/telegram", json.dumps(update).encode(), {"X-Telegram-Bot-Api-Secret-Token": SECRET})
    deadline = time.monotonic() + 120
    while len(tg.calls("sendMessage")) <= before:
        if time.monotonic() > deadline:
            raise SystemExit(f"message {n} was not answered in 120 s")
        time.sleep(0.05)


def report(title: str, mem: dict, cpu: dict | None = None, wall: float | None = None) -> None:
    print(f"\n{title}")
    host = {r: m for r, m in mem.items() if not r.startswith("sandbox")}
    total_rss, total_pss = sum(m[0] for m in mem.values()), sum(m[1] for m in mem.values())
    line = f"  whole tree: RSS {total_rss:7.1f} MiB  PSS {total_pss:7.1f} MiB"
    if cpu is not None:
        line += f"   CPU {100 * sum(cpu.values()) / wall:.3f}% of one core"
    print(line)
    print(f"  host programs: RSS {sum(m[0] for m in host.values()):7.1f} MiB  PSS {sum(m[1] for m in host.values()):7.1f} MiB"
          + (f"   CPU {100 * sum(v for r, v in cpu.items() if not r.startswith('sandbox')) / wall:.3f}%"
             if cpu is not None else ""))
    for role in sorted(mem, key=lambda r: -mem[r][0]):
        rss, pss, n = mem[role]
        extra = f"   CPU {100 * cpu.get(role, 0.0) / wall:6.3f}%" if cpu is not None else ""
        print(f"  {role:32s} RSS {rss:7.1f} MiB  PSS {pss:7.1f} MiB in {n} process(es){extra}")
    if cpu is not None:
        for role in sorted(set(cpu) - set(mem)):  # ran in the phase, gone (or not a process) at its end
            print(f"  {role:32s} {'':38s} CPU {100 * cpu[role] / wall:6.3f}%")
        print(f"  ({METHOD[ACCT is not None]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", nargs="?", type=int, default=60)
    ap.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    args = ap.parse_args()
    global ACCT
    ACCT = Accounting.open(f"nanoclaw-footprint-{os.getpid()}")
    print(METHOD[ACCT is not None])
    site = page_server()
    page = f"http://127.0.0.2:{site.server_address[1]}/"
    os.environ.update(NANOCLAW_WEB_ALLOW_NETWORKS="127.0.0.2/32", NANOCLAW_WEB_ALLOW_PORTS=str(site.server_address[1]),
                      NANOCLAW_WEB_IDLE_S=str(WEB_IDLE_S))

    def brain(req):
        if "read the page" in req.current_prompt() and not req.turn_tool_results():
            return Reply.call("mcp__nanoclaw__web_read", url=page)
        return Reply.say("ok")
    with tempfile.TemporaryDirectory(prefix="nanoclaw-footprint-") as tmp, \
            FakeModel(script=brain) as model, FakeTelegram() as tg:
        svc = three_people_service(Path(tmp), args.runtime, model, tg, preexec=ACCT.enter if ACCT else None)
        try:
            time.sleep(5)  # start-up settles (the first sweep, the scheduler's first jobs)
            cpu, wall = quiet(svc, args.seconds)
            report(f"at rest: no sandbox ever started, quiet for {wall:.0f} s", memory(svc), cpu, wall)
            for n in range(MESSAGES):
                send(svc, tg, n)
            time.sleep(5)  # the turns' tails (typing stops, acks, delivery) settle
            mem = memory(svc)
            warm = mem.get("sandbox: SDK CLI (node)", (0, 0, 0))[2]
            report(f"after {MESSAGES} messages ({args.runtime}, {warm} warm sandboxes)", mem)
            cpu, wall = quiet(svc, args.seconds)
            report(f"warm and quiet: {warm} sandboxes idle for {wall:.0f} s", memory(svc), cpu, wall)
            send(svc, tg, MESSAGES, "read the page")  # a web read: the reading worker starts, reads, answers
            worker = [pid for pid in svc.tree() if b"nanoclaw.reading.worker" in cmdline(pid)]
            deadline = time.monotonic() + WEB_IDLE_S + 30
            while any(Path(f"/proc/{pid}").exists() for pid in worker) and time.monotonic() < deadline:
                time.sleep(0.5)
            print(f"\nthe reading worker ({len(worker)} process) read the page and left after {WEB_IDLE_S} idle s: "
                  f"{'gone' if not any(Path(f'/proc/{pid}').exists() for pid in worker) else 'STILL RUNNING'}")
            cpu, wall = quiet(svc, args.seconds)
            report(f"warm and quiet again, after a web read: {warm} sandboxes idle for {wall:.0f} s", memory(svc), cpu,
                   wall)
        finally:
            site.shutdown()
            svc.stop()
            if ACCT is not None:
                ACCT.close()
        baseline_proxy(Path(tmp))


def baseline_proxy(tmp: Path) -> None:
    """The proxy as it ran before (`flask --app app nanoclaw proxy`, the whole web app loaded) beside
    the program now, on the same data folder, in this run."""
    import os
    import subprocess
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_ENV_FILE": str(tmp / "none.env"), "TZ": "UTC"}
    env.pop("DATABASE_URL", None)
    sizes = {}
    for name, cmd in (("flask --app app nanoclaw proxy (before)", [str(ROOT / ".venv/bin/flask"), "--app", "app",
                                                                   "nanoclaw", "proxy"]),
                      ("python -m nanoclaw.proxy (now)", [str(ROOT / ".venv/bin/python"), "-m", "nanoclaw.proxy"])):
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(5)
        sizes[name] = (rss_mib(proc.pid), pss_mib(proc.pid))
        proc.terminate()
        proc.wait(20)
    print("\nthe proxy program alone, the same folder, this run:")
    for name, (rss, pss) in sizes.items():
        print(f"  {name:42s} RSS {rss:6.1f} MiB  PSS {pss:6.1f} MiB")


if __name__ == "__main__":
    main()
