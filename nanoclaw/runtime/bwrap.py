"""Bubblewrap runtime, for hosts without Docker.

The sandbox does NOT see the host's root. It starts from an empty read-only tmpfs and gets
only: /usr (+ the /bin, /lib… links), an allowlist of harmless /etc files, synthetic
passwd/group/hosts, the Python that runs the agent (read-only), /dev, /proc, tmpfs /tmp,
and the mounts of base.py. So the project's `.env`, the data dir (central DB, other sessions,
sockets), /root, /home and /etc/shadow are simply absent. Namespaces: all unshared (no
network: only lo), uid/gid 1000, --clearenv plus the spec's variables, --new-session,
--die-with-parent.

Python: the sandbox runs the host's interpreter, by default the one running NanoClaw
(sys.executable of the project venv, which has claude-agent-sdk); a spec command starting
with `python3`/`python` is pointed at it, and its venv/bin leads PATH. Set `python=` to change.

--die-with-parent ties the sandbox to the thread that forked it, so all sandboxes are forked
by one long-lived spawner thread (a short-lived request thread would take its sandbox along).

Limits: see limits.py (a cgroup per sandbox: memory, pids, cpu; else prlimit).
Hardening: a seccomp filter refusing what Docker's default profile refuses (seccomp.py) and, where
bwrap has it (0.8+), --disable-userns, so the agent can make no namespace of its own inside.
Tracking: data_dir/run/bwrap/<name>.pid (JSON: pid, labels, cgroups), so a restarted host
still finds, lists and stops sandboxes; a pid counts only while its cmdline is our bwrap's.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from . import limits as limits_mod
from . import seccomp
from .base import (GLOBAL_TARGET, GROUP_TARGET, PACKAGES_TARGET, SKILLS_TARGET, HOME, INBOUND_TARGET, INSTALL_LABEL, PROXY_TARGET, RUNNER_TARGET,
                   SESSION_TARGET, NameLocks, SandboxSpec, check_spec, extra_target, prepare_session,
                   sandbox_env)

log = logging.getLogger("nanoclaw.runtime.bwrap")

MARK = "NANOCLAW_SANDBOX"  # set in the sandbox env; its value in bwrap's argv identifies the process
ETC_ALLOW = ("ssl", "ca-certificates", "ca-certificates.conf", "alternatives", "ld.so.cache",
             "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "host.conf",
             "gai.conf", "protocols", "services", "mime.types", "os-release", "debian_version",
             "python3", "python3.11", "python3.12", "python3.13")
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
LOG_TAIL_BYTES = 64 * 1024


def disables_userns(bwrap: str = "bwrap") -> bool:
    """Does this bwrap have --disable-userns (0.8 and later): no new user namespace inside."""
    if bwrap not in _USERNS:
        try:
            out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
            _USERNS[bwrap] = "--disable-userns" in out.stdout + out.stderr
        except (OSError, subprocess.TimeoutExpired):
            _USERNS[bwrap] = False
    return _USERNS[bwrap]


_USERNS: dict[str, bool] = {}


def probe(bwrap: str = "bwrap") -> str | None:
    """None when bubblewrap can make a sandbox like ours here, else why not (one line)."""
    if shutil.which(bwrap) is None:
        return "bwrap is not installed"
    try:
        out = subprocess.run([bwrap, "--ro-bind", "/usr", "/usr", *_root_links(), "--proc", "/proc",
                              "--dev", "/dev", "--unshare-all", "--unshare-user", "--uid", "1000",
                              "--gid", "1000", "--die-with-parent", "true"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    return None


def _root_links() -> list[str]:
    """Debian's merged /usr: /bin -> usr/bin etc. are links; older layouts are real dirs."""
    args = []
    for name in ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def python_roots(python: str) -> list[Path]:
    """Folders the interpreter needs besides /usr: its venv, and the base install the venv points at."""
    exe = Path(python)
    roots = []
    venv = exe.parent.parent
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        roots.append(venv)
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                roots.append(Path(value.strip()).parent)
    else:
        roots.append(Path(os.path.realpath(exe)).parent.parent)
    return [r for r in dict.fromkeys(roots) if r != Path("/usr") and Path("/usr") not in r.parents]


def identity_files(state_dir: Path, uid: int, gid: int) -> Path:
    """passwd/group/hosts for the sandbox (the host's would list its users; hosts gives localhost)."""
    d = state_dir / f"etc-{uid}-{gid}"
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "passwd": f"agent:x:{uid}:{gid}:agent:{HOME}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "group": f"agent:x:{gid}:\nnogroup:x:65534:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n",
    }
    for name, text in files.items():
        path = d / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return d


