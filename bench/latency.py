"""Message latency through the whole pipe, against a scripted fake model on 127.0.0.1.

    .venv/bin/python -m bench.latency [N]          (N warm messages per runtime, default 50)

warm overhead = (message accepted by the router → reply handed to the channel adapter)
                minus the fake model's own time. The path: router writes inbound.db → the
                runner notices → real SDK + CLI → proxy → fake model → outbound.db →
                background delivery thread → adapter. The proxy is its own program
                (`python -m nanoclaw.proxy`, as under `make run`); --proxy-in-process runs it in
                the bench's process instead, as this bench did before 2026-11-25. --stream-off wires
                the chat with streaming off (on is the default: the runner writes the answer so far).
cold start    = wake (sandbox start) → first model request at the fake.
baseline      = the same fake, called by a bare ClaudeSDKClient on the host (no sandbox, no proxy,
                no databases, no tools): the floor the SDK itself costs, measured in this run.
same agent    = a ClaudeSDKClient on the host with the runner's own options (ClaudeProvider.options:
                the built-in tools, NanoClaw's MCP tools, hooks, the system prompt, partial messages):
                what the agent costs the CLI before any pipe, timed to its result and to its answer
                (the model's end_turn, a few ms before the result).
The three are interleaved: each round runs one turn of each, in rotating order, with PACE_S before
each turn, so drift of this shared VM (±5 ms between runs) falls on all three alike.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "container")]
# the same agent on the host is served as in its sandbox: the runner's own tools server, without mcp
from agent_runner import left_out  # noqa: E402

left_out.install()

from fakes.model_api import FakeModel, Reply  # noqa: E402
from nanoclaw.app import create_app
from nanoclaw.inbound import router  # noqa: E402
from nanoclaw.service import start as start_background  # noqa: E402
from nanoclaw.channels.base import register  # noqa: E402
from nanoclaw.channels.events import InboundEvent, iso_utc
from nanoclaw.config import Settings  # noqa: E402
from nanoclaw.db import database  # noqa: E402
from nanoclaw.migrate import apply_pending  # noqa: E402
from nanoclaw.models import AgentGroup, MessagingGroup, Wiring  # noqa: E402
from nanoclaw.proxy import ProxyServer  # noqa: E402
from nanoclaw.proxy.sockets import socket_path  # noqa: E402
from nanoclaw.runtime import bwrap as bwrap_rt  # noqa: E402
from nanoclaw.runtime import docker as docker_rt  # noqa: E402
from nanoclaw.runtime.image import image_exists  # noqa: E402
from nanoclaw.sandboxes.manager import SandboxManager  # noqa: E402

HANDED: dict[str, float] = {}
ROUTED: list[float] = []
ARRIVED = threading.Condition()
PACE_S = 0.1  # before each timed turn: a person does not answer within 100 ms
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


class HostClient:
    """A ClaudeSDKClient on the host, on an event loop of its own thread, so that its turns can be
    interleaved with the pipe's: one turn each, in turn, sees the same state of the machine."""

    def __init__(self, options, model: FakeModel, label: str, on_close=lambda: None):
        self.model, self.label, self.n, self.on_close = model, label, 0, on_close
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"bench-{label}", daemon=True)
        self.thread.start()
        self.client = self._run(self._connect(options))
        self.turn()  # the first turn warms the CLI up

    def _run(self, coro, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self, options):
        from claude_agent_sdk import ClaudeSDKClient
        client = ClaudeSDKClient(options)
        await client.connect()
        return client

    async def _turn(self, text: str) -> tuple[float, float | None, float]:
        from claude_agent_sdk import ResultMessage, StreamEvent
        answered = None
        started = time.monotonic()
        await self.client.query(text)
        async for msg in self.client.receive_response():
            # the model's end_turn (a stream event; the bare client has none): its answer is known here
            if (answered is None and isinstance(msg, StreamEvent) and msg.parent_tool_use_id is None
                    and msg.event.get("type") == "message_delta"
                    and (msg.event.get("delta") or {}).get("stop_reason") == "end_turn"):
                answered = time.monotonic()
            if isinstance(msg, ResultMessage):
                break
        return started, answered, time.monotonic()

    def turn(self) -> dict:
        """One warm turn: seconds to the result and to the answer (the model's end_turn), each minus
        the fake's own time, and the split around the model call."""
        before = len(self.model.requests)
        self.n += 1
        started, answered, ended = self._run(self._turn(f"{self.label} {self.n}"))
        calls = self.model.requests[before:]
        model_s = sum(r.handled_s for r in calls)
        return {"result": ended - started - model_s, "answer": (answered or ended) - started - model_s,
                "to_model": calls[0].received_mono - started,
                "back": ended - calls[-1].received_mono - calls[-1].handled_s}

    def close(self) -> None:
        try:
            self._run(self.client.disconnect(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.on_close()


def bare_options(model: FakeModel):
    """A bare ClaudeSDKClient on the host: no tools, no sandbox, proxy or databases, no stream events
    (so its answer is known only at the result, as for a program that just awaits it)."""
    from claude_agent_sdk import ClaudeAgentOptions

    env = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "bench",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1"}
    return ClaudeAgentOptions(tools=[], env=env, cwd=tempfile.mkdtemp())


def same_agent_client(model: FakeModel) -> HostClient:
    """The runner's own SDK configuration on the host (no sandbox, proxy or host databases; the
    runner's store in a throw-away session folder, closed with the client)."""
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
    return HostClient(options, model, "same agent", on_close=runner_store.close)


class ProxyProgram:
    """The proxy as `make run` runs it: `python -m nanoclaw.proxy`, its own process."""

    def __init__(self, env: dict, folder: str, socket: Path):
        import subprocess
        self.proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "python"), "-m", "nanoclaw.proxy"],
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


