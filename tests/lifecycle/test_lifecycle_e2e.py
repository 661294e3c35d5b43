"""Crash recovery and scheduled tasks through the whole supervised service (supervisord: gunicorn
web + proxy), the real bwrap sandbox, the real SDK, a fake model and a fake Telegram.

- the host is SIGKILLed (every process of the service at once) while a message is being
  processed, and separately while its reply is being sent: started again, the message is
  answered within one sweep interval, nothing is lost, no reply reaches the user twice;
- the sandbox is killed mid-turn: the message is retried and answered;
- a task the agent schedules with its tool (local time, TZ=America/New_York) reaches the model
  at its time; a `group` task continues the chat's conversation, an `isolated` one starts fresh.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import cli_batch
from conftest import require
from fakes.model_api import SENTINEL, SENTINEL_ANSWER, FakeModel, Reply
from fakes.telegram_api import TOKEN, FakeTelegram
from nanoclaw.lifecycle.background import SWEEP_INTERVAL_S
from nanoclaw.config import PROJECT_ROOT
from nanoclaw.runtime.bwrap import _descendants as descendants
from tests.service_harness import free_port

FIXTURES = Path(__file__).parent.parent / "fixtures" / "telegram"
SECRET = "wh-secret_lifecycle-e2e-0123456789"
CHAT = "111222333"


class Service:
    """`make run`'s service on a data dir of its own; can be crashed and started again."""

    def __init__(self, tmp_path: Path, model: FakeModel, tg: FakeTelegram, tz: str = "UTC", runtime: str = "bwrap"):
        self.data = tmp_path / "data"
        self.runtime = runtime
        self.port = free_port()
        self.env = {**os.environ, "NANOCLAW_DATA_DIR": str(self.data), "NANOCLAW_GROUPS_DIR": str(tmp_path / "g"),
                    "NANOCLAW_PORT": str(self.port), "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), "TZ": tz,
                    "NANOCLAW_RUNTIME": runtime, "NANOCLAW_INSTALL_ID": f"life-{os.getpid()}",
                    "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-lifecycle-e2e-secret",
                    "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET,
                    # a retry after a kill comes with the next sweep (10 s), when a turn that long would show
                    # "⏳ Working…" (also 10 s): not what these tests are about, and they compare every text
                    # sent (the status message has its own tests, tests/outbound/test_progress_e2e.py)
                    "NANOCLAW_PROGRESS_AFTER_S": "120"}
        self.env.pop("DATABASE_URL", None)
        self.proc: subprocess.Popen | None = None
        self.log = ""
        cli_batch.run([["migrate"], ["agent", "create", "Andy"], ["user", "add", f"telegram:{CHAT}", "--role", "owner"],
                       ["wire", "telegram", CHAT, "andy"]], self.env)

    def start(self) -> float:
        """Start and wait for /healthz; returns when it answered (monotonic)."""
        self.proc = subprocess.Popen([sys.executable, "-m", "nanoclaw.supervise"], cwd=PROJECT_ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic()
            except OSError:
                time.sleep(0.2)
        raise AssertionError("service did not become healthy:\n" + self.log[-3000:])

    def _read(self, proc):
        for line in proc.stdout:
            self.log += line

    def crash(self) -> None:
        """SIGKILL every process of the service at once (supervisord, gunicorn, proxy, sandboxes)."""
        pids = [self.proc.pid] + descendants(self.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and _alive(p) for p in pids):
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.crash()

    def post(self, update: dict) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/webhooks/telegram",
                                     data=json.dumps(update).encode(),
                                     headers={"Content-Type": "application/json",
                                              "X-Telegram-Bot-Api-Secret-Token": SECRET})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status

    def settled(self, tg: FakeTelegram) -> None:
        """The fake model's sentinel sent and answered: what came before it has had its turn and
        its delivery."""
        assert self.post(update(SENTINEL, n=999)) == 200
        tg.wait_for(lambda r: FakeTelegram.params(r).get("text") == SENTINEL_ANSWER, timeout=60)

    def sweeps(self) -> float:
        """Sweep passes the web program completed (its /metrics, read from loopback)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("nanoclaw_sweep_passes_total "):
                    return float(line.split()[1])
        return 0.0

    def swept(self) -> None:
        """Wait for the next sweep pass to complete (every interval pass of this run of the service
        began after its start-up recovery)."""
        seen = self.sweeps()
        deadline = time.monotonic() + 2 * SWEEP_INTERVAL_S
        while self.sweeps() < seen + 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert self.sweeps() >= seen + 1, "no sweep pass ran"

    def sandbox_pid(self) -> int | None:
        for pidfile in (self.data / "run" / "bwrap").glob("*.pid"):
            return json.loads(pidfile.read_text())["pid"]
        return None

    def inbound_rows(self) -> list[dict]:
        rows = []
        for db in (self.data / "sessions").glob("*/*/host/inbound.db"):
            conn = sqlite3.connect(db)
            conn.row_factory = sqlite3.Row
            rows += [dict(r) for r in conn.execute("SELECT * FROM messages_in WHERE kind IN ('chat', 'task')")
                     if SENTINEL not in r["content"]]
            conn.close()
        return rows


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def update(text: str, n: int = 1) -> dict:
    u = json.loads((FIXTURES / "private_message.json").read_text())
    u["update_id"] += n
    u["message"]["message_id"] += n
    u["message"]["text"] = text
    u["message"]["date"] = int(time.time())
    return u


@pytest.fixture
def fakes():
    require(__import__("shutil").which("bwrap") is not None, "bubblewrap is not installed")
    with FakeModel() as model, FakeTelegram() as tg:
        yield model, tg


@pytest.fixture
def service(tmp_path, fakes):
    model, tg = fakes
    svc = Service(tmp_path, model, tg)
    yield svc
    svc.stop()
    print(svc.log[-6000:])


def sent_texts(tg) -> list[str]:
    return [c["text"] for c in tg.calls("sendMessage")]


def docker_ready() -> tuple[bool, str]:
    from nanoclaw.runtime import docker as docker_rt
    client, where = docker_rt.connect()
    if client is None:
        return False, f"no Docker engine ({where})"
    try:
        client.images.get("nanoclaw-agent:latest")
    except Exception:  # noqa: BLE001
        return False, "no agent image nanoclaw-agent:latest (flask nanoclaw image build)"
    return True, ""


# --- crash recovery ---------------------------------------------------------------------------

@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_host_killed_while_a_message_is_processed(runtime, tmp_path, fakes):
    """bwrap sandboxes die with the host (their claims are reset: one try used); a Docker sandbox
    outlives it, fails its turn when the door closes, and is removed at start-up as an orphan."""
    model, tg = fakes
    if runtime == "docker":
        require(*docker_ready())
    answers = iter([Reply.say("too late", delay_s=60), Reply.say("Standup at 10, lunch with Bo.")])
    model.script = lambda req: next(answers)
    service = Service(tmp_path, model, tg, runtime=runtime)
    try:
        _killed_while_processing(service, model, tg)
    finally:
        service.stop()
        print(service.log[-6000:])


def _killed_while_processing(service, model, tg):
    service.start()
    assert service.post(update("What's on today?")) == 200
    model.wait_for(lambda r: "What's on today?" in r.current_prompt(), timeout=60)  # the turn is under way
    service.crash()
    healthy = service.start()
    answer = "Standup at 10, lunch with Bo."
    tg.wait_for(lambda r: FakeTelegram.params(r).get("text") == answer, timeout=SWEEP_INTERVAL_S + 20)
    took = time.monotonic() - healthy
    print(f"answered {took:.1f} s after the restarted service was healthy")
    assert took < SWEEP_INTERVAL_S, f"answered {took:.1f} s after the restart"
    service.settled(tg)
    texts = sent_texts(tg)[:-1]
    (row,) = service.inbound_rows()
    if service.runtime == "bwrap":
        assert texts == [answer]  # answered once, nothing else
        assert (row["status"], row["tries"]) == ("completed", 1)
    else:
        # the Docker sandbox outlived the host. Either it saw its door close and failed the turn (its
        # "will be retried" notice, one try used), or its SDK's retry of the call reached the
        # restarted door first and it finished the turn itself (no notice, no try used): which one
        # is a race between that retry and the start-up; the answer comes once either way
        assert texts[-1] == answer and texts.count(answer) == 1 and all("retried" in t for t in texts[:-1])
        assert (row["status"], row["tries"]) == ("completed", 1 if texts[:-1] else 0), texts
    assert len(model.model_calls()) >= 2


class SlowTelegram(FakeTelegram):
    """sendMessage takes a while the first time: the host dies with the request in flight
    (the platform has it, as a real one would)."""

    def __init__(self):
        super().__init__()
        self.arrived = threading.Event()
        self.first = True

    def _sendMessage(self, p, req):
        if self.first:
            self.first = False
            self.arrived.set()
            time.sleep(3)
        return super()._sendMessage(p, req)


def test_host_killed_while_a_reply_is_delivered(tmp_path):
    require(__import__("shutil").which("bwrap") is not None, "bubblewrap is not installed")
    with FakeModel(script=lambda req: Reply.say("Your flight leaves at 7.")) as model, SlowTelegram() as tg:
        svc = Service(tmp_path, model, tg)
        try:
            svc.start()
            assert svc.post(update("When is my flight?")) == 200
            assert tg.arrived.wait(90), "the reply never reached the platform"
            svc.crash()  # the send is in flight: the platform has it, the host never hears back
            tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=10)
            svc.start()
            svc.settled(tg)  # delivery has run since the restart,
            svc.swept()  # and so has a whole sweep pass
            assert sent_texts(tg) == ["Your flight leaves at 7.", SENTINEL_ANSWER]  # once: not sent again
            assert len(model.model_calls()) == 2  # the answered message was not processed again (1 + the sentinel)
            (row,) = svc.inbound_rows()
            assert row["status"] == "completed"
        finally:
            svc.stop()
            print(svc.log[-6000:])


def kill_tree(pid: int) -> None:
    """SIGKILL a sandbox and everything under it; a child that died with its parent first is fine."""
    for p in [pid] + descendants(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sandbox_killed_mid_turn_is_retried_and_answered(service, fakes):
    model, tg = fakes
    answers = iter([Reply.say("never", delay_s=60), Reply.say("It is sunny.")])
    model.script = lambda req: next(answers)
    service.start()
    assert service.post(update("Weather?")) == 200
    model.wait_for(lambda r: "Weather?" in r.current_prompt(), timeout=60)
    pid = service.sandbox_pid()
    assert pid is not None
    kill_tree(pid)
    tg.wait_for(lambda r: FakeTelegram.params(r).get("text") == "It is sunny.", timeout=SWEEP_INTERVAL_S + 30)
    service.settled(tg)
    assert sent_texts(tg) == ["It is sunny.", SENTINEL_ANSWER]
    (row,) = service.inbound_rows()
    assert (row["status"], row["tries"]) == ("completed", 1)


# --- scheduled tasks --------------------------------------------------------------------------

def test_scheduled_tasks_fire_at_their_local_time(tmp_path, fakes):
    model, tg = fakes
    tz = "America/New_York"
    calls = {"n": 0}
    due = {}

    def script(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "Time to stretch" in prompt:
            return Reply.say("Stretch now!")
        if "Read the news" in prompt:
            return Reply.say("Here is the news.")
        if not results:
            # Times from the agent's first call, not the test's start: a slow machine's service and
            # cold start must not eat the lead (the isolated task's sandbox wakes 15 s ahead).
            local_now = datetime.now(ZoneInfo(tz)).replace(microsecond=0)
            due["group"], due["isolated"] = local_now + timedelta(seconds=20), local_now + timedelta(seconds=35)
            # naive local times, as a user would say them
            return Reply.call("mcp__nanoclaw__schedule_task", prompt="Time to stretch",
                              at=due["group"].strftime("%Y-%m-%dT%H:%M:%S"))
        if len(results) == 1:
            return Reply.call("mcp__nanoclaw__schedule_task", prompt="Read the news", context="isolated",
                              at=due["isolated"].strftime("%Y-%m-%dT%H:%M:%S"))
        calls["results"] = [r.text for r in results]
        return Reply.say("Both scheduled.")
    model.script = script
    svc = Service(tmp_path, model, tg, tz=tz)
    try:
        svc.start()
        assert svc.post(update("Remind me to stretch, and read me the news later")) == 200
        tg.wait_for(lambda r: FakeTelegram.params(r).get("text") == "Both scheduled.", timeout=90)
        assert all(t.startswith("Task ") and f"({tz})" in t for t in calls["results"]), calls["results"]
        group_at, isolated_at = due["group"], due["isolated"]
        assert group_at.strftime("%H:%M") in calls["results"][0]  # shown back in local time

        stretch = model.wait_for(lambda r: "Time to stretch" in r.current_prompt(), timeout=60)
        news = model.wait_for(lambda r: "Read the news" in r.current_prompt(), timeout=60)
        for req, due in ((stretch, group_at), (news, isolated_at)):
            late = req.received_at - due.timestamp()
            print(f"task due {due:%H:%M:%S}: model request {late * 1000:.0f} ms later")
            assert 0 <= late < 1.0, f"the model heard of the task {late:.2f} s after its time"
        # group: the chat's conversation continues; isolated: a fresh one
        assert "Remind me to stretch" in json.dumps(stretch.messages)
        assert "Remind me to stretch" not in json.dumps(news.messages)
        tg.wait_for(lambda r: FakeTelegram.params(r).get("text") == "Here is the news.", timeout=30)
        assert "Stretch now!" in sent_texts(tg)
        assert all(str(c["chat_id"]) == CHAT for c in tg.calls("sendMessage"))
    finally:
        svc.stop()
        print(svc.log[-8000:])


def test_sigterm_stops_cleanly_and_the_next_start_carries_on(service, fakes):
    model, tg = fakes
    answers = iter([Reply.say("interrupted", delay_s=60), Reply.say("Carried on.")])
    model.script = lambda req: next(answers)
    service.start()
    assert service.post(update("Summarise my week")) == 200
    model.wait_for(lambda r: "Summarise my week" in r.current_prompt(), timeout=60)
    sandbox = service.sandbox_pid()
    service.proc.send_signal(signal.SIGTERM)
    service.proc.wait(40)
    assert service.proc.returncode == 0, service.log[-3000:]
    assert "background jobs stopped" in service.log and not _alive(sandbox)
    (row,) = service.inbound_rows()
    assert (row["status"], row["tries"]) == ("pending", 0)  # given back by its runner: no try used up
    service.start()
    tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=30)
    assert sent_texts(tg) == ["Carried on."]


def test_a_retry_after_a_kill_does_not_send_again_what_already_went_out(service, fakes):
    """Issue 17: the sandbox dies right after the agent's send_message; the retried turn is told what
    went out and the chat gets each message once."""
    model, tg = fakes

    def script(req):
        if "<already_sent>" in req.current_prompt():
            return Reply.say("Step two done too.")
        if not req.turn_tool_results():
            return Reply.call("mcp__nanoclaw__send_message", text="Step one done.")
        return Reply.say("never", delay_s=60)  # the sandbox is killed while this waits
    model.script = script
    service.start()
    assert service.post(update("Please do both steps")) == 200
    tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage", timeout=60)
    model.wait_for(lambda r: len(r.turn_tool_results()) == 1, timeout=60)
    pid = service.sandbox_pid()
    kill_tree(pid)
    tg.wait_for(lambda r: "Step two done too." in str(FakeTelegram.params(r).get("text")),
                timeout=SWEEP_INTERVAL_S + 40)
    assert sent_texts(tg) == ["Step one done.", "Step two done too."]
    retried = [r for r in model.model_calls() if "<already_sent>" in r.current_prompt()]
    assert "1. a message: “Step one done.”" in retried[0].current_prompt()
