"""Resource limits for bubblewrap sandboxes (Docker enforces its own).

Preferred: a cgroup per sandbox with memory, pids and cpu limits (cgroup v1 controllers, or
cgroup v2 when the hierarchy lets us enable them). The sandbox joins it before bwrap starts,
via a tiny `sh` wrapper that writes its own pid and then execs bwrap, so no child escapes.
Fallback when no cgroup is writable: `prlimit --data` (per-process private memory) and
`--nproc` (only effective when the host user is not root); cpu is then not limited.
"""
from __future__ import annotations

import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "nanoclaw-sandboxes"


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    cpus: float
    pids: int


@dataclass
class Placement:
    """Where one sandbox's limits live; `wrap` turns a command into one that honours them."""
    kind: str                                        # "cgroup-v1" | "cgroup-v2" | "prlimit"
    dirs: list[str] = field(default_factory=list)    # cgroup directories (removed by release)
    limits: Limits | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        if self.kind == "prlimit":
            lim = self.limits
            return ["prlimit", f"--data={lim.memory_mb * 2**20}", f"--nproc={lim.pids}", "--", *argv]
        joins = "; ".join(f"echo $$ > {shlex.quote(d + '/cgroup.procs')}" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "nanoclaw-sandbox", *argv]

    def describe(self) -> str:
        lim = self.limits
        if self.kind == "prlimit":
            return f"prlimit: data {lim.memory_mb} MiB per process, nproc {lim.pids} (no cpu limit)"
        return f"{self.kind}: memory {lim.memory_mb} MiB, pids {lim.pids}, cpus {lim.cpus}"


def _cgroup_paths(pid: int | str = "self") -> dict[str, str]:
    """controller (or "" for v2) -> the process's cgroup path, from /proc/PID/cgroup."""
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _v1(name: str, lim: Limits) -> Placement | None:
    own = _cgroup_paths()
    dirs = []
    try:
        for controller in ("memory", "pids", "cpu"):
            mount = CGROUP_ROOT / controller
            if not (mount / "cgroup.procs").exists():
                return None
            d = mount / own.get(controller, "/").lstrip("/") / GROUP / name
            d.mkdir(parents=True, exist_ok=True)
            dirs.append(d)
            if controller == "memory":
                _write(d / "memory.limit_in_bytes", str(lim.memory_mb * 2**20))
                if (d / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                    _write(d / "memory.memsw.limit_in_bytes", str(lim.memory_mb * 2**20))
            elif controller == "pids":
                _write(d / "pids.max", str(lim.pids))
            else:
                period = 100_000
                _write(d / "cpu.cfs_period_us", str(period))
                _write(d / "cpu.cfs_quota_us", str(int(lim.cpus * period)))
    except OSError:
        _remove(dirs)
        return None
    return Placement("cgroup-v1", [str(d) for d in dirs], lim)


def _v2(name: str, lim: Limits) -> Placement | None:
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        return None
    parent = CGROUP_ROOT / GROUP
    d = parent / name
    try:
        parent.mkdir(exist_ok=True)
        _write(CGROUP_ROOT / "cgroup.subtree_control", "+memory +pids +cpu")
        _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
        d.mkdir(exist_ok=True)
        _write(d / "memory.max", str(lim.memory_mb * 2**20))
        _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(lim.pids))
        _write(d / "cpu.max", f"{int(lim.cpus * 100_000)} 100000")
    except OSError:
        _remove([d])
        return None
    return Placement("cgroup-v2", [str(d)], lim)


def place(name: str, lim: Limits) -> Placement:
    """A cgroup for sandbox `name` with `lim`, or the prlimit fallback."""
    return _v1(name, lim) or _v2(name, lim) or Placement("prlimit", [], lim)


def _remove(dirs) -> None:
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            pass  # still busy or already gone; a later release retries


def release(dirs: list[str], wait: float = 2.0) -> None:
    """Remove a sandbox's cgroups; what still runs in them is the sandbox's own and is killed."""
    deadline = time.monotonic() + wait
    for d in dirs:
        while True:
            try:
                pids = [int(p) for p in Path(d, "cgroup.procs").read_text().split()]
            except OSError:
                break  # gone already
            if not pids:
                _remove([d])
                break
            if time.monotonic() > deadline:
                break  # a later release retries
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)


def memory_limit_of(pid: int) -> int | None:
    """The memory limit (bytes) of the cgroup `pid` is in, read from the kernel, for checks."""
    for controller, path in _cgroup_paths(pid).items():
        if controller == "memory":
            f = CGROUP_ROOT / "memory" / path.lstrip("/") / "memory.limit_in_bytes"
        elif controller == "" and (CGROUP_ROOT / "cgroup.controllers").exists():
            f = CGROUP_ROOT / path.lstrip("/") / "memory.max"
        else:
            continue
        try:
            raw = f.read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            return int(raw)
    return None

