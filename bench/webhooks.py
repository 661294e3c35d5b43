"""Telegram webhooks through gunicorn on the full path, against a bare Flask endpoint.

    .venv/bin/python -m bench.webhooks [SECONDS]

Both servers run under the same gunicorn settings as the `web` program (1 worker, gthread,
8 threads, access log, loopback). The full path is the real app: secret check, parse, dedup
(inbound_events), route, write to the session's inbound.db (SQLite, WAL). The chat is wired
with `--ignored accumulate` and a pattern that never engages, so every update is written but no
sandbox is woken: this measures the webhook path, not the agent.

The acknowledgement waits for the dedup insert; routing and the inbound.db write run after it on
the same process's intake thread (nanoclaw/inbound/intake.py), sharing its CPU. So the figures include
when the last update of the burst was routed: "routed" is updates written per second counted
until the intake was empty again, the rate a sustained stream could keep up.

1. throughput: 8 keep-alive clients send as fast as they can for SECONDS (default 10);
2. latency: an open loop at 100 requests/s for SECONDS; p50/p99 of the acknowledgement.
Targets: at least 50% of the bare endpoint's throughput; p99 <= 25 ms at 100 requests/s.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SECRET = "bench-webhook-secret-0123456789"
TOKEN = "7000001:AAH-bench-token-not-real_0123456789"
# the web program's settings (gunicorn.conf.py), access log included, given to both servers: the
# nanoclaw one also reads gunicorn.conf.py from its working directory, the bare one has none
GUNICORN = ["-w", "1", "-k", "gthread", "--threads", "8", "--no-control-socket", "--log-level", "warning",
            "--access-logfile", "-", "--keep-alive", "5"]

BARE_APP = '''
from flask import Flask
app = Flask(__name__)

@app.post("/webhooks/telegram")
def hook():
    return "", 200
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int, path: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", path)
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on {port} did not come up")


class Updates:
    """Distinct, valid Telegram updates for a wired DM."""

    def __init__(self):
        self._n = 0
        self._lock = threading.Lock()

    def next(self) -> bytes:
        with self._lock:
            self._n += 1
            n = self._n
        return json.dumps({"update_id": 10_000_000 + n, "message": {
            "message_id": n, "date": 1700000000, "text": f"message {n}",
            "from": {"id": 4242, "is_bot": False, "first_name": "Bench"},
            "chat": {"id": 4242, "first_name": "Bench", "type": "private"}}}).encode()


def post(conn: http.client.HTTPConnection, body: bytes) -> int:
    conn.request("POST", "/webhooks/telegram", body=body,
                 headers={"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def throughput(port: int, seconds: float, clients: int = 8) -> tuple[float, int]:
    updates, count, errors = Updates(), [0] * clients, [0] * clients
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        while time.monotonic() < stop:
            if post(conn, updates.next()) == 200:
                count[i] += 1
            else:
                errors[i] += 1
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count) / seconds, sum(errors)


def open_loop(port: int, seconds: float, rate: float = 100.0) -> list[float]:
    """Send at a fixed rate (each request on its own thread from a small pool of connections)."""
    updates, latencies, lock = Updates(), [], threading.Lock()
    pool = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(16)]
    free = list(range(len(pool)))
    free_lock = threading.Condition()

    def one(body: bytes) -> None:
        with free_lock:
            free_lock.wait_for(lambda: free)
            idx = free.pop()
        started = time.monotonic()
        status = post(pool[idx], body)
        took = time.monotonic() - started
        with free_lock:
            free.append(idx)
            free_lock.notify()
        if status == 200:
            with lock:
                latencies.append(took)

    threads, start = [], time.monotonic()
    for i in range(int(seconds * rate)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, args=(updates.next(),))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return sorted(latencies)


def unrouted(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT COUNT(*) FROM inbound_events WHERE routed_at IS NULL AND payload IS NOT NULL"
                            ).fetchone()[0]
    finally:
        conn.close()


def routed_after(db: Path | None, timeout: float = 120) -> float:
    """Seconds until the intake has routed everything acknowledged (0 for the bare endpoint)."""
    started = time.monotonic()
    while db is not None and unrouted(db):
        if time.monotonic() - started > timeout:
            raise RuntimeError("the intake did not catch up within 2 minutes")
        time.sleep(0.01)
    return time.monotonic() - started


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def serve(args: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "gunicorn"), *GUNICORN, *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-webhooks-"))
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"),
           "NANOCLAW_ENV_FILE": str(tmp / "none.env"), "TZ": "UTC", "TELEGRAM_BOT_TOKEN": TOKEN,
           "TELEGRAM_WEBHOOK_SECRET": SECRET, "TELEGRAM_API_BASE": "http://127.0.0.1:9"}
    env.pop("DATABASE_URL", None)
    flask = [str(BIN / "flask"), "--app", "app", "nanoclaw"]
    for args in (["migrate"], ["agent", "create", "Bench"], ["user", "add", "telegram:4242", "--role", "owner"],
                 ["wire", "telegram", "4242", "bench", "--engage", "pattern", "--pattern", "^never-engage$",
                  "--ignored", "accumulate"]):
        subprocess.run(flask + args, cwd=ROOT, env=env, check=True, capture_output=True)
    (tmp / "bare_app.py").write_text(BARE_APP)

    results = {}
    for name, args, cwd, health in (("bare", ["bare_app:app"], tmp, None),
                                    ("nanoclaw", ["app:app"], ROOT, "/healthz")):
        port = free_port()
        proc = serve(["-b", f"127.0.0.1:{port}", *args], env, cwd)
        try:
            wait_up(port, health or "/")
            db = tmp / "data" / "nanoclaw.db" if name == "nanoclaw" else None
            throughput(port, 1)  # warm up
            routed_after(db)
            rps, errors = throughput(port, seconds)
            tail = routed_after(db)
            lat = open_loop(port, seconds)
            results[name] = (rps, errors, lat, rps * seconds / (seconds + tail), tail)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)

    print(f"Telegram webhooks through gunicorn (1 worker, gthread, 8 threads), {seconds:.0f} s per phase")
    for name, (rps, errors, lat, routed, tail) in results.items():
        print(f"{name:9s} acknowledged {rps:6.0f} req/s (errors {errors}), routed {routed:6.0f}/s (last one "
              f"{tail * 1000:4.0f} ms after the burst)   at 100 req/s: p50 {pct(lat, .5)*1000:4.1f} ms"
              f"  p99 {pct(lat, .99)*1000:4.1f} ms  ({len(lat)} acknowledged)")
    bare, full = results["bare"], results["nanoclaw"]
    print(f"full path / bare endpoint throughput: acknowledged {full[0] / bare[0]:.0%}, routed {full[3] / bare[0]:.0%}"
          f"  (target >= 50%); full path p99 {pct(full[2], .99)*1000:.1f} ms (target <= 25 ms)")


if __name__ == "__main__":
    main()
