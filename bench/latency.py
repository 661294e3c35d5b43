"""Message latency through the whole pipe, against a scripted fake model on 127.0.0.1.

    .venv/bin/python -m bench.latency [N]          (N warm messages per runtime, default 50)

warm overhead = (message accepted by the router → reply handed to the channel adapter)
                minus the fake model's own time. The path: router writes inbound.db → the
                runner notices → real SDK + CLI → proxy → fake model → outbound.db →
                background delivery thread → adapter. The proxy is its own program
                (`flask … nanoclaw proxy`, as under `make run`); --proxy-in-process runs it in
                the bench's process instead, as this bench did before 2026-11-25.
cold start    = wake (sandbox start) → first model request at the fake.
baseline      = the same fake, called by a bare ClaudeSDKClient on the host (no sandbox, no proxy,
                no databases, no tools): the floor the SDK itself costs, measured in this run.
same agent    = a ClaudeSDKClient on the host with the runner's own options (ClaudeProvider.options:
                the built-in tools, NanoClaw's MCP tools, hooks, the system prompt, partial messages):
                what the agent costs the CLI before any pipe, so the ratio against it is the pipe's.
Targets on this machine: warm overhead p50 ≤ 300 ms, cold start p50 ≤ 3 s.
"""
from __future__ import annotations

import asyncio
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from nanoclaw.app import create_app
from nanoclaw.inbound import router  # noqa: E402
from nanoclaw.lifecycle.background import start as start_background  # noqa: E402
from nanoclaw.channels.base import InboundEvent, iso_utc, register  # noqa: E402
from nanoclaw.config import Settings  # noqa: E402
from nanoclaw.db import database  # noqa: E402
from nanoclaw.migrate import apply_pending  # noqa: E402
from nanoclaw.models import AgentGroup, MessagingGroup, Wiring  # noqa: E402
from nanoclaw.proxy import ProxyServer  # noqa: E402
from nanoclaw.proxy.sockets import socket_path  # noqa: E402
from nanoclaw.runtime import bwrap as bwrap_rt  # noqa: E402
from nanoclaw.runtime import docker as docker_rt  # noqa: E402
from nanoclaw.runtime.image import image_exists  # noqa: E402
from nanoclaw.lifecycle.sandboxes import SandboxManager  # noqa: E402

HANDED: dict[str, float] = {}
ROUTED: list[float] = []
BASE_SPLIT: dict[str, list[float]] = {'to_model': [], 'back': []}
ARRIVED = threading.Condition()
AFTER_STOP = 5  # messages sent after a quiet spell, in which the runner stopped its idle CLI
QUIET_S = 2.5   # with NANOCLAW_FREEZE_IDLE_S=1 (set below; 0 in the environment measures the same without stopping)


@register("bench")
class BenchAdapter:
    """A channel that records when a reply was handed to it."""

    def __init__(self, settings):
        pass

    def send_text(self, target, text):
        with ARRIVED:
            HANDED[text.split("|", 1)[0]] = time.monotonic()
            ARRIVED.notify_all()
        return "b-" + uuid.uuid4().hex[:8]

    edit_text = react = lambda self, *a: None
    send_file = send_card = lambda self, *a: "b"


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def timed_turns(options, model: FakeModel, n: int, label: str, split: dict | None = None) -> list[float]:
    """n warm turns of one ClaudeSDKClient (after an untimed first), each minus the fake's own time."""
    from claude_agent_sdk import ClaudeSDKClient, ResultMessage
    out = []
    async with ClaudeSDKClient(options) as client:
        for i in range(n + 1):
            before = len(model.requests)
            started = time.monotonic()
            await client.query(f"{label} {i}")
            async for msg in client.receive_response():
                if isinstance(msg, ResultMessage):
                    break
            ended = time.monotonic()
            calls = model.requests[before:]
            if i:  # the first turn warms the CLI up
                out.append(ended - started - sum(r.handled_s for r in calls))
                if split is not None:
                    split["to_model"].append(calls[0].received_mono - started)
                    split["back"].append(ended - calls[-1].received_mono - calls[-1].handled_s)
    return out


def baseline(model: FakeModel, n: int) -> list[float]:
    """Warm turns of a bare ClaudeSDKClient on the host, minus the fake's own time (seconds)."""
    from claude_agent_sdk import ClaudeAgentOptions

    env = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "bench",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1"}
    options = ClaudeAgentOptions(tools=[], env=env, cwd=tempfile.mkdtemp())
    return asyncio.run(timed_turns(options, model, n, "baseline", BASE_SPLIT))


