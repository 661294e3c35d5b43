"""What the door holds for sandboxes on other machines (issue 33): N remote sessions, each with the
two connections a runner keeps (its long poll for inbound.db and its push connection), against the
`proxy` program as `make run` runs it, with NANOCLAW_DOOR_LISTEN on 127.0.0.1.

    .venv/bin/python -m bench.door_connections [N ...]     (default 50 200 500)

Each sandbox does what an idle runner does: 25 s long polls on one connection; on its push
connection a look at the host's files every 30 s (home/ and the group folder's manifests) and a
heartbeat every minute. Per N: the proxy program's resident memory, threads and open descriptors
with every long poll waiting, and the time from a host commit to inbound.db to the snapshot's
arrival at one of the N sandboxes (the wake path), p50 and p90 over 200 tries, and of a push of one
row (the answer path), p50 over 40.

The wake is measured on MEASURED sandboxes whose pollers run in this process; the other N -
MEASURED hold their connections from a process of their own (`--hold`), as sandboxes on other
machines would: thousands of client threads in the measuring process would otherwise add their own
GIL waits to every figure (a poller's answer waits for the interpreter while others re-poll).
"""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "container")]

from agent_runner.door_link import PREAMBLE, DoorLink  # noqa: E402
from agent_runner.tree_sync import tree_tag  # noqa: E402
from tests.service_harness import free_port  # noqa: E402
from nanoclaw.config import Settings, install_secret  # noqa: E402
from nanoclaw.remote import passes, starts  # noqa: E402
from nanoclaw.remote.tls import door_tls  # noqa: E402
from nanoclaw.sessions import store  # noqa: E402
from nanoclaw.sessions.store import Target  # noqa: E402


MEASURED = 50
WAKES = 200
HEARTBEAT_S = 60.0  # an idle runner's heartbeat (agent_runner's IDLE_HEARTBEAT_S)
FILES_LOOK_S = 30.0  # an idle runner's look at the host's files (agent_runner's FILES_IDLE_S)
EMPTY_TAG = tree_tag({})


