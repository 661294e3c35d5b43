"""CPU time of everything that ran in a phase, from the kernel's cgroup accounting.

/proc's utime and stime miss a thread or process that ended before the phase's end unless its
parent waited for it, and come in whole 10 ms ticks; schedstat is exact but only for threads alive
when read. A cgroup's counter (v1 `cpuacct.usage`, v2 `cpu.stat` usage_usec) keeps the time of
every task that ever ran in it, ended or not, in ns (µs on v2), hierarchically: a parent's counter
includes its children's. So the bench starts the service inside a cgroup of its own and, when a
phase starts, moves each process into a child cgroup named for its role; anything that starts
later lands in its parent's role. Docker's containers keep their own cgroups, read where the
container's first process lives.

Needs root and a writable cgroup mount; `Accounting.open()` answers None where there is none, and
the bench falls back to /proc's ticks and says so.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpuacct")
V2 = Path("/sys/fs/cgroup")


def _v2_root() -> Path | None:
    for mount in (V2, V2 / "unified"):
        if (mount / "cgroup.controllers").exists():
            return mount
    return None


class Accounting:
    """One cgroup for the service, one child per role."""

    def __init__(self, root: Path, v1: bool):
        self.root, self.v1 = root, v1

    @classmethod
    def open(cls, name: str) -> Accounting | None:
        if (V1 / "cpuacct.usage").exists():
            base, v1 = V1, True
        elif (v2 := _v2_root()) is not None:
            base, v1 = v2, False
        else:
            return None
        root = base / name
        try:
            root.mkdir(exist_ok=True)
            acct = cls(root, v1)
            acct.usage_ns(root)
        except OSError:
            return None
        return acct

    def enter(self) -> None:
        """Called in the child between fork and exec (subprocess's preexec_fn): the service and all
        it starts run inside the cgroup from their first instruction."""
        (self.root / "cgroup.procs").write_text(str(os.getpid()))

    def usage_ns(self, group: Path) -> int:
        if self.v1:
            return int((group / "cpuacct.usage").read_text())
        for line in (group / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) * 1000
        raise OSError(f"no usage_usec in {group}/cpu.stat")

    def child(self, role: str) -> Path:
        group = self.root / re.sub(r"[^a-z0-9]+", "-", role.lower()).strip("-")
        group.mkdir(exist_ok=True)
        return group

    def place(self, pid: int, role: str) -> bool:
        """Move a process (all its threads) into its role's cgroup; False if it is gone or lives in
        a cgroup of its own we do not manage (a Docker container)."""
        try:
            (self.child(role) / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            return False

    def roles(self) -> dict[str, int]:
        """role cgroup name -> ns so far; '(not placed)' holds what ran in the root cgroup itself."""
        out = {p.name: self.usage_ns(p) for p in self.root.iterdir() if p.is_dir()}
        out["(not placed)"] = self.usage_ns(self.root) - sum(out.values())
        return out

    def close(self) -> None:
        """Move what is left to the parent cgroup and remove ours (the service has stopped)."""
        for group in sorted((p for p in self.root.iterdir() if p.is_dir()), reverse=True) + [self.root]:
            try:
                for pid in (group / "cgroup.procs").read_text().split():
                    try:
                        (self.root.parent / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                group.rmdir()
            except OSError:
                pass


def container_usage_ns(pid: int) -> int | None:
    """The CPU of the container whose process `pid` is, from its own cgroup (v1 cpuacct or v2)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(",") and (V1 / path.lstrip("/") / "cpuacct.usage").exists():
            return int((V1 / path.lstrip("/") / "cpuacct.usage").read_text())
        if controllers == "" and (v2 := _v2_root()) is not None and (v2 / path.lstrip("/") / "cpu.stat").exists():
            for stat in (v2 / path.lstrip("/") / "cpu.stat").read_text().splitlines():
                if stat.startswith("usage_usec "):
                    return int(stat.split()[1]) * 1000
    return None