def bwrap_argv(spec: SandboxSpec, *, python: str, etc_dir: Path, bwrap: str = "bwrap",
               seccomp_fd: int | None = None, disable_userns: bool = False) -> list[str]:
    """The whole bwrap command line for `spec` (pure apart from reading which /etc entries exist).
    seccomp_fd: a descriptor holding the filter (seccomp.py); disable_userns: no user namespaces inside."""
    command = list(spec.command)
    if command and command[0] in ("python3", "python"):
        command[0] = python
    venv_bin = str(Path(python).parent)
    env = {**sandbox_env(spec), "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", MARK: spec.name}

    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(spec.uid), "--gid", str(spec.gid),
            "--hostname", "nanoclaw", "--die-with-parent", "--new-session", "--clearenv"]
    if disable_userns:
        argv += ["--disable-userns"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr", *_root_links()]
    for name in ETC_ALLOW:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for name in ("passwd", "group", "hosts"):
        argv += ["--ro-bind", str(etc_dir / name), f"/etc/{name}"]
    argv += ["--dev", "/dev", "--proc", "/proc",
             "--size", str(512 * 2**20), "--tmpfs", "/tmp", "--size", str(64 * 2**20), "--tmpfs", "/var/tmp"]
    # after the tmpfs mounts: a venv or interpreter that lives under /tmp must not be hidden by them
    for root in python_roots(python):
        argv += ["--ro-bind", str(root), str(root)]
    argv += ["--bind", str(spec.session_dir), SESSION_TARGET,
             "--ro-bind", str(spec.inbound_dir), INBOUND_TARGET]
    argv += ["--bind", str(spec.group_dir), GROUP_TARGET,
             "--ro-bind", str(spec.runner_dir), RUNNER_TARGET,
             "--ro-bind", str(spec.proxy_dir), PROXY_TARGET]
    if spec.global_dir is not None:
        argv += ["--ro-bind", str(spec.global_dir), GLOBAL_TARGET]
    if spec.packages_dir is not None:
        argv += ["--ro-bind", str(spec.packages_dir), PACKAGES_TARGET]
    if spec.skills_dir is not None:
        argv += ["--ro-bind", str(spec.skills_dir), SKILLS_TARGET]
    for m in spec.extra_mounts:
        argv += ["--ro-bind" if m.readonly else "--bind", str(m.host), extra_target(m)]
    argv += ["--remount-ro", "/", "--chdir", GROUP_TARGET, "--", *command]
    return argv


def _alive_as(pid: int, name: str) -> bool:
    """True while `pid` is our bwrap for `name` (a reused pid has another cmdline)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    marker = [b"--setenv", MARK.encode(), name.encode()]
    # Right after the spawn the pid may still be the sh/prlimit wrapper that is about to exec bwrap.
    return any(os.path.basename(a) == b"bwrap" for a in args) and any(
        args[i:i + 3] == marker for i in range(len(args)))


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                for child in (task / "children").read_text().split():
                    found.append(int(child))
                    todo.append(int(child))
        except OSError:
            continue
    return found


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


LAUNCH_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class BwrapRuntime:
    name = "bwrap"

    def __init__(self, state_dir: Path, *, python: str | None = None, secrets=(), bwrap: str = "bwrap"):
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.python = python or sys.executable
        self.secrets = list(secrets)
        self.bwrap = bwrap
        self._locks = NameLocks()
        self._procs: dict[str, subprocess.Popen] = {}
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bwrap-spawner")

    # --- bookkeeping -----------------------------------------------------------------

    def _pidfile(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def _record(self, name: str) -> dict | None:
        try:
            return json.loads(self._pidfile(name).read_text())
        except (OSError, ValueError):
            return None

    def _forget(self, name: str, record: dict | None) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        if record:
            limits_mod.release(record.get("cgroups", []))
        self._pidfile(name).unlink(missing_ok=True)

    def _reap(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is not None:
            proc.poll()  # collects an exited child, so its pid stops looking alive

    def pid_of(self, name: str) -> int | None:
        """The host pid of the sandbox's outer bwrap process, while it runs."""
        self._reap(name)
        record = self._record(name)
        if record and _alive_as(record["pid"], name):
            return record["pid"]
        return None

    @contextmanager
    def _exclusive(self, name: str):
        """This name, for this thread and against other host processes (e.g. a `chat` command)."""
        with self._locks(name), open(self.state_dir / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # --- Runtime ---------------------------------------------------------------------

    def start(self, spec: SandboxSpec) -> None:
        check_spec(spec, self.secrets)
        with self._exclusive(spec.name):
            if self.pid_of(spec.name) is not None:
                return
            self._forget(spec.name, self._record(spec.name))
            prepare_session(spec)
            placement = limits_mod.place(spec.name, limits_mod.Limits(spec.memory_mb, spec.cpus, spec.pids))
            program = seccomp.cached_filter()
            seccomp_fd = seccomp.filter_fd(program) if program else None
            argv = placement.wrap(bwrap_argv(spec, python=self.python, bwrap=self.bwrap,
                                             etc_dir=identity_files(self.state_dir, spec.uid, spec.gid),
                                             seccomp_fd=seccomp_fd, disable_userns=disables_userns(self.bwrap)))
            log_path = self.state_dir / f"{spec.name}.log"
            if log_path.exists():
                log_path.replace(log_path.with_suffix(".prev.log"))  # keep the last run for inspection
            with open(log_path, "wb") as out:
                # bwrap itself is the sandbox's pid 1, and /proc/1/environ is readable inside: it must
                # not inherit the host's environment (which may hold ANTHROPIC_API_KEY).
                try:
                    proc = self._spawner.submit(subprocess.Popen, argv, stdin=subprocess.DEVNULL, stdout=out,
                                                stderr=subprocess.STDOUT, start_new_session=True, env=LAUNCH_ENV,
                                                pass_fds=(seccomp_fd,) if seccomp_fd is not None else ()).result()
                finally:
                    if seccomp_fd is not None:
                        os.close(seccomp_fd)  # bwrap has its own copy (it reads it before the agent starts)
            self._procs[spec.name] = proc
            record = {"pid": proc.pid, "name": spec.name, "labels": dict(spec.labels),
                      "cgroups": placement.dirs, "limits": placement.describe(), "started": time.time()}
            tmp = self._pidfile(spec.name).with_suffix(".tmp")
            tmp.write_text(json.dumps(record))
            tmp.replace(self._pidfile(spec.name))
            log.info("sandbox %s: pid %d, %s", spec.name, proc.pid, placement.describe())
            # bwrap fails fast on a bad mount; report that here rather than as a silent exit.
            try:
                rc = proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                return
            output = self.logs(spec.name)
            if rc != 0 and output.startswith(("bwrap:", "nanoclaw-sandbox:", "prlimit:")):  # not the agent's exit
                self._forget(spec.name, record)
                raise RuntimeError(f"sandbox {spec.name} could not start: {output.strip()[:2000]}")

    def is_running(self, name: str) -> bool:
        return self.pid_of(name) is not None

    def stop(self, name: str, timeout: float = 5) -> None:
        with self._exclusive(name):
            record = self._record(name)
            pid = self.pid_of(name)
            if pid is not None:
                # The agent gets SIGTERM (bwrap's own pid-1 ignores it), then everything a SIGKILL.
                _signal(_descendants(pid), signal.SIGTERM)
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline and self.pid_of(name) is not None:
                    time.sleep(0.05)
                if self.pid_of(name) is not None:
                    _signal(_descendants(pid) + [pid], signal.SIGKILL)
                self._wait_gone(name, pid)
            self._forget(name, record)  # also kills stragglers left in the sandbox's cgroup

    def _wait_gone(self, name: str, pid: int, limit: float = 5) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and self.pid_of(name) is not None:
            time.sleep(0.02)

    def list_sandboxes(self, install_id: str) -> list[str]:
        names = []
        for path in self.state_dir.glob("*.pid"):
            name = path.stem
            record = self._record(name)
            if not record or record.get("labels", {}).get(INSTALL_LABEL) != install_id:
                continue
            if self.is_running(name):
                names.append(name)
            else:
                self._tidy(name)
        return sorted(names)

    def _tidy(self, name: str) -> None:
        """Drop the pidfile and cgroups of a sandbox that ended by itself (its log stays)."""
        lock = self._locks(name)
        if not lock.acquire(blocking=False):
            return  # someone is starting or stopping it right now
        try:
            with open(self.state_dir / f"{name}.lock", "w") as flock:
                try:
                    fcntl.flock(flock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return
                if self.pid_of(name) is None:
                    self._forget(name, self._record(name))
        finally:
            lock.release()

    def discard(self, name: str) -> None:
        """Forget a stopped sandbox for good (its session was removed): its pidfile, logs and lock."""
        with self._exclusive(name):
            if self.pid_of(name) is not None:
                return
            self._forget(name, self._record(name))
            for path in (self.state_dir / f"{name}.log", self.state_dir / f"{name}.prev.log"):
                path.unlink(missing_ok=True)
        (self.state_dir / f"{name}.lock").unlink(missing_ok=True)

    def logs(self, name: str) -> str:
        path = self.state_dir / f"{name}.log"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""