def proc_status(pid: int) -> tuple[int, int, int]:
    """The program's resident MiB, threads and open descriptors."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


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
        idle_rss, idle_threads, _fds = proc_status(proxy.pid)
        links, paths, specs = [], [], []
        for i in range(n):
            path = store.session_path(settings.sessions_dir, "bench", f"s{i}")
            store.prepare(path, Target("bench", str(i)))
            nonce = starts.begin(path)
            specs.append((f"https://127.0.0.1:{port}", passes.mint(key, passes.Claims(
                "benchdoor", "bench", f"s{i}", nonce, int(time.time()) + 3600)), tls.ca_pem))
            links.append(DoorLink(*specs[-1]))
            paths.append(path)
        measured = min(n, MEASURED)
        holder = None
        if n > measured:  # the others' connections, from a process of their own
            spec = tmp / "held.json"
            spec.write_text(json.dumps(specs[measured:]))
            holder = subprocess.Popen([sys.executable, "-m", "bench.door_connections", "--hold", str(spec)],
                                      cwd=ROOT, stdout=subprocess.PIPE, text=True)
            if holder.stdout.readline().strip() != "held":
                raise SystemExit("the process holding the other sandboxes' connections failed")
        done = threading.Event()
        arrived = hold(links[:measured], done)
        time.sleep(1.0)
        rss, threads, fds = proc_status(proxy.pid)
        wake = []
        for k in range(WAKES):
            i = k % measured
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
              f"+{(rss - idle_rss) * 1024 / n:.0f} KiB each), {threads} threads (idle {idle_threads}), {fds} descriptors; "
              f"host commit -> snapshot at the sandbox p50 {statistics.median(wake) * 1000:.1f} ms "
              f"(p90 {statistics.quantiles(wake, n=10)[-1] * 1000:.1f}), "
              f"a push p50 {statistics.median(push) * 1000:.1f} ms", flush=True)
        done.set()
        if holder is not None:
            holder.terminate()
            holder.wait(60)
    finally:
        proxy.terminate()
        try:
            proxy.wait(60)  # thousands of connections to close
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def hold(links: list, done: threading.Event) -> dict[int, threading.Event]:
    """A poller per link, as a runner long-polls: returns each one's arrival event, once every
    poller had its first answer (the events cleared)."""
    stamps: dict[int, str | None] = {}
    arrived = {i: threading.Event() for i in range(len(links))}

    def poller(i: int) -> None:
        client, up = links[i].session(), links[i].session()
        pause, beat_at, looked_at = 0.1, 0.0, 0.0
        while not done.is_set():
            try:
                if time.monotonic() - looked_at >= FILES_LOOK_S:  # its push connection: an idle runner's look
                    looked_at = time.monotonic()                   # at the host's files, and its heartbeat
                    for part in ("home", "group"):
                        up.request("POST", f"/files/{part}/manifest", json.dumps({"tag": EMPTY_TAG}).encode())
                    if looked_at - beat_at >= HEARTBEAT_S:
                        beat_at = looked_at
                        up.request("POST", "/outbound", json.dumps({"out": [], "acks_delta": True, "heartbeat": time.time()}).encode())
                status, headers, _data = client.request("POST", "/inbound", json.dumps(
                    {"after": stamps.get(i), "wait": 25}).encode(), timeout=60)
            except (OSError, http.client.HTTPException):
                # the door holds 64 connections from one address before their passes are shown:
                # all sandboxes starting at once try again, as a runner does
                done.wait(pause)
                pause = min(pause * 2, 2.0)
                client, up = links[i].session(), links[i].session()
                continue
            pause = 0.1
            if status == 200:
                stamps[i] = headers.get("x-stamp")
                arrived[i].set()

    for i in range(len(links)):
        threading.Thread(target=poller, args=(i,), daemon=True).start()
    deadline = time.monotonic() + 60 + len(links) / 20  # thousands of TLS handshakes on the same cores
    late = [i for i in range(len(links)) if not arrived[i].wait(max(0.0, deadline - time.monotonic()))]
    if late:
        raise SystemExit(f"{len(late)} of {len(links)} sandboxes had no first answer from the door")
    for event in arrived.values():
        event.clear()
    return arrived


FAILURES: dict[str, int] = {}  # the held sandboxes' failed requests, by kind (progress lines)


class AsyncSandbox:
    """One idle runner's two connections on an event loop (the held sandboxes: thousands of them in
    one thread cost the machine far less than a thread each, so the door's figures stay its own)."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext):
        parts = urlsplit(url)
        self.host, self.port, self.token, self.context = parts.hostname, parts.port, token, context

    async def connect(self):
        pause = 0.1
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.context,
                                                               server_hostname=self.host)
                writer.write(f"{PREAMBLE} session {self.token}\n".encode())
                return reader, writer
            except OSError as exc:  # refused while the door admits the others: again, as a runner does
                FAILURES["connect " + type(exc).__name__] = FAILURES.get("connect " + type(exc).__name__, 0) + 1
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)

    @staticmethod
    async def request(conn, path: str, ask: dict) -> tuple[int, dict]:
        reader, writer = conn
        body = json.dumps(ask).encode()
        writer.write(f"POST {path} HTTP/1.1\r\nHost: door\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        await reader.readexactly(int(headers.get("content-length") or 0))
        return int(head[0].split()[1]), headers

    async def run(self, first: asyncio.Event) -> None:
        stamp, down, up = None, None, None
        beat_at = looked_at = -1e9
        while True:
            try:
                down = down or await self.connect()
                up = up or await self.connect()
                now = time.monotonic()
                if now - looked_at >= FILES_LOOK_S:
                    looked_at = now
                    for part in ("home", "group"):
                        await self.request(up, f"/files/{part}/manifest", {"tag": EMPTY_TAG})
                    if now - beat_at >= HEARTBEAT_S:
                        beat_at = now
                        await self.request(up, "/outbound", {"out": [], "acks_delta": True, "heartbeat": time.time()})
                status, headers = await self.request(down, "/inbound", {"after": stamp, "wait": 25})
                if status == 200:
                    stamp = headers.get("x-stamp")
                    first.set()
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                FAILURES[type(exc).__name__] = FAILURES.get(type(exc).__name__, 0) + 1
                for conn in (down, up):
                    if conn is not None:
                        conn[1].close()
                down = up = None
                await asyncio.sleep(0.5)


def hold_forever(spec: str) -> None:
    """--hold FILE: be the idle runners of the sandboxes FILE names, on one event loop, until
    terminated; prints "held" once each had its first answer. They start 100 a second (sandboxes
    of a fleet do not all start in the same second)."""
    sandboxes = json.loads(Path(spec).read_text())
    context = ssl.create_default_context(cadata=sandboxes[0][2]) if sandboxes else None

    async def main() -> None:
        firsts, tasks = [], []  # the loop keeps only weak references to tasks: these are kept here
        for k, (url, token, _ca) in enumerate(sandboxes):
            first = asyncio.Event()
            firsts.append(first)
            tasks.append(asyncio.get_running_loop().create_task(AsyncSandbox(url, token, context).run(first)))
            if k % 100 == 99:
                await asyncio.sleep(1.0)
        while not all(first.is_set() for first in firsts):
            await asyncio.sleep(10)
            print(f"held: {sum(f.is_set() for f in firsts)} of {len(firsts)}; failures {FAILURES}", file=sys.stderr,
                  flush=True)
        print("held", flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())


def main() -> None:
    if sys.argv[1:2] == ["--hold"]:
        return hold_forever(sys.argv[2])
    sizes = [int(a) for a in sys.argv[1:]] or [50, 200, 500]
    print("NanoClaw door: remote sessions held by one proxy program (TLS on 127.0.0.1)")
    for n in sizes:
        run(n)


if __name__ == "__main__":
    main()