def same_agent(model: FakeModel, n: int) -> list[float]:
    """Warm turns of the runner's own SDK configuration on the host (no sandbox, proxy or host
    databases; the runner's store in a throw-away session folder), minus the fake's time."""
    sys.path.insert(0, str(ROOT / "container"))
    from agent_runner.config import RunnerConfig
    from agent_runner.mcp_tools import ToolContext
    from agent_runner.provider import ClaudeProvider
    from agent_runner.store import SessionStore
    from agent_runner.targets import Target
    from nanoclaw.sessions import store as host_store

    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-agent-"))
    folder = tmp / "session"
    host_store.prepare(folder, Target("bench", "b"))
    for d in ("group", "global"):
        (tmp / d).mkdir()
    config = RunnerConfig.from_env({"NANOCLAW_SESSION_DIR": str(host_store.agent_part(folder)),
                                    "NANOCLAW_INBOUND_DIR": str(folder / "host"), "NANOCLAW_WORKSPACE_DIR": str(tmp),
                                    "NANOCLAW_GROUP_DIR": str(tmp / "group"), "NANOCLAW_GLOBAL_DIR": str(tmp / "global")})
    runner_store = SessionStore.of_session(folder)
    provider = ClaudeProvider(config, runner_store, ToolContext(store=runner_store, config=config), model.url,
                              on_event=lambda: None)
    options = provider.options(None)
    options.env = {**options.env, "IS_SANDBOX": "1"}  # the CLI refuses bypassPermissions as root otherwise

    try:
        return asyncio.run(timed_turns(options, model, n, "same agent"))
    finally:
        runner_store.close()


