"""What one sweep costs with many sessions of which few are active.

    .venv/bin/python -m bench.sweep_cost [N ...]      (session counts, default 1000 10000)

For each N: a fresh data dir with a migrated SQLite central DB and N sessions, each with its
own folder, inbound.db (routing, a few answered messages), outbound.db (replies, acks,
container_state) and heartbeat, as a session that has talked looks. 1% of them were used in
the last minutes (half of those have a running sandbox); the rest were last used days ago.
Measured: the regular sweep (Background.sweep: the active-set query, one runtime listing, every
active session's files read and decided) and, as the baseline, the same pass over all sessions
(what the start-up pass does once). The runtime is an in-memory stand-in that lists the running
half: listing real sandboxes is one engine call or one directory scan, the same for any N.
Target: ≤ 200 ms at 10,000 sessions, growing with the active sessions, not with N.
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "container")]

from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target as RunnerTarget  # noqa: E402
from nanoclaw.app import create_app  # noqa: E402
from nanoclaw.lifecycle.active import everything  # noqa: E402
from nanoclaw.lifecycle.background import Background  # noqa: E402
from nanoclaw.outbound.watcher import outbound_signature  # noqa: E402
from nanoclaw.config import Settings  # noqa: E402
from nanoclaw.db import database  # noqa: E402
from nanoclaw.migrate import apply_pending  # noqa: E402
from nanoclaw.models import AgentGroup, MessagingGroup, Session  # noqa: E402
from nanoclaw.sandboxes.manager import SandboxManager, sandbox_name  # noqa: E402
from nanoclaw.sessions import store  # noqa: E402

ACTIVE_SHARE = 0.01
ROUNDS = 15


class ListingRuntime:
    name = "memory"

    def __init__(self, names):
        self.names = list(names)

    def list_sandboxes(self, install_id):
        return self.names

    def is_running(self, name):
        return name in self.names

    def stop(self, name, timeout=5):
        pass

    def start(self, spec):
        pass


def template(base: Path) -> Path:
    """One session folder as a session that has talked leaves it; copied for every session."""
    path = base / "template"
    store.prepare(path, store.Target("telegram", "42"))
    agent = SessionStore.of_session(path)
    for i in range(5):
        mid = store.write_message(path, content={"text": f"message {i}", "sender": "Olga"},
                                  target=store.Target("telegram", "42"))
        agent.claim([mid])
        agent.finish_turn([mid], {"op": "text", "text": f"answer {i}"}, RunnerTarget("telegram", "42"),
                          in_reply_to=mid, ok=True)
    agent.set_tool(None)
    agent.touch_heartbeat()
    agent.out.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    agent.close()
    return path


def build(n: int, base: Path):
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(base / "data"), "NANOCLAW_GROUPS_DIR": str(base / "g"),
                                      "TZ": "UTC", "NANOCLAW_INSTALL_ID": "bench"}, dotenv_path=base / "none")
    create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    tpl = template(base)
    group = AgentGroup.create(name="Andy", folder="andy")
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    active_n = max(1, int(n * ACTIVE_SHARE))
    rows, running = [], []
    with database.atomic():
        for i in range(n):
            mg = MessagingGroup.create(channel_type="telegram", platform_id=str(1000 + i))
            sid = uuid.uuid4().hex[:16]
            recent = i < active_n
            rows.append(dict(id=sid, agent_group=group.id, messaging_group=mg.id, thread_id="",
                             created_at=now - timedelta(days=30),
                             last_active_at=now - (timedelta(minutes=5) if recent else timedelta(days=3))))
            if recent and i % 2 == 0:
                running.append(sandbox_name(settings.install_id, "andy", sid))
        for chunk in range(0, len(rows), 500):
            Session.insert_many(rows[chunk:chunk + 500]).execute()
    for r in rows:
        shutil.copytree(tpl, store.session_path(settings.sessions_dir, "andy", r["id"]))
    manager = SandboxManager(settings, ListingRuntime(running))
    return settings, Background(settings=settings, manager=manager, lock_handle=None), active_n


def timed(fn, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def measure(n: int) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"sweep-bench-{n}-"))
    try:
        settings, bg, active_n = build(n, base)
        bg.sweep()  # warm the caches once
        regular = timed(bg.sweep, ROUNDS)
        assert bg.last_sweep.sessions == active_n, bg.last_sweep
        assert not bg.last_sweep.stopped and not bg.last_sweep.woken and not bg.last_sweep.resets

        def full_pass():
            from nanoclaw.lifecycle import sweep as sweep_mod
            sweep_mod.sweep_pass(everything(settings), bg.active.running_ids, settings, now=time.time(),
                                 stop=lambda *a: None, wake=lambda *a, **k: None)
        everyone = timed(full_pass, 3)
        # the delivery loop: the active-set refresh (every 2 s) and one 20 ms tick's change check
        refresh = timed(bg.refresh, ROUNDS)
        tick = timed(lambda: [outbound_signature(path) for path in list(bg.live)], ROUNDS)
        database.close()
        return {"n": n, "active": active_n, "p50": statistics.median(regular), "max": max(regular),
                "all_p50": statistics.median(everyone), "refresh": statistics.median(refresh),
                "tick": statistics.median(tick), "live": len(bg.live)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str]) -> None:
    counts = [int(a) for a in argv] or [1000, 10000]
    print(f"{'sessions':>9} {'active':>7} {'sweep p50':>10} {'max':>9} {'all sessions':>13} {'per active':>11}"
          f" {'delivery: refresh':>18} {'tick':>7} {'watched':>8}")
    results = [measure(n) for n in counts]
    for r in results:
        print(f"{r['n']:>9,} {r['active']:>7} {r['p50']:>8.1f}ms {r['max']:>7.1f}ms {r['all_p50']:>11.0f}ms "
              f"{r['p50'] / r['active']:>9.2f}ms {r['refresh']:>16.1f}ms {r['tick']:>5.2f}ms {r['live']:>8}")
    biggest = results[-1]
    print(f"\ntarget ≤ 200 ms at {biggest['n']:,}: {'met' if biggest['p50'] <= 200 else 'NOT met'} "
          f"(p50 {biggest['p50']:.1f} ms, max {biggest['max']:.1f} ms)")
    if len(results) > 1:
        a, b = results[0], results[-1]
        print(f"growth {a['n']:,} -> {b['n']:,} sessions: sweep x{b['p50'] / a['p50']:.1f} "
              f"(active x{b['active'] / a['active']:.0f}, all sessions x{b['n'] / a['n']:.0f}); "
              f"a pass over all sessions x{b['all_p50'] / a['all_p50']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
