"""A busy chat for a year: does one turn cost more? (issue 44)

    .venv/bin/python -m bench.volume [TURNS] [--on bwrap|engine2]   (warm turns per state, default 20)

--on bwrap (the default): this machine's bubblewrap sandbox, the session folders shared.
--on engine2: the second Docker engine (scripts/remote-engine.sh: another network namespace, TLS),
the session over the network transport through the door; bytes per turn are the session channel's
bodies both ways, counted by the door.

One owner's DM with one agent, the web program's pieces in this process (as tests/tg_flow.py runs
them: the router, delivery, the proxy door, a real bubblewrap sandbox with the real SDK and CLI
against a fake model), in three states, each in a fresh data folder, in this run:

  empty        a new install;
  a year       what ~700 messages a day leave after 365 days with retention on: 250,000 messages in
               the history index and 250,000 accepted events in the central database, a ledger row a
               day, 5,000 audit rows; the session's databases holding what retention keeps (30 days,
               21,000 messages in, 21,000 answers, their acks and delivery records);
  no retention the same central tables, and 250,000 rows in each of the session's tables.

The filling is done while the sandbox is stopped (its start is excluded: cold start reported apart).
Printed per state: warm turn p50 and p90 (webhook accepted → the answer at the fake Telegram), the
first answer after a sandbox start (the filled states: the restart on the full databases), this
process's CPU per turn (router, delivery, door and fakes: the same fakes in every state), and the
session databases' sizes; then each state's p50 against the empty chat's (goal: within 10 %).
"""
from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "container")]

from nanoclaw.config import Settings  # noqa: E402
from tests.fakes.model_api import Reply  # noqa: E402
from tests.tg_flow import message, person, sandbox_service, texts  # noqa: E402

OWNER = person(111, "Olivia")
YEAR_MESSAGES = 250_000
KEPT = 21_000  # 30 days of ~700 a day


def brain(req):
    return Reply.say("noted: " + req.current_prompt()[-40:].split(">")[-1][:20])


def fill_central(db: Path, session_id: str) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO history (agent_folder, channel_type, platform_id, thread_id, session_id, message_key, "
            "sender_id, sender_name, said_at, text) VALUES ('andy', 'telegram', '111', NULL, ?, ?, 'telegram:111', "
            "'Olivia', ?, ?)",
            ((session_id, f"old-{n}", f"2025-{1 + n % 12:02d}-{1 + n % 28:02d}T10:00:00.000Z",
              f"message number {n} about the garden, the budget and dinner on day {n // 700}")
             for n in range(YEAR_MESSAGES)))
        conn.executemany(
            "INSERT INTO inbound_events (channel, event_id, received_at, payload, routed_at) VALUES "
            "('telegram', ?, '2025-06-01 10:00:00', NULL, '2025-06-01 10:00:01')",
            ((f"old-{n}",) for n in range(YEAR_MESSAGES)))
        conn.executemany(
            "INSERT INTO model_usage (day, agent_folder, session_id, upstream, asked_model, model, calls, switched, "
            "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_micro_usd, priced_as, unpriced) "
            "VALUES (?, 'andy', ?, 'anthropic', 'claude-sonnet-4-5', 'claude-sonnet-4-5', 700, 0, 7000000, 70000, "
            "0, 0, 21000000, 'claude-sonnet-4-5', 0)",
            ((f"2025-{1 + d // 31 % 12:02d}-{1 + d % 28:02d}", f"old-{d}") for d in range(365)))
        conn.executemany("INSERT INTO audit_log (at, actor, action, target, detail) VALUES "
                         "('2025-06-01 10:00:00', 'cli', 'wire', 'andy', NULL)", (() for _ in range(5_000)))
    from nanoclaw.memory import history  # the FTS5 index brought up to date, as the service does each minute
    indexed = history.catch_up()
    counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
              for t in ("history", "inbound_events", "model_usage", "audit_log")}
    conn.close()
    print(f"  central: {counts}, {indexed} newly indexed for search", flush=True)


def fill_session(session: Path, rows: int) -> None:
    from nanoclaw.sessions import session_schema as schema
    from nanoclaw.sessions import store
    inbound = schema.connect(store.inbound_db(session))
    inbound.execute("BEGIN")  # the session databases are opened in autocommit mode: one transaction
    top = inbound.execute("SELECT COALESCE(MAX(seq), 0) FROM messages_in").fetchone()[0]
    inbound.executemany(
        "INSERT INTO messages_in (id, seq, kind, timestamp, status, trigger, content) VALUES "
        "(?, ?, 'chat', '2026-11-01T00:00:00.000Z', 'completed', 1, '{\"text\": \"an old message\"}')",
        ((f"telegram:old-{n}", top + 1 + n) for n in range(rows)))
    inbound.executemany(
        "INSERT INTO delivered (message_out_id, status, tries, delivered_at) VALUES (?, 'delivered', 1, "
        "'2026-11-01T00:00:01.000Z')", ((f"old-out-{n}",) for n in range(rows)))
    inbound.execute("COMMIT")
    inbound.close()
    outbound = schema.connect(store.agent_part(session) / schema.OUTBOUND)
    outbound.execute("BEGIN")
    top = outbound.execute("SELECT COALESCE(MAX(seq), 0) FROM messages_out").fetchone()[0]
    outbound.executemany(
        "INSERT INTO messages_out (id, seq, in_reply_to, timestamp, content) VALUES "
        "(?, ?, ?, '2026-11-01T00:00:01.000Z', '{\"op\": \"text\", \"text\": \"an old answer\"}')",
        ((f"old-out-{n}", top + 1 + n, f"telegram:old-{n}") for n in range(rows)))
    outbound.executemany("INSERT INTO processing_ack (message_id, status, status_changed) VALUES "
                         "(?, 'completed', '2026-11-01T00:00:01.000Z')", ((f"telegram:old-{n}",) for n in range(rows)))
    outbound.execute("COMMIT")
    outbound.close()