class ProxyProgram:
    """The proxy as `make run` runs it: `flask --app app nanoclaw proxy`, its own process."""

    def __init__(self, env: dict, folder: str, socket: Path):
        import subprocess
        self.proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "flask"), "--app", "app", "nanoclaw", "proxy"],
                                     cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        from nanoclaw.proxy.sockets import is_live
        deadline = time.monotonic() + 20
        while not (socket.exists() and is_live(socket)):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"the proxy program did not open {socket}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def measure(runtime_name: str, runtime, settings, model: FakeModel, n: int, proxy_env: dict | None = None) -> dict:
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    agent = AgentGroup.create(name="Bench", folder=f"bench-{runtime_name}")
    mg = MessagingGroup.create(channel_type="bench", platform_id=agent.folder, kind="dm",
                               unknown_sender_policy="public")
    Wiring.create(messaging_group=mg, agent_group=agent, engage_mode="pattern", engage_pattern=".")
    if proxy_env is None:
        door = ProxyServer(settings, lambda: [agent.folder]).start()
        door.ensure_socket(agent.folder)
        door.wait_ready(agent.folder, timeout=10)
    else:
        door = ProxyProgram(proxy_env, agent.folder, socket_path(settings.proxy_dir, agent.folder))
    manager = SandboxManager(settings, runtime)
    bg = start_background(app, manager)
    woken: list = []

    def send(tag: str) -> tuple[float, int]:
        before = len(model.requests)
        event = InboundEvent(channel="bench", event_id=uuid.uuid4().hex, chat_id=agent.folder, kind="dm",
                             sender_id="owner", sender_name="Owner", text=tag, timestamp=iso_utc(time.time()))
        accepted = time.monotonic()
        router.route(event, settings, wake=woken.append)
        ROUTED.append(time.monotonic() - accepted)
        if woken:
            session = woken.pop()
            bg.watch(router.session_dir(settings, session))
            manager.wake(agent.folder, session.id)
        return accepted, before

    def wait_reply(tag: str, timeout: float = 120) -> float:
        with ARRIVED:
            if not ARRIVED.wait_for(lambda: tag in HANDED, timeout=timeout):
                raise TimeoutError(f"no reply for {tag}")
            return HANDED[tag]

    try:
        # cold: the first message starts the sandbox
        cold = []
        for i in range(3):
            tag = f"cold{i}-{runtime_name}"
            accepted, before = send(tag)
            model.wait_for(lambda r: len(model.requests) > before, timeout=60)
            cold.append(model.requests[before].received_mono - accepted)
            wait_reply(tag)
            session = manager.running()
            for name in session:
                runtime.stop(name)
        # warm: the sandbox is up (one untimed turn to start it)
        send(f"warmup-{runtime_name}")
        wait_reply(f"warmup-{runtime_name}")
        warm, to_model, back, requests = [], [], [], []
        ROUTED.clear()
        for i in range(n):
            tag = f"warm{i}-{runtime_name}"
            accepted, before = send(tag)
            handed = wait_reply(tag)
            calls = model.requests[before:]
            model_time = sum(r.handled_s for r in calls)
            warm.append(handed - accepted - model_time)
            to_model.append(calls[0].received_mono - accepted)
            back.append(handed - calls[-1].received_mono - calls[-1].handled_s)
            requests.append(len(calls))
        # after a quiet spell: the runner stopped its CLI (NANOCLAW_FREEZE_IDLE_S) and continues it
        stopped = []
        for i in range(AFTER_STOP):
            time.sleep(QUIET_S)
            tag = f"stopped{i}-{runtime_name}"
            accepted, before = send(tag)
            handed = wait_reply(tag)
            stopped.append(handed - accepted - sum(r.handled_s for r in model.requests[before:]))
        return {"cold": cold, "warm": warm, "to_model": to_model, "back": back, "requests": requests,
                "routed": list(ROUTED), "stopped": stopped}
    finally:
        bg.shutdown()
        for name in manager.running():
            runtime.stop(name)
        door.stop()
        database.close()


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    in_process = "--proxy-in-process" in sys.argv
    n = int(args[0]) if args else 50
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-"))
    def script(req):  # the reply names the message it answers, so the adapter can tell them apart
        tags = re.findall(r">([^<>]+)</message>", req.last_user_text())
        return Reply.say((tags[-1] if tags else "?") + "|ok")
    with FakeModel(script=script) as model:
        env = {"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"), "TZ": "UTC",
               "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
               "NANOCLAW_INSTALL_ID": f"bench-{os.getpid()}", "NANOCLAW_FREEZE_IDLE_S": os.environ.get("NANOCLAW_FREEZE_IDLE_S", "1")}
        print(f"NanoClaw latency, {n} warm messages per runtime, fake model on 127.0.0.1")
        base = baseline(model, min(n, 20))
        print(f"baseline  bare SDK warm turn (host, no sandbox/proxy/DB): p50 {pct(base, .5)*1000:6.0f} ms  "
              f"p95 {pct(base, .95)*1000:6.0f} ms")
        print(f"            of which: query -> first model request p50 {pct(BASE_SPLIT['to_model'], .5)*1000:4.0f} ms, "
              f"last model byte -> result p50 {pct(BASE_SPLIT['back'], .5)*1000:4.0f} ms")
        agent = same_agent(model, min(n, 20))
        print(f"same agent  the runner's SDK options on the host (its tools and prompt, no pipe): p50 "
              f"{pct(agent, .5)*1000:6.0f} ms  p95 {pct(agent, .95)*1000:6.0f} ms")
        runtimes = [("bwrap", lambda s: bwrap_rt.BwrapRuntime(s.data_dir / "run" / "bwrap"))]
        client, _ = docker_rt.connect()
        probe = Settings.load(environ=env, dotenv_path=tmp / "none")
        if client is not None and image_exists(probe, client=client):
            runtimes.append(("docker", lambda s: docker_rt.DockerRuntime(client, image=s.agent_image)))
        for name, make in runtimes:
            run_env = {**env, "DATABASE_URL": f"sqlite:///{tmp / name / 'nc.db'}", "NANOCLAW_DATA_DIR": str(tmp / name),
                       "NANOCLAW_ENV_FILE": str(tmp / "none")}
            settings = Settings.load(environ=run_env, dotenv_path=tmp / "none")
            result = measure(name, make(settings), settings, model, n, None if in_process else run_env)
            warm, cold = result["warm"], result["cold"]
            print(f"{name:7s}  warm overhead: p50 {pct(warm, .5)*1000:6.0f} ms  p95 {pct(warm, .95)*1000:6.0f} ms  "
                  f"(x{pct(warm, .5)/pct(base, .5):.2f} of the bare SDK, x{pct(warm, .5)/pct(agent, .5):.2f} of the "
                  f"same agent; p95 x{pct(warm, .95)/pct(base, .95):.2f} / x{pct(warm, .95)/pct(agent, .95):.2f})")
            print(f"{name:7s}    of which: accepted -> first model request p50 {pct(result['to_model'], .5)*1000:4.0f} ms, "
                  f"last model byte -> reply handed p50 {pct(result['back'], .5)*1000:4.0f} ms, "
                  f"model requests per turn {statistics.median(result['requests']):.0f}; "
                  f"router.route itself p50 {pct(result['routed'], .5)*1000:.1f} ms")
            print(f"{name:7s}  after {QUIET_S:.1f} s quiet (CLI stopped after {settings.freeze_idle_s} s; 0 = never): "
                  f"p50 {pct(result['stopped'], .5)*1000:6.0f} ms  max {max(result['stopped'])*1000:6.0f} ms  "
                  f"({len(result['stopped'])} messages)")
            print(f"{name:7s}  cold start:    p50 {pct(cold, .5):6.2f} s   max {max(cold):6.2f} s   "
                  f"(target p50 <= 3 s)")


if __name__ == "__main__":
    main()
