"""Where a session's Chromium runs: a sandbox of its own, never the agent's.

Playwright starts "Chromium" by running a launcher script this module writes. The script runs a
sandbox with no network but its own loopback, an empty /tmp for the profile, uid 1000 and no
environment but what is set here, with `relay.py` first, which becomes Chromium. Playwright talks
to Chromium over the pipe it opened (descriptors 3 and 4), so the driver stays on the host and the
browser has no way out but the host's proxy. Two sandboxes: bubblewrap (the pipe passes through it
untouched) and, where the agents run on a local Docker engine and the browser's image is built
(`image build --browser`), a container (the pipe rides its stdin and stdout). Limits: 1 GiB, 256
processes, one CPU. Remote engines and Kubernetes have none (`where` says why).
"""
from __future__ import annotations

import os
import shlex
import shutil
import time
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Where:
    kind: str          # bwrap | docker
    engine: str = ""   # docker: the engine's URL (a local one)
    image: str = ""    # docker: the browser image's tag

    def worker_args(self) -> tuple[str, ...]:
        return ("--sandbox", self.kind) + (("--engine", self.engine, "--image", self.image) if self.kind == "docker" else ())


REMOTE = ("tcp://", "ssh://", "http://", "https://")
BUILD_IT = "build the browser's image: flask --app app nanoclaw image build --browser"


def decide(runtime: str, engine: str | None, agents_on_docker: bool, image: str | None, bwrap_problem: str | None,
           host_chromium: bool) -> Where | str:
    """Pure: where the browser runs, or why it cannot. Beside the agents: in a container when they run on
    a local Docker engine and the browser's image is built (else bubblewrap, where it works); never
    beside a remote engine or a cluster, which cannot see the host's proxy socket."""
    if runtime == "kubernetes":
        return "the agents run on Kubernetes; a browser runs only beside local sandboxes (bubblewrap or Docker)"
    if agents_on_docker and engine and engine.startswith(REMOTE):
        return f"the Docker engine ({engine}) is on another machine; a browser runs only beside local sandboxes"
    if agents_on_docker and image:
        return Where("docker", engine or "", image)
    if bwrap_problem is None and host_chromium:
        return Where("bwrap")
    if agents_on_docker:
        return f"no browser image on the Docker engine: {BUILD_IT}"
    if bwrap_problem:
        return f"bubblewrap cannot make the browser's sandbox here: {bwrap_problem}"
    return "Chromium is not installed on the host (apt-get install chromium)"


_seen: dict[str, tuple[float, Where | str]] = {}
LOOK_AGAIN_S = 60.0  # an image built or Chromium installed meanwhile is seen within a minute


def where(settings) -> Where | str:
    """Where a browser runs on this host, or why none can (one line, for doctor and the agent)."""
    key = f"{settings.runtime}|{settings.agent_image}"
    if key in _seen and time.monotonic() - _seen[key][0] < LOOK_AGAIN_S:
        return _seen[key][1]
    try:
        import playwright  # noqa: F401
        answer = _look(settings)
    except ImportError:
        answer = "Playwright is not installed in the host's venv (pip install playwright)"
    _seen[key] = (time.monotonic(), answer)
    return answer


def _look(settings) -> Where | str:
    engine, on_docker, image = None, False, None
    if settings.runtime in ("docker", "auto"):
        from ..runtime import docker as docker_rt
        from ..runtime.image import browser_image, image_exists
        client, engine = docker_rt.connect()
        on_docker = client is not None and (settings.runtime == "docker" or image_exists(settings, client=client))
        image = browser_image(settings, client=client) if on_docker else None
    return decide(settings.runtime, engine, on_docker, image, probe(), chromium() is not None)


def unavailable(settings) -> str | None:
    answer = where(settings)
    return answer if isinstance(answer, str) else None


@dataclass
class Launcher:
    """One session's browser sandbox: its launcher script, its socket folder, its limits."""
    folder: Path       # private to the worker (0700): the launcher and proxy.sock
    placement: limits_mod.Placement | None = None
    container: str = ""
    engine: str = ""
    extra: list = field(default_factory=list)

    @property
    def script(self) -> Path:
        return self.folder / "chromium"

    @property
    def socket(self) -> Path:
        return self.folder / "sock" / "proxy.sock"

    def release(self) -> None:
        if self.placement is not None:
            limits_mod.release(self.placement.dirs)
        if self.container:  # the container goes when Chromium does; one left behind is removed
            import subprocess
            subprocess.run([shutil.which("docker") or "docker", "-H", self.engine, "rm", "-f", self.container],
                           capture_output=True, timeout=30)


def bwrap_argv(socket_dir: Path, exe: str, python: str = "/usr/bin/python3") -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--hostname", "browser",
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


# Inside the container the pipe arrives as stdin and stdout: moved back to 3 and 4 before Chromium starts.
IN_CONTAINER = ('exec 3<&0 4>&1 0</dev/null 1>&2; '
                f'exec python3 /opt/relay.py {SOCKET_DIR}/proxy.sock {PROXY_PORT} -- /usr/lib/chromium/chromium "$@"')


def docker_argv(socket_dir: Path, engine: str, image: str, name: str) -> list[str]:
    return [shutil.which("docker") or "docker", "-H", engine, "run", "-i", "--rm", "--name", name,
            "--label", "nanoclaw.browser=1", "--network", "none", "--memory", f"{MEMORY_MB}m",
            "--memory-swap", f"{MEMORY_MB}m", "--pids-limit", str(PIDS), "--cpus", str(CPUS), "--read-only",
            "--tmpfs", "/tmp:rw,nosuid,nodev,size=512m,mode=1777", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--user", "1000:1000", "-e", "HOME=/tmp",
            "-v", f"{socket_dir}:{SOCKET_DIR}", "-v", f"{RELAY}:/opt/relay.py:ro", "--entrypoint", "/bin/sh",
            image, "-c", IN_CONTAINER, "browser"]


def prepare(folder: Path, name: str, where_: Where) -> Launcher:
    """Write the launcher for one session's browser into `folder` (made 0700 by the caller)."""
    sock = folder / "sock"
    if where_.kind == "docker":
        sock.mkdir(mode=0o755)  # the container's user (uid 1000) reaches the socket; the folder keeps others out
        launcher = Launcher(folder, container=name, engine=where_.engine)
        command, redirect = docker_argv(sock, where_.engine, where_.image, name), " <&3 >&4"
    else:
        exe = chromium()
        if exe is None:
            raise RuntimeError("Chromium is not installed on the host")
        sock.mkdir(mode=0o700)
        placement = limits_mod.place(name, limits_mod.Limits(MEMORY_MB, CPUS, PIDS))
        launcher = Launcher(folder, placement=placement)
        command, redirect = placement.wrap(bwrap_argv(sock, exe)), ""
    launcher.script.write_text("#!/bin/sh\nexec " + shlex.join(command) + ' "$@"' + redirect + "\n")
    launcher.script.chmod(0o700)
    return launcher
