"""Sandbox start-to-first-output, per runtime (median of N).

    .venv/bin/python -m bench.sandbox_start [N]

"first output" = the sandboxed program has written a file into /workspace/session; measured
from the start() call. Three programs: a bare `python3 -c`, one that first imports
claude_agent_sdk whole, and one with the agent runner's own imports (the SDK without the parts of mcp
that agent_runner/left_out.py keeps out), what it does before its first useful output.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from nanoclaw.config import PROJECT_ROOT
from nanoclaw.runtime import bwrap as bwrap_rt
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.runtime.base import INSTALL_LABEL, SandboxSpec

PROGRAMS = {
    "bare python": "open('/workspace/session/ready', 'w').close()",
    "import claude_agent_sdk": "import claude_agent_sdk\nopen('/workspace/session/ready', 'w').close()",
    # what `python -m agent_runner` imports before its CLI starts: the SDK without what left_out.py names
    "the runner's imports": "import agent_runner.__main__, agent_runner.mcp_tools, agent_runner.poll_loop, "
                            "agent_runner.provider\nopen('/workspace/session/ready', 'w').close()",
}


def runtimes(state: Path):
    client, _ = docker_rt.connect()
    if client is not None:
        yield docker_rt.DockerRuntime(client, image="nanoclaw-agent:latest")
    if bwrap_rt.probe() is None:
        yield bwrap_rt.BwrapRuntime(state / "bwrap")


def once(rt, root: Path, program: str) -> float:
    run = root / uuid.uuid4().hex[:8]
    session, inbound, group, proxy = run / "session", run / "inbound", run / "group", run / "proxy"
    for d in (session, inbound, group, proxy):
        d.mkdir(parents=True)
    spec = SandboxSpec(name=f"nanoclaw-bench-{run.name}", session_dir=session, inbound_dir=inbound, group_dir=group,
                       global_dir=None,
                       runner_dir=PROJECT_ROOT / "container" / "agent_runner", proxy_dir=proxy,
                       command=("python3", "-c", program), labels={INSTALL_LABEL: "bench"})
    started = time.monotonic()
    rt.start(spec)
    while not (session / "ready").exists():
        if time.monotonic() - started > 60:
            raise RuntimeError(f"no output from {rt.name}: {rt.logs(spec.name)}")
        time.sleep(0.002)
    elapsed = time.monotonic() - started
    rt.stop(spec.name, timeout=1)
    return elapsed


def main(n: int = 5) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rt in runtimes(root):
            for program in PROGRAMS.values():
                once(rt, root, program)  # warm the page cache
            # interleaved, in rotating order, so the machine's drift falls on every program alike
            times = {label: [] for label in PROGRAMS}
            labels = list(PROGRAMS)
            for i in range(n):
                for label in labels[i % len(labels):] + labels[:i % len(labels)]:
                    times[label].append(once(rt, root, PROGRAMS[label]))
            for label, took in times.items():
                print(f"{rt.name:6} {label:24} median {statistics.median(took):.3f}s "
                      f"(min {min(took):.3f}, max {max(took):.3f}, n={n})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
