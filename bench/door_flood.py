"""The door under a flood of idle connections without a pass, while a local agent works (issue 39,
item 5).

    .venv/bin/python -m bench.door_flood [CALLS]

The `proxy` program as `make run` runs it, with NANOCLAW_DOOR_LISTEN on 127.0.0.1, started with an
open-files limit of 1,024 (soft and hard, as many hosts give a service), and a fake model. A local
agent's model calls go through its own unix socket, as its sandbox's CLI makes them: the part of a
warm turn the proxy program serves. Legs alternate, CALLS calls each (default 40):

- baseline: nothing else connected;
- flood: 1,000 TCP connections to the door that never start TLS, from 40 loopback addresses
  (so a per-address limit alone does not hold them back), held open through the leg.

Printed: p50 and p99 of the local call, failures, and how many of the 1,000 the door was holding.
Goal: the flood leg's p50 <= 1.10x the baseline's in the same run, with no failure.
"""
from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "container")]

from tests.fakes.model_api import FakeModel, Reply  # noqa: E402
from tests.service_harness import free_port  # noqa: E402

FLOOD = 1000


class Unix(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=30)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def limit_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def call(sock: Path) -> tuple[float, bool]:
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    started = time.monotonic()
    try:
        conn = Unix(sock)
        conn.request("POST", "/v1/messages?beta=true", body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        conn.close()
        return time.monotonic() - started, resp.status == 200
    except OSError:
        return time.monotonic() - started, False


def flood(port: int) -> list[socket.socket]:
    held = []
    for i in range(FLOOD):
        s = socket.socket()
        s.bind((f"127.0.1.{1 + i % 40}", 0))
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
    return held


def still_open(socks: list[socket.socket]) -> int:
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-flood-"))
    port = free_port()
    with FakeModel(script=lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929")) as model:
        env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"),
               "TZ": "UTC", "NANOCLAW_DOOR_LISTEN": f"127.0.0.1:{port}", "NANOCLAW_ENV_FILE": str(tmp / "none"),
               "DATABASE_URL": f"sqlite:///{tmp / 'nc.db'}", "ANTHROPIC_UPSTREAM_URL": model.url,
               "ANTHROPIC_API_KEY": "sk-ant-bench"}
        flask = [str(ROOT / ".venv/bin/flask"), "--app", "app", "nanoclaw"]
        for args in (["migrate"], ["agent", "create", "Andy"]):
            subprocess.run(flask + args, cwd=ROOT, env=env, check=True, capture_output=True)
        proxy = subprocess.Popen(flask + ["proxy"], cwd=ROOT, env=env, preexec_fn=limit_files,
                                 stdout=subprocess.DEVNULL, stderr=open(tmp / "proxy.log", "w"))
        sock = tmp / "data" / "proxy" / "andy" / "proxy.sock"
        try:
            deadline = time.monotonic() + 30
            while not (sock.exists() and call(sock)[1]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the proxy did not serve andy; see {tmp / 'proxy.log'}")
                time.sleep(0.2)
            legs = {"baseline": ([], 0), "flood": ([], 0)}
            held_counts = []
            for _round in range(4):
                for name in ("baseline", "flood"):
                    held = flood(port) if name == "flood" else []
                    time.sleep(0.5 if held else 0)
                    times, failed = legs[name]
                    for _ in range(calls // 4):
                        took, ok = call(sock)
                        times.append(took)
                        failed += not ok
                    legs[name] = (times, failed)
                    if held:
                        held_counts.append(still_open(held))
                    for s in held:
                        s.close()
        finally:
            proxy.terminate()
            proxy.wait(10)
    print(f"A local agent's model call through its door (the proxy program, open files limited to 1,024), "
          f"{calls} calls a leg")
    for name, (times, failed) in legs.items():
        print(f"  {name:9s} p50 {pct(times, .5) * 1000:6.1f} ms  p99 {pct(times, .99) * 1000:6.1f} ms  "
              f"mean {statistics.mean(times) * 1000:6.1f} ms  failed {failed}")
    print(f"  of {FLOOD} idle connections without a pass, still open after the leg's calls: "
          f"{', '.join(map(str, held_counts))}")
    base, flooded = pct(legs["baseline"][0], .5), pct(legs["flood"][0], .5)
    print(f"flood / baseline p50: x{flooded / base:.2f} (goal <= 1.10, no failure)")


if __name__ == "__main__":
    main()
