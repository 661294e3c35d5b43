"""The door under maximal pushes from remote sandboxes, while another sandbox is served (issue 60, item 5).

    .venv/bin/python -m bench.door_push [ROUNDS]

The `proxy` program as `make run` runs it, with NANOCLAW_DOOR_LISTEN on 127.0.0.1. Another sandbox
(bob's session) asks the session channel for its outbound copy about ten times a second, as a runner
does. Legs alternate, ROUNDS times each (default 3):

- baseline: nothing else at the door;
- pushes: 16 sandboxes (the same ones each round) push the most the door takes (10 MiB) at once, from a
  process of their own, half honest rows and half a body of two-letter ids that once built 20 times its
  size in memory. (New sessions each round would each add the SQLite copy the door keeps open for a
  live session until it is idle: that is per session, not per push.)

Printed: the door's resident memory at rest and its peak in each push leg (the kernel's VmHWM of the
proxy program, reset before the leg), against the room it keeps for bodies in flight; the other
sandbox's p50/p99 in each leg; what the pushes were told. Named figures from before the fix, for
comparison: 8 such pushes took the door from 38 to 1,616 MiB and stalled other connections 2-6 s.
Goals: peak growth under the room + 128 MiB (the test's bound), the other sandbox's p99 under 1 s.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "container")]

from agent_runner.door_link import DoorLink  # noqa: E402

from bench.door_flood import pct  # noqa: E402
from tests.service_harness import free_port  # noqa: E402

PUSHERS = 16


def memory(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) << 10
    raise LookupError(field)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-push-"))
    port = free_port()
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"),
           "TZ": "UTC", "NANOCLAW_DOOR_LISTEN": f"127.0.0.1:{port}", "NANOCLAW_ENV_FILE": str(tmp / "none"),
           "DATABASE_URL": f"sqlite:///{tmp / 'nc.db'}", "ANTHROPIC_API_KEY": "sk-ant-bench"}
    os.environ.update({k: v for k, v in env.items() if k.startswith(("NANOCLAW_", "DATABASE_URL"))})
    flask = [str(ROOT / ".venv/bin/flask"), "--app", "app", "nanoclaw"]
    for args in (["migrate"], ["agent", "create", "Andy"], ["agent", "create", "Bob"]):
        subprocess.run(flask + args, cwd=ROOT, env=env, check=True, capture_output=True)
    proxy = subprocess.Popen(flask + ["proxy"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=open(tmp / "proxy.log", "w"))
    try:
        from nanoclaw.config import Settings, install_secret
        from nanoclaw.remote import passes, starts
        from nanoclaw.remote.bodies import BODIES_IN_FLIGHT
        from nanoclaw.remote.tls import door_tls
        from nanoclaw.sessions import store
        settings = Settings.load()
        key = passes.door_key(install_secret(settings))
        url = f"https://127.0.0.1:{port}"

        def token(folder: str, session: str) -> str:
            path = store.session_path(settings.sessions_dir, folder, session)
            store.prepare(path, store.Target("telegram", "111"))
            return passes.mint(key, passes.Claims(settings.install_id, folder, session, starts.begin(path),
                                                  int(time.time() + 3600)))

        deadline = time.monotonic() + 30
        ca = None
        while True:
            try:
                ca = ca or door_tls(settings).ca_pem
                other = DoorLink(url, token("bob", "other"), ca).session()
                if other.request("GET", "/outbound", timeout=10)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the door did not answer; see {tmp / 'proxy.log'}")
            time.sleep(0.2)
        at_rest = memory(proxy.pid, "VmRSS")
        legs: dict[str, list[float]] = {"baseline": [], "pushes": []}
        peaks, told = [], []
        for r in range(rounds):
            for name in ("baseline", "pushes"):
                open(f"/proc/{proxy.pid}/clear_refs", "w").write("5")
                start_rss = memory(proxy.pid, "VmRSS")
                done = threading.Event()
                pushing = None
                if name == "pushes":
                    kinds = ["honest", "hostile"] * (PUSHERS // 2)
                    ask = {"url": url, "ca": ca,
                           "pushes": [[token("andy", f"p{i}"), kind] for i, kind in enumerate(kinds)]}
                    pushing = subprocess.Popen([sys.executable, "-m", "tests.remote.pushers"], cwd=ROOT,
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                    pushing.stdin.write(json.dumps(ask))
                    pushing.stdin.close()
                else:
                    threading.Timer(8.0, done.set).start()
                while not (done.is_set() if pushing is None else pushing.poll() is not None):
                    began = time.monotonic()
                    status = other.request("GET", "/outbound", timeout=60)[0]
                    legs[name].append(time.monotonic() - began if status == 200 else float("inf"))
                    time.sleep(0.1)
                if pushing is not None:
                    told += json.loads(pushing.stdout.read())
                    peaks.append((start_rss, memory(proxy.pid, "VmHWM")))
    finally:
        proxy.terminate()
        proxy.wait(10)
    mib = 1 << 20
    print(f"The door (the proxy program) under {PUSHERS} pushes of 10 MiB at once, {rounds} round(s); another "
          f"sandbox asking about ten times a second")
    print(f"  at rest: {at_rest / mib:.1f} MiB resident; the room for bodies in flight: {BODIES_IN_FLIGHT / mib:.0f} MiB")
    for start, peak in peaks:
        print(f"  push leg: {start / mib:.1f} MiB before, peak {peak / mib:.1f} MiB (grew {(peak - start) / mib:.1f} MiB)")
    for name, times in legs.items():
        failed = sum(t == float("inf") for t in times)
        ok = [t for t in times if t != float("inf")]
        print(f"  other sandbox, {name:8s}: {len(times)} requests, p50 {pct(ok, .5) * 1000:7.1f} ms  "
              f"p99 {pct(ok, .99) * 1000:7.1f} ms  mean {statistics.mean(ok) * 1000:6.1f} ms  failed {failed}")
    counts = {s: told.count(s) for s in sorted(set(told))}
    print(f"  the pushes were told: {', '.join(f'{k}: {v}' for k, v in counts.items())} (0: closed, tried again)")
    grown = max(peak for _start, peak in peaks) - at_rest  # from rest: what the allocator keeps counts too
    p99 = pct([t for t in legs["pushes"] if t != float("inf")], .99)
    print(f"highest peak over rest {grown / mib:.0f} MiB (goal < {(BODIES_IN_FLIGHT + (128 << 20)) / mib:.0f}; before the fix "
          f"8 pushes took it from 38 to 1,616 MiB); other sandbox p99 under pushes {p99 * 1000:.0f} ms, "
          f"x{p99 / pct(legs['baseline'], .99):.1f} its baseline (goal < 1,000 ms; before: stalls of 2-6 s)")


if __name__ == "__main__":
    main()
