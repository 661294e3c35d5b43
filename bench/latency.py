"""Message latency through the whole pipe, against a scripted fake model on 127.0.0.1.

    .venv/bin/python -m bench.latency [N]          (N warm messages per runtime, default 50)

warm overhead = (message accepted by the router → reply handed to the channel adapter)
                minus the fake model's own time. The path: router writes inbound.db → the
                runner notices → real SDK + CLI → bridge → proxy → fake model → outbound.db →
                background delivery thread → adapter.
cold start    = wake (sandbox start) → first model request at the fake.
baseline      = the same fake, called by a bare ClaudeSDKClient on the host (no sandbox, no proxy,
                no databases): the floor the SDK itself costs, measured in this run.
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
from nanoclaw.runtime import bwrap as bwrap_rt  # noqa: E402
from nanoclaw.runtime import docker as docker_rt  # noqa: E402
from nanoclaw.runtime.image import image_exists  # noqa: E402
from nanoclaw.lifecycle.sandboxes import SandboxManager  # noqa: E402

HANDED: dict[str, float] = {}
ROUTED: list[float] = []
BASE_SPLIT: dict[str, list[float]] = {'to_model': [], 'back': []}
ARRIVED = threading.Condition()


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


def baseline(model: FakeModel, n: int) -> list[float]:
    """Warm turns of a bare ClaudeSDKClient on the host, minus the fake's own time (seconds)."""
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage

    env = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "bench",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1"}

    async def run():
        out = []
        opts = ClaudeAgentOptions(tools=[], env=env, cwd=tempfile.mkdtemp())
        async with ClaudeSDKClient(opts) as client:
            for i in range(n + 1):
                before = len(model.requests)
                started = time.monotonic()
                await client.query(f"baseline {i}")
                async for msg in client.receive_response():
                    if isinstance(msg, ResultMessage):
                        break
                ended = time.monotonic()
                calls = model.requests[before:]
                took = ended - started - sum(r.handled_s for r in calls)
                if i:  # the first turn warms the CLI up
                    out.append(took)
                    BASE_SPLIT["to_model"].append(calls[0].received_mono - started)
                    BASE_SPLIT["back"].append(ended - calls[-1].received_mono - calls[-1].handled_s)
        return out
    return asyncio.run(run())


def measure(runtime_name: str, runtime, settings, model: FakeModel, n: int) -> dict:
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    agent = AgentGroup.create(name="Bench", folder=f"bench-{runtime_name}")
    mg = MessagingGroup.create(channel_type="bench", platform_id=agent.folder, kind="dm",
                               unknown_sender_policy="public")
    Wiring.create(messaging_group=mg, agent_group=agent, engage_mode="pattern", engage_pattern=".")
    door = ProxyServer(settings, lambda: [agent.folder]).start()
    door.ensure_socket(agent.folder)
    door.wait_ready(agent.folder, timeout=10)
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
        return {"cold": cold, "warm": warm, "to_model": to_model, "back": back, "requests": requests,
                "routed": list(ROUTED)}
    finally:
        bg.shutdown()
        for name in manager.running():
            runtime.stop(name)
        door.stop()
        database.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-"))
    def script(req):  # the reply names the message it answers, so the adapter can tell them apart
        tags = re.findall(r">([^<>]+)</message>", req.last_user_text())
        return Reply.say((tags[-1] if tags else "?") + "|ok")
    with FakeModel(script=script) as model:
        env = {"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"), "TZ": "UTC",
               "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
               "NANOCLAW_INSTALL_ID": f"bench-{os.getpid()}"}
        print(f"NanoClaw latency, {n} warm messages per runtime, fake model on 127.0.0.1")
        base = baseline(model, min(n, 20))
        print(f"baseline  bare SDK warm turn (host, no sandbox/proxy/DB): p50 {pct(base, .5)*1000:6.0f} ms  "
              f"p95 {pct(base, .95)*1000:6.0f} ms")
        print(f"            of which: query -> first model request p50 {pct(BASE_SPLIT['to_model'], .5)*1000:4.0f} ms, "
              f"last model byte -> result p50 {pct(BASE_SPLIT['back'], .5)*1000:4.0f} ms")
        runtimes = [("bwrap", lambda s: bwrap_rt.BwrapRuntime(s.data_dir / "run" / "bwrap"))]
        client, _ = docker_rt.connect()
        probe = Settings.load(environ=env, dotenv_path=tmp / "none")
        if client is not None and image_exists(probe, client=client):
            runtimes.append(("docker", lambda s: docker_rt.DockerRuntime(client, image=s.agent_image)))
        for name, make in runtimes:
            settings = Settings.load(environ={**env, "DATABASE_URL": f"sqlite:///{tmp / name / 'nc.db'}",
                                              "NANOCLAW_DATA_DIR": str(tmp / name)}, dotenv_path=tmp / "none")
            result = measure(name, make(settings), settings, model, n)
            warm, cold = result["warm"], result["cold"]
            print(f"{name:7s}  warm overhead: p50 {pct(warm, .5)*1000:6.0f} ms  p95 {pct(warm, .95)*1000:6.0f} ms  "
                  f"(x{pct(warm, .5)/pct(base, .5):.2f} of the bare SDK; target p50 <= 300 ms)")
            print(f"{name:7s}    of which: accepted -> first model request p50 {pct(result['to_model'], .5)*1000:4.0f} ms, "
                  f"last model byte -> reply handed p50 {pct(result['back'], .5)*1000:4.0f} ms, "
                  f"model requests per turn {statistics.median(result['requests']):.0f}; "
                  f"router.route itself p50 {pct(result['routed'], .5)*1000:.1f} ms")
            print(f"{name:7s}  cold start:    p50 {pct(cold, .5):6.2f} s   max {max(cold):6.2f} s   "
                  f"(target p50 <= 3 s)")


if __name__ == "__main__":
    main()
