"""`make run`'s path for real: supervisord starts gunicorn, /healthz answers, Ctrl-C stops it all."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from nanoclaw.config import PROJECT_ROOT
from tests.service_harness import free_port


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def gunicorn_master(supervisord: int) -> int:
    return next(p for p in children(supervisord) if b"gunicorn" in open(f"/proc/{p}/cmdline", "rb").read())


def test_supervised_service_serves_healthz_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_PORT": str(port),
           "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), "TZ": "UTC"}
    bin_dir = os.path.dirname(sys.executable)
    subprocess.run([f"{bin_dir}/flask", "--app", "app", "nanoclaw", "migrate"], cwd=PROJECT_ROOT, env=env,
                   check=True, capture_output=True, timeout=60)
    proc = subprocess.Popen([sys.executable, "-m", "nanoclaw.supervise"], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    body = json.load(r)
            except OSError:
                time.sleep(0.3)
        assert body is not None, "no /healthz answer within 60 s"
        assert body["status"] == "ok" and body["schema_version"] >= 1
        master = gunicorn_master(proc.pid)
        # the master only forks and watches: one thread, no asyncio loop (gunicorn's control socket)
        assert len(os.listdir(f"/proc/{master}/task")) == 1
        assert "_asyncio" not in open(f"/proc/{master}/maps").read()
        # no platform set up: supervisord holds no idle listener programs (each made every stop,
        # the ^C below included, a second longer)
        from nanoclaw.cli.doctor import program_states
        from nanoclaw.config import Settings
        states = program_states(Settings.load(environ=env, dotenv_path=tmp_path / "none.env"))
        assert states is not None and sorted(states) == ["proxy", "web"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stopped: web" in out and "stopped: proxy" in out
    with socket.socket() as s:  # nobody listens on the port any more: nothing was left behind
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