def measure(runtime_name: str, runtime, settings, model: FakeModel, n: int, hosts: dict[str, HostClient],
            proxy_env: dict | None = None) -> dict:
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    agent = AgentGroup.create(name="Bench", folder=f"bench-{runtime_name}")
    mg = MessagingGroup.create(channel_type="bench", platform_id=agent.folder, kind="dm",
                               unknown_sender_policy="public")
    Wiring.create(messaging_group=mg, agent_group=agent, engage_mode="pattern", engage_pattern=".",
                  stream="--stream-off" not in sys.argv)  # on, the default: the runner writes the answer so far
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
        host = {name: [] for name in hosts}
        ROUTED.clear()

        def pipe_turn(i: int) -> None:
            tag = f"warm{i}-{runtime_name}"
            accepted, before = send(tag)
            handed = wait_reply(tag)
            calls = model.requests[before:]
            model_time = sum(r.handled_s for r in calls)
            warm.append(handed - accepted - model_time)
            to_model.append(calls[0].received_mono - accepted)
            back.append(handed - calls[-1].received_mono - calls[-1].handled_s)
            requests.append(len(calls))

        # one turn of each per round, the order rotating, a pause before each: all three see the same
        # machine, and none starts while another's tail (transcript, bookkeeping) still runs
        turns = [("pipe", pipe_turn)] + [(name, lambda _i, c=c, name=name: host[name].append(c.turn()))
                                         for name, c in hosts.items()]
        for i in range(n):
            k = i % len(turns)
            for _name, turn in turns[k:] + turns[:k]:
                time.sleep(PACE_S)
                turn(i)
        # after a quiet spell: the runner stopped its CLI (NANOCLAW_FREEZE_IDLE_S) and continues it
        stopped = []
        for i in range(AFTER_STOP):
            time.sleep(QUIET_S)
            tag = f"stopped{i}-{runtime_name}"
            accepted, before = send(tag)
            handed = wait_reply(tag)
            stopped.append(handed - accepted - sum(r.handled_s for r in model.requests[before:]))
        return {"cold": cold, "warm": warm, "to_model": to_model, "back": back, "requests": requests,
                "routed": list(ROUTED), "stopped": stopped, "host": host}
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
        runtimes = [("bwrap", lambda s: bwrap_rt.BwrapRuntime(s.data_dir / "run" / "bwrap"))]
        client, _ = docker_rt.connect()
        probe = Settings.load(environ=env, dotenv_path=tmp / "none")
        if client is not None and image_exists(probe, client=client):
            runtimes.append(("docker", lambda s: docker_rt.DockerRuntime(client, image=s.agent_image)))
        for name, make in runtimes:
            run_env = {**env, "DATABASE_URL": f"sqlite:///{tmp / name / 'nc.db'}", "NANOCLAW_DATA_DIR": str(tmp / name),
                       "NANOCLAW_ENV_FILE": str(tmp / "none")}
            settings = Settings.load(environ=run_env, dotenv_path=tmp / "none")
            # new host CLIs for each runtime, as the sandbox's CLI is new: the three compared have the same
            # turns behind them and the same length of conversation
            hosts = {"bare": HostClient(bare_options(model), model, "bare"),
                     "agent": same_agent_client(model)}
            try:
                result = measure(name, make(settings), settings, model, n, hosts, None if in_process else run_env)
            finally:
                for c in hosts.values():
                    c.close()
            report(name, result)
            print(f"{name:7s}  after {QUIET_S:.1f} s quiet (CLI stopped after {settings.freeze_idle_s} s; 0 = never): "
                  f"p50 {pct(result['stopped'], .5)*1000:6.0f} ms  max {max(result['stopped'])*1000:6.0f} ms  "
                  f"({len(result['stopped'])} messages)")
            cold = result["cold"]
            print(f"{name:7s}  cold start:    p50 {pct(cold, .5):6.2f} s   max {max(cold):6.2f} s   "
                  f"(target p50 <= 3 s)")


