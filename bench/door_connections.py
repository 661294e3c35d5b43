"""What the door holds for sandboxes on other machines (issue 33): N remote sessions, each with the
two connections a runner keeps (its long poll for inbound.db and its push connection), against the
`proxy` program as `make run` runs it, with NANOCLAW_DOOR_LISTEN on 127.0.0.1.

    .venv/bin/python -m bench.door_connections [N ...]     (default 50 200 500)

Per N: the proxy program's resident memory and threads with every long poll waiting, and the time
from a host commit to inbound.db to the snapshot's arrival at one of the N sandboxes (the wake
path), and of a push of one row (the answer path), p50 over 40 tries each.
"""
from __future__ import annotations

import json
import os
import socket
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
from tests.service_harness import free_port  # noqa: E402
from nanoclaw.config import Settings, install_secret  # noqa: E402
from nanoclaw.remote import passes, starts  # noqa: E402
from nanoclaw.remote.tls import door_tls  # noqa: E402
from nanoclaw.sessions import store  # noqa: E402
from nanoclaw.sessions.store import Target  # noqa: E402


def proc_status(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["Threads"])


def run(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-door-"))
    port = free_port()
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"),
           "TZ": "UTC", "NANOCLAW_DOOR_LISTEN": f"127.0.0.1:{port}", "NANOCLAW_ENV_FILE": str(tmp / "none"),
           "DATABASE_URL": f"sqlite:///{tmp / 'nc.db'}", "NANOCLAW_INSTALL_ID": "benchdoor"}
    settings = Settings.load(environ=env, dotenv_path=tmp / "none")
    settings.data_dir.mkdir(parents=True)
    tls = door_tls(settings)
    key = passes.door_key(install_secret(settings))
    subprocess.run([str(ROOT / ".venv/bin/flask"), "--app", "app", "nanoclaw", "migrate"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    proxy = subprocess.Popen([str(ROOT / ".venv/bin/flask"), "--app", "app", "nanoclaw", "proxy"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=open(tmp / "proxy.log", "w"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        idle_rss, idle_threads = proc_status(proxy.pid)
        links, paths = [], []
        for i in range(n):
            path = store.session_path(settings.sessions_dir, "bench", f"s{i}")
            store.prepare(path, Target("bench", str(i)))
            nonce = starts.begin(path)
            links.append(DoorLink(f"https://127.0.0.1:{port}", passes.mint(key, passes.Claims(
                "benchdoor", "bench", f"s{i}", nonce, int(time.time()) + 3600)), tls.ca_pem))
            paths.append(path)
        stamps: dict[int, str | None] = {}
        arrived = {i: threading.Event() for i in range(n)}
        done = threading.Event()

        def poller(i: int) -> None:
            client = links[i].session()
            pause = 0.1
            while not done.is_set():
                try:
                    status, headers, _data = client.request("POST", "/inbound", json.dumps(
                        {"after": stamps.get(i), "wait": 25}).encode(), timeout=60)
                except OSError:
                    # the door holds 64 connections from one address before their passes are shown:
                    # all sandboxes starting at once try again, as a runner does
                    done.wait(pause)
                    pause = min(pause * 2, 2.0)
                    client = links[i].session()
                    continue
                pause = 0.1
                if status == 200:
                    stamps[i] = headers.get("x-stamp")
                    arrived[i].set()

        for i in range(n):
            threading.Thread(target=poller, args=(i,), daemon=True).start()
        for i in range(n):
            arrived[i].wait(30)
            arrived[i].clear()
        time.sleep(1.0)
        rss, threads = proc_status(proxy.pid)
        wake = []
        for k in range(40):
            i = k % n
            started = time.monotonic()
            store.write_message(paths[i], content={"text": f"m{k}"}, target=Target("bench", str(i)))
            arrived[i].wait(10)
            wake.append(time.monotonic() - started)
            arrived[i].clear()
        pusher = links[0].session()
        push = []
        for k in range(40):
            row = {"id": f"r{k}", "seq": k + 1, "in_reply_to": None, "timestamp": "2026-11-26T00:00:00.000Z",
                   "kind": "chat", "channel_type": "bench", "platform_id": "0", "thread_id": None,
                   "content": json.dumps({"op": "text", "text": "hi"})}
            started = time.monotonic()
            status, _h, _d = pusher.request("POST", "/outbound", json.dumps({"out": [row]}).encode())
            push.append(time.monotonic() - started)
            assert status == 200
        print(f"{n:5d} sandboxes ({2 * n} connections held): proxy program {rss} MiB (idle {idle_rss} MiB, "
              f"+{(rss - idle_rss) * 1024 / n:.0f} KiB each), {threads} threads (idle {idle_threads}); "
              f"host commit -> snapshot at the sandbox p50 {statistics.median(wake) * 1000:.1f} ms, "
              f"a push p50 {statistics.median(push) * 1000:.1f} ms")
        done.set()
    finally:
        proxy.terminate()
        try:
            proxy.wait(60)  # thousands of connections to close
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [50, 200, 500]
    print("NanoClaw door: remote sessions held by one proxy program (TLS on 127.0.0.1)")
    for n in sizes:
        run(n)


if __name__ == "__main__":
    main()
