"""How punctually scheduled tasks reach the model.

    .venv/bin/python -m bench.task_punctuality [--runtime bwrap|docker] [--tasks 30] [--every 5]

Real background jobs (exact-time APScheduler date jobs, pre-wake, delivery, sweep), the real
sandbox, the real SDK + CLI, the real proxy, and a fake Messages API on 127.0.0.1 that records
when each request arrives. TZ is Europe/Berlin and the times are given as local naive ISO, as
the agent gives them. N one-shot tasks are scheduled 1.5 s apart, starting 20 s ahead, with the
chat's sandbox stopped first (so the first run needs the pre-wake); every --every-th task is
`isolated` (a fresh session, so a fresh sandbox per run), the others `group` (the chat's warm
sandbox). Measured: due time → the model request at the fake. Target: p99 ≤ 1 s.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from nanoclaw.app import create_app
from nanoclaw.inbound import router
from nanoclaw.tasks import scheduling  # noqa: E402
from nanoclaw.service import start as start_background  # noqa: E402
from nanoclaw.channels.base import register  # noqa: E402
from nanoclaw.channels.events import InboundEvent, iso_utc
from nanoclaw.config import Settings  # noqa: E402
from nanoclaw.db import database  # noqa: E402
from nanoclaw.migrate import apply_pending  # noqa: E402
from nanoclaw.models import AgentGroup, MessagingGroup, Wiring  # noqa: E402
from nanoclaw.proxy import ProxyServer  # noqa: E402
from nanoclaw.runtime import bwrap as bwrap_rt  # noqa: E402
from nanoclaw.runtime import docker as docker_rt  # noqa: E402
from nanoclaw.sandboxes.manager import SandboxManager  # noqa: E402

TZ = "Europe/Berlin"
REPLIES: list[str] = []
REPLIED = threading.Condition()


@register("punctual")
class Recorder:
    def __init__(self, settings):
        pass

    def send_text(self, target, text):
        with REPLIED:
            REPLIES.append(text)
            REPLIED.notify_all()
        return "p-" + uuid.uuid4().hex[:8]

    edit_text = react = lambda self, *a: None
    send_file = send_card = lambda self, *a: "p"


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def make_runtime(name, settings):
    if name == "bwrap":
        return bwrap_rt.BwrapRuntime(settings.data_dir / "run" / "bwrap")
    client, where = docker_rt.connect()
    if client is None:
        sys.exit(f"no Docker engine ({where})")
    return docker_rt.DockerRuntime(client, image=settings.agent_image)


def run(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-punctual-"))

    def script(req):
        tags = re.findall(r"task #\d+", req.current_prompt())
        return Reply.say(f"done {tags[-1]}" if tags else "ok")

    with FakeModel(script=script) as model:
        settings = Settings.load(environ={
            "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"), "TZ": TZ,
            "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
            "NANOCLAW_INSTALL_ID": f"punct-{os.getpid()}", "MAX_CONCURRENT_CONTAINERS": "8",
            # 1: the idle CLI is stopped between the runs (1.5 s apart) and continued for each
            "NANOCLAW_FREEZE_IDLE_S": os.environ.get("NANOCLAW_FREEZE_IDLE_S", "10")}, dotenv_path=tmp / "none")
        app = create_app(settings)
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        agent = AgentGroup.create(name="Punctual", folder="punctual")
        mg = MessagingGroup.create(channel_type="punctual", platform_id="chat", kind="dm", unknown_sender_policy="public")
        Wiring.create(messaging_group=mg, agent_group=agent, engage_mode="pattern", engage_pattern=".")
        door = ProxyServer(settings, lambda: [agent.folder]).start()
        door.ensure_socket(agent.folder)
        door.wait_ready(agent.folder, timeout=10)
        runtime = make_runtime(args.runtime, settings)
        manager = SandboxManager(settings, runtime)
        bg = start_background(app, manager)
        try:
            bg.ready.wait(30)
            woken = []
            router.route(InboundEvent(channel="punctual", event_id="hello", chat_id="chat", kind="dm",
                                      sender_id="owner", sender_name="Owner", text="hello",
                                      timestamp=iso_utc(time.time())), settings, wake=woken.append)
            session = woken[0]
            bg.watch(router.session_dir(settings, session))
            manager.wake(agent.folder, session.id)
            with REPLIED:
                assert REPLIED.wait_for(lambda: REPLIES, timeout=120), "no answer to the first message"
            manager.stop_all()  # the chat's sandbox is cold again: the first run needs the pre-wake

            local_now = datetime.now(ZoneInfo(TZ)).replace(microsecond=0, tzinfo=None)
            due = {}
            for i in range(args.tasks):
                at = local_now + timedelta(seconds=20 + 1.5 * i)
                isolated = args.every and i % args.every == args.every - 1
                task = scheduling.schedule(agent, session, f"task #{i} : say done", at=at.isoformat(timespec="milliseconds"),
                                           context="isolated" if isolated else "group", tz=TZ)
                due[i] = (scheduling.from_db(task.next_run_at).timestamp(), "isolated" if isolated else "group")
            print(f"{args.tasks} tasks scheduled ({TZ} local times), first due in 20 s; runtime {args.runtime}")
            deadline = time.time() + 20 + 1.5 * args.tasks + 60
            with REPLIED:
                REPLIED.wait_for(lambda: sum(r.startswith("done task #") for r in REPLIES) >= args.tasks,
                                 timeout=max(1, deadline - time.time()))
            late = {"group": [], "isolated": []}
            for i, (when, kind) in due.items():
                req = next((r for r in model.model_calls() if re.search(rf"task #{i} :", r.current_prompt())), None)
                if req is None:
                    print(f"task #{i} never reached the model")
                    continue
                late[kind].append(req.received_at - when)
                if os.environ.get("PUNCTUAL_DEBUG"):
                    print(f"task #{i} {kind}: {(req.received_at - when) * 1000:.0f} ms")
            every = late["group"] + late["isolated"]
            print(f"\n{'tasks':<10}{'n':>4}{'p50':>9}{'p99':>9}{'max':>9}{'min':>9}")
            for name, values in (("all", every), ("group", late["group"]), ("isolated", late["isolated"])):
                if values:
                    print(f"{name:<10}{len(values):>4}{pct(values, .5)*1000:>7.0f}ms{pct(values, .99)*1000:>7.0f}ms"
                          f"{max(values)*1000:>7.0f}ms{min(values)*1000:>7.0f}ms")
            ok = len(every) == args.tasks and pct(every, .99) <= 1.0
            print(f"\ntarget p99 ≤ 1 s over {args.tasks} tasks: {'met' if ok else 'NOT met'}")
        finally:
            bg.shutdown()
            door.stop()
            database.close()
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", default="bwrap", choices=("bwrap", "docker"))
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--every", type=int, default=5, help="every Nth task is isolated (0: none)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