def ms(values, q=.5) -> str:
    return f"{pct(values, q) * 1000:5.1f} ms"


def report(name: str, result: dict) -> None:
    """Each figure is a warm turn minus the fake model's own time; all three interleaved in one run."""
    bare = [t["result"] for t in result["host"]["bare"]]
    agent = [t["result"] for t in result["host"]["agent"]]
    agent_answer = [t["answer"] for t in result["host"]["agent"]]
    warm = result["warm"]
    print(f"{name:7s}  bare SDK (host, no tools, query -> result): p50 {ms(bare)}  p95 {ms(bare, .95)}  "
          f"[query -> model request {ms([t['to_model'] for t in result['host']['bare']])}, "
          f"model's last byte -> result {ms([t['back'] for t in result['host']['bare']])}]")
    print(f"{name:7s}  same agent (host, the runner's options): to the result p50 {ms(agent)}  p95 {ms(agent, .95)}; "
          f"to the answer p50 {ms(agent_answer)}  p95 {ms(agent_answer, .95)}  "
          f"[query -> model request {ms([t['to_model'] for t in result['host']['agent']])}, "
          f"model's last byte -> result {ms([t['back'] for t in result['host']['agent']])}]")
    print(f"{name:7s}  NanoClaw (accepted -> reply handed): p50 {ms(warm)}  p95 {ms(warm, .95)}  "
          f"= x{pct(warm, .5) / pct(bare, .5):.2f} the bare SDK (p95 x{pct(warm, .95) / pct(bare, .95):.2f}), "
          f"x{pct(warm, .5) / pct(agent_answer, .5):.2f} the same agent to its answer "
          f"(p95 x{pct(warm, .95) / pct(agent_answer, .95):.2f})")
    paired = [w / b for w, b in zip(warm, bare)]
    print(f"{name:7s}    round by round (each NanoClaw turn / the bare turn of the same round): median "
          f"x{statistics.median(paired):.2f}")
    print(f"{name:7s}    of which: accepted -> model request {ms(result['to_model'])}, model's last byte -> "
          f"reply handed {ms(result['back'])}, model requests per turn {statistics.median(result['requests']):.0f}; "
          f"router.route itself {ms(result['routed'])}")


if __name__ == "__main__":
    main()
