"""The whole service as `make run` starts it (nanoclaw.supervise: supervisord with gunicorn `web`,
whose worker holds the background, and `proxy`), for fault tests and the soak bench: started in
its own process group against fakes on 127.0.0.1, its processes found by role."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SANDBOX_MARKS = (b"bwrap", b"agent_runner", b"claude", b"docker", b"containerd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


class SupervisedService:
    def __init__(self, root: Path, env: dict[str, str], setup: list[list[str]], log_name: str = "service.log",
                 preexec=None):
        self.root = root
        self.port = free_port()
        self.env = {**os.environ, "NANOCLAW_DATA_DIR": str(root / "data"), "NANOCLAW_GROUPS_DIR": str(root / "groups"),
                    "NANOCLAW_PORT": str(self.port), "NANOCLAW_ENV_FILE": str(root / "none.env"), "TZ": "UTC",
                    "NANOCLAW_INSTALL_ID": f"svc-{os.getpid()}-{self.port}", **env}
        self.env.pop("DATABASE_URL", None)
        import cli_batch  # (tests/ on the path: benches that take only free_port from here need not have it)
        cli_batch.run([["migrate"], *setup], self.env)
        self.log_path = root / log_name
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "nanoclaw.supervise"], cwd=PROJECT_ROOT, env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=preexec)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"the service did not become healthy; see {self.log_path}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # --- its processes ---------------------------------------------------------------------------

    def tree(self) -> list[int]:
        children, found, todo = _children(), [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found

    def service_processes(self) -> list[int]:
        """supervisord and its programs, not the sandboxes (nor what they started)."""
        children, found, todo = _children(), [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            if any(mark in cmdline(pid) for mark in SANDBOX_MARKS):
                continue
            found.append(pid)
            todo += children.get(pid, [])
        return found

    def roles(self) -> dict[str, list[int]]:
        """role -> pids: web-master, web-worker (it holds the background), proxy, and the sandboxes'
        runner and CLI (a Docker sandbox is not our child: it is found by its install label)."""
        found: dict[str, list[int]] = {}
        children = _children()
        ours = self.service_processes()
        for pid in ours:
            cmd = cmdline(pid)
            if b"gunicorn" in cmd:
                under_gunicorn = any(pid in children.get(p, []) and b"gunicorn" in cmdline(p) for p in ours)
                found.setdefault("web-worker" if under_gunicorn else "web-master", []).append(pid)
            elif b"nanoclaw.proxy" in cmd or b"nanoclaw proxy" in cmd:
                found.setdefault("proxy", []).append(pid)
            elif b"nanoclaw telegram poll" in cmd:
                found.setdefault("telegram-poll", []).append(pid)
            elif b"nanoclaw slack socket" in cmd:
                found.setdefault("slack-socket", []).append(pid)
        for root in self.sandbox_roots():
            todo = [root]
            while todo:
                pid = todo.pop()
                cmd = cmdline(pid)
                if b"-m agent_runner" in cmd:
                    found.setdefault("sandbox-runner", []).append(pid)
                elif b"claude" in cmd.split(b" ")[0]:
                    found.setdefault("sandbox-cli", []).append(pid)
                todo += children.get(pid, [])
        return found

    def sandbox_roots(self) -> list[int]:
        """The first process of each of this service's sandboxes: a bwrap naming our data folder, or
        the main process of a Docker container carrying our install label."""
        data = str(self.root / "data").encode()
        roots = [int(e) for e in os.listdir("/proc") if e.isdigit()
                 and b"bwrap" in cmdline(int(e)).split(b" ")[0] and data in cmdline(int(e))]
        if self.env.get("NANOCLAW_RUNTIME") == "docker":
            import docker
            from nanoclaw.runtime.base import INSTALL_LABEL
            client = docker.from_env()
            for container in client.containers.list(
                    filters={"label": f"{INSTALL_LABEL}={self.env['NANOCLAW_INSTALL_ID']}"}):
                pid = container.attrs.get("State", {}).get("Pid")
                if pid:
                    roots.append(pid)
            client.close()
        return roots

    def sample(self) -> tuple[float, int]:
        """(resident MiB, open files) summed over the service's own processes."""
        rss, fds = 0, 0
        for pid in self.service_processes():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
                fds += len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                continue
        return rss / 1024, fds


def post(port: int, path: str, body: bytes, headers: dict, timeout: float = 10) -> tuple[int, float]:
    """(status, seconds); status 0 when the connection failed (nothing answered)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 headers={"Content-Type": "application/json", **headers})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return status, time.perf_counter() - started
