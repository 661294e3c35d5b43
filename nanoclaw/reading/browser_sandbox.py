"""Where a session's Chromium runs: a sandbox of its own, never the agent's.

Playwright starts "Chromium" by running a launcher script this module writes: the script runs
bubblewrap (no network but its own loopback, an empty /tmp for the profile, uid 1000, no
environment but what is set here) with `relay.py` first, which becomes Chromium. Playwright talks
to Chromium over the pipe it opened (descriptors 3 and 4), which passes through bwrap and the exec
untouched, so the driver stays on the host and the browser has no way out but the host's proxy.
Limits: 1 GiB and 256 processes (a cgroup, else prlimit), as sandboxes get them.
"""
from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..runtime import limits as limits_mod
from ..runtime.bwrap import _root_links, probe

CHROMIUM = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")
RELAY = Path(__file__).with_name("relay.py")
PROXY_PORT = 3128          # the relay's port on the sandbox's own loopback
SOCKET_DIR = "/run/browser"
MEMORY_MB, PIDS, CPUS = 1024, 256, 1.0
# Chromium's own switches: no sandbox of its own (it is inside ours), nothing talking home, the
# host's proxy for every scheme including loopback, no UDP around the proxy (WebRTC).
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-breakpad",
        "--disable-extensions", "--disable-component-extensions-with-background-pages", "--disable-default-apps",
        "--disable-client-side-phishing-detection", "--no-pings", "--no-default-browser-check",
        "--disable-features=DnsOverHttps,MediaRouter,OptimizationHints,Translate,AutofillServerCommunication",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
        f"--proxy-server=http://127.0.0.1:{PROXY_PORT}", "--proxy-bypass-list=<-loopback>"]


def chromium() -> str | None:
    for path in CHROMIUM:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromium")


@lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None when a browser can run here, else why not (one line, for doctor and the agent); asked
    once a program (it runs bwrap once)."""
    if chromium() is None:
        return "Chromium is not installed on the host (apt-get install chromium)"
    why = probe()
    if why:
        return f"bubblewrap cannot make the browser's sandbox here: {why}"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "Playwright is not installed in the host's venv (pip install playwright)"
    return None


@dataclass
class Launcher:
    """One session's browser sandbox: its launcher script, its socket folder, its limits."""
    folder: Path       # private to the worker (0700): the launcher and proxy.sock
    placement: limits_mod.Placement

    @property
    def script(self) -> Path:
        return self.folder / "chromium"

    @property
    def socket(self) -> Path:
        return self.folder / "sock" / "proxy.sock"

    def release(self) -> None:
        limits_mod.release(self.placement.dirs)


def bwrap_argv(socket_dir: Path, exe: str, python: str = "/usr/bin/python3") -> list[str]:
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--hostname", "browser",
            "--die-with-parent", "--new-session", "--clearenv", "--setenv", "HOME", "/tmp",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
            "--ro-bind", "/usr", "/usr", *_root_links()]
    for name in ("fonts", "ssl", "ca-certificates", "alternatives", "ld.so.cache", "localtime"):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(512 * 2**20), "--tmpfs", "/tmp",
             "--ro-bind", str(RELAY), "/opt/relay.py", "--bind", str(socket_dir), SOCKET_DIR,
             "--remount-ro", "/", "--chdir", "/tmp", "--",
             python, "/opt/relay.py", f"{SOCKET_DIR}/proxy.sock", str(PROXY_PORT), "--", exe]
    return argv


def prepare(folder: Path, name: str) -> Launcher:
    """Write the launcher for one session's browser into `folder` (made 0700 by the caller)."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("Chromium is not installed on the host")
    (folder / "sock").mkdir(mode=0o700, exist_ok=True)
    placement = limits_mod.place(name, limits_mod.Limits(MEMORY_MB, CPUS, PIDS))
    command = placement.wrap(bwrap_argv(folder / "sock", exe))
    launcher = Launcher(folder, placement)
    launcher.script.write_text("#!/bin/sh\nexec " + shlex.join(command) + ' "$@"\n')
    launcher.script.chmod(0o700)
    return launcher