def engine2() -> dict:
    """The second engine's client settings, the engine started (and the agent image on it) as needed."""
    import os
    import subprocess
    script = ROOT / "scripts" / "remote-engine.sh"
    started = subprocess.run([str(script), "start"], capture_output=True, text=True, check=True)
    env = dict(line.split("=", 1) for line in started.stdout.split())
    subprocess.run([str(script), "load", "nanoclaw-agent:latest"], check=True, capture_output=True)
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        os.environ[name] = env[name]
    from tests.service_harness import free_port
    return {"runtime": "docker", "NANOCLAW_DOOR_LISTEN": f"{env['NANOCLAW_TEST_DOOR_ADDRESS']}:{free_port()}",
            "NANOCLAW_DOOR_RELAY_NETWORK": "host"}


def moved(svc) -> int:
    remote = getattr(svc.proxy, "remote", None)  # the door's network side, when it listens
    return sum(remote.channel.moved.values()) if remote is not None else 0


def run_state(name: str, turns: int, session_rows: int | None, on: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="nanoclaw-volume-") as tmp:
        tmp_path = Path(tmp)

        def make_settings(**env) -> Settings:
            base = {"NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_GROUPS_DIR": str(tmp_path / "groups"),
                    "TZ": "UTC", "NANOCLAW_MOUNT_ALLOWLIST": str(tmp_path / "allow.json")}
            base.update({k: str(v) for k, v in env.items()})
            return Settings.load(environ=base, dotenv_path=tmp_path / "no.env")
        db = tmp_path / "data" / "nanoclaw.db"
        with sandbox_service(make_settings, f"sqlite:///{db}", brain, **on) as svc:
            for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                         ("wire", "telegram", "111", "andy")):
                svc.cli(*args)
            started = time.monotonic()
            svc.post(message(111, OWNER, "hello"))
            svc.wait(lambda: texts(svc.tg, 111), what="the first answer")
            cold = time.monotonic() - started
            from nanoclaw.models import Session
            from nanoclaw.sessions import store
            session_id = Session.get().id
            session = store.session_path(svc.settings.sessions_dir, "andy", session_id)
            if session_rows is not None:
                for sandbox in svc.runtime.list_sandboxes(svc.settings.install_id):
                    svc.runtime.stop(sandbox)
                filled = time.monotonic()
                fill_central(db, session_id)
                fill_session(session, session_rows)
                print(f"  {name}: filled in {time.monotonic() - filled:.0f} s", flush=True)
                restarted = time.monotonic()
                svc.post(message(111, OWNER, "back again"))  # the restart on the full databases: apart
                svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, what="the answer after the restart")
                cold = time.monotonic() - restarted
            times, cpu0, bytes0 = [], time.process_time(), moved(svc)
            for n in range(turns):
                before = len(texts(svc.tg, 111))
                time.sleep(0.2)  # a person does not answer within 200 ms
                t0 = time.monotonic()
                svc.post(message(111, OWNER, f"turn {n}"))
                with svc.tg._cond:  # woken by the fake's own record of the call (svc.wait polls every 50 ms)
                    if not svc.tg._cond.wait_for(lambda: len(texts(svc.tg, 111)) > before, 120):
                        raise AssertionError(f"no answer to turn {n}")
                times.append(time.monotonic() - t0)
            cpu = (time.process_time() - cpu0) / turns
            per_turn = (moved(svc) - bytes0) / turns
            sizes = {p.name: p.stat().st_size for p in (store.inbound_db(session),
                                                        store.agent_part(session) / "outbound.db")}
        return {"name": name, "p50": statistics.median(times) * 1000,
                "p90": sorted(times)[int(len(times) * 0.9) - 1] * 1000, "cpu_ms": cpu * 1000, "cold_s": cold,
                "bytes_per_turn": per_turn, "sizes": sizes}


def main(argv: list[str]) -> None:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m bench.volume", description=__doc__.split("\n")[0])
    parser.add_argument("turns", nargs="?", type=int, default=20, help="warm turns per state (20)")
    parser.add_argument("--on", choices=("bwrap", "engine2"), default="bwrap",
                        help="this machine's bubblewrap, or the second engine over the network transport")
    args = parser.parse_args(argv)
    on = engine2() if args.on == "engine2" else {}
    results = []
    for name, rows in (("empty", None), ("a year, retention on", KEPT), ("a year, no retention", YEAR_MESSAGES)):
        print(f"{name} ...", flush=True)
        results.append(run_state(name, args.turns, rows, on))
    base = results[0]["p50"]
    print(f"\n{args.turns} warm turns per state, {args.on}:")
    for r in results:
        sizes = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in r["sizes"].items())
        network = f"  {r['bytes_per_turn'] / 1024:.1f} KiB/turn through the door" if on else ""
        print(f"  {r['name']:22s} p50 {r['p50']:6.0f} ms  p90 {r['p90']:6.0f} ms  x{r['p50'] / base:.2f}  "
              f"CPU here {r['cpu_ms']:5.0f} ms/turn  start to answer {r['cold_s']:.1f} s{network}  ({sizes})")
    print(json.dumps([{k: v for k, v in r.items() if k != "sizes"} for r in results]))


if __name__ == "__main__":
    main(sys.argv[1:])
