"""The agent runner, for real: the real SDK and its bundled CLI, inside bubblewrap as uid 1000 with no
network, reaching a scripted fake Messages API only through the proxy's unix socket (here a tiny
unix->TCP forwarder stands in for the proxy). Plus pure unit tests of its decisions.
"""
from __future__ import annotations

import json
import re
import os
import shutil
import socket
import sqlite3
import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import require
from nanoclaw.config import PROJECT_ROOT
from nanoclaw.sessions import session_schema as schema
from tests.fakes.accept_loop import AcceptLoop
from tests.fakes.model_api import FakeModel, Reply, ToolCall

from agent_runner.bridge import _pump as _relay  # noqa: E402
from agent_runner.config import RunnerConfig  # noqa: E402
from agent_runner.hooks import BLOCKED_TOOLS, block_reason, declared_timeout_ms  # noqa: E402
from agent_runner.mcp_tools import ToolContext, Turn, call_tool  # noqa: E402
from agent_runner.mcp_tools import messaging  # noqa: E402
from agent_runner.mcp_tools.context import ToolError  # noqa: E402
from agent_runner.poll_loop import build_prompt  # noqa: E402
from agent_runner.reasons import short_reason  # noqa: E402
from agent_runner.selection import InboundRow, choose_batch, forget_bumped, plan_turn, reply_target  # noqa: E402
from agent_runner.store import SDK_SESSION_KEY, SessionStore  # noqa: E402
from agent_runner.targets import Target, UnknownDestination, resolve_destination  # noqa: E402

ROUTING = Target("cli", "owner-chat")
FAMILY = Target("telegram", "-100200", "7")
TZ = "Europe/Berlin"
HOST_SECRET = "sk-ant-api03-HOSTSECRET-" + "x" * 24
SEND = "mcp__nanoclaw__send_message"
SEND_FILE = "mcp__nanoclaw__send_file"


# ------------------------------------------------------------------------------------------------
# pure decisions
# ------------------------------------------------------------------------------------------------

def row(seq: int, trigger: bool = True, tries: int = 0, target: Target | None = None, **content) -> InboundRow:
    t = target or Target(None, None)  # type: ignore[arg-type]
    return InboundRow(id=f"m{seq}", seq=seq, kind="chat", timestamp="2024-01-01T12:00:00.000Z", trigger=trigger,
                      tries=tries, channel_type=t.channel_type, platform_id=t.platform_id, thread_id=t.thread_id,
                      content=content or {"text": f"text {seq}", "sender": "Alice"})


def test_no_turn_without_a_trigger():
    assert choose_batch([row(1, False), row(2, False)], set(), {}, 10) == []


def test_a_trigger_brings_the_waiting_context_oldest_first():
    batch = choose_batch([row(3), row(1, False), row(2, False)], set(), {}, 10)
    assert [r.seq for r in batch] == [1, 2, 3]


def test_only_the_newest_n_are_shown_and_older_context_is_superseded():
    rows = [row(i, trigger=False) for i in range(1, 8)] + [row(8)]
    plan = plan_turn(rows, set(), {}, 5)
    assert [r.seq for r in plan.batch] == [4, 5, 6, 7, 8]
    assert [r.seq for r in plan.superseded] == [1, 2, 3]


def test_an_older_trigger_beyond_the_cap_is_kept_for_its_own_turn():
    rows = [row(1)] + [row(i, trigger=False) for i in range(2, 5)] + [row(5)]
    plan = plan_turn(rows, set(), {}, 2)
    assert [r.seq for r in plan.batch] == [4, 5]
    assert [r.seq for r in plan.superseded] == [2, 3]  # row 1 (a trigger) stays pending


def test_acked_rows_are_never_picked_again():
    assert choose_batch([row(1), row(2, False)], {"m1"}, {}, 10) == []


def test_released_rows_wait_for_the_host_to_bump_tries():
    released = {"m1": 0}
    assert choose_batch([row(1, tries=0)], set(), released, 10) == []
    # ...but they ride along as context when a new message triggers a turn
    assert [r.seq for r in choose_batch([row(1, tries=0), row(2)], set(), released, 10)] == [1, 2]
    # the host retried it (tries bumped): it counts again, and the memory is dropped
    forget_bumped(released, [row(1, tries=1)])
    assert released == {}
    assert [r.seq for r in choose_batch([row(1, tries=1)], set(), released, 10)] == [1]


def test_rows_of_a_failed_turn_ride_along_beyond_the_cap():
    # rows 1-2 were shown in a turn that failed; the CLI holds that prompt unanswered and will send
    # it with the next one, so the next turn takes them too (else they were answered twice)
    rows = [row(1), row(2)] + [row(i) for i in range(3, 6)]
    released = {"m1": 0, "m2": 0}
    plan = plan_turn(rows, set(), released, 2, owed={"m1", "m2"})
    assert [r.seq for r in plan.batch] == [1, 2, 4, 5] and plan.superseded == []
    plan = plan_turn(rows, set(), released, 2)  # a new runner owes nothing: the cap as before
    assert [r.seq for r in plan.batch] == [4, 5]


def test_reply_goes_to_the_newest_triggering_chat_else_the_routing():
    a, b = Target("slack", "C1"), Target("slack", "C2", "t")
    assert reply_target([row(1, target=a), row(2, target=b), row(3, False, target=a)], ROUTING) == b
    assert reply_target([row(1)], ROUTING) == ROUTING


def test_destination_resolution():
    dests = {"family": FAMILY, "work": Target("slack", "C9")}
    assert resolve_destination(None, ROUTING, dests) == ROUTING
    assert resolve_destination("  ", ROUTING, dests) == ROUTING
    assert resolve_destination("family", ROUTING, dests) == FAMILY
    with pytest.raises(UnknownDestination) as e:
        resolve_destination("nobody", ROUTING, dests)
    assert "'nobody'" in str(e.value) and "family, work" in str(e.value)
    with pytest.raises(UnknownDestination, match="no named destinations"):
        resolve_destination("x", ROUTING, {})


def test_prompt_has_the_context_header_sender_and_quote():
    r = row(1, text="Yes & no", sender="Bob", reply_to={"id": "42", "sender": "Alice", "text": "Coming?"})
    prompt = build_prompt([r], TZ)
    assert prompt.startswith(f'<context timezone="{TZ}" />')
    assert '<message sender="Bob" time="Jan 1, 2024, 1:00 PM" reply_to="42">' in prompt
    assert '<quoted_message from="Alice">Coming?</quoted_message>Yes &amp; no</message>' in prompt


def test_short_reasons_name_the_failure_without_detail_leaks():
    assert "HTTP 500" in short_reason(500, "API Error: 500 {...}")
    assert "credentials" in short_reason(401, None)
    assert short_reason(None, "first line\nsecond") == "first line"
    assert len(short_reason(None, "x" * 500)) <= 160


def test_blocked_tools_and_declared_timeouts():
    for name in ("AskUserQuestion", "EnterPlanMode", "ExitPlanMode", "EnterWorktree", "ExitWorktree",
                 "CronCreate", "ScheduleWakeup", "SendMessage", "ListAgents", "Monitor", "Workflow",
                 "ReportFindings", "WebSearch", "WebFetch"):
        assert name in BLOCKED_TOOLS and block_reason(name)
    assert "door" in block_reason("WebSearch")  # its request carries the provider's web_search (issue 60)
    assert "send_message" in block_reason("SendMessage")  # the model is pointed at the chat's own tool
    assert block_reason("Bash") is None
    assert declared_timeout_ms("Bash", {"command": "x", "timeout": 5000}) == 5000
    assert declared_timeout_ms("Bash", {"command": "x"}) is None
    assert declared_timeout_ms("Read", {"timeout": 5}) is None


# ------------------------------------------------------------------------------------------------
# the tool functions, without the SDK
# ------------------------------------------------------------------------------------------------

@dataclass
class Layout:
    root: Path
    workspace: Path
    session: Path       # the agent's part
    inbound: Path       # the host's part
    group: Path
    global_: Path
    proxy: Path

    @classmethod
    def make(cls, root: Path) -> "Layout":
        ws = root / "workspace"
        lay = cls(root, ws, ws / "session", ws / "inbound", ws / "group", ws / "global", root / "proxy")
        for d in (lay.inbound / "inbox", lay.session / "outbox", lay.session / "home", lay.group, lay.global_,
                  lay.proxy):
            d.mkdir(parents=True, exist_ok=True)
        conn = schema.connect(lay.inbound / schema.INBOUND)
        conn.execute("INSERT INTO routing (id, channel_type, platform_id, thread_id) VALUES (1, ?, ?, ?)",
                     (ROUTING.channel_type, ROUTING.platform_id, ROUTING.thread_id))
        conn.execute("INSERT INTO destinations (name, channel_type, platform_id, thread_id) VALUES (?, ?, ?, ?)",
                     ("family", FAMILY.channel_type, FAMILY.platform_id, FAMILY.thread_id))
        conn.close()
        return lay

    def env(self) -> dict[str, str]:
        return {"NANOCLAW_WORKSPACE_DIR": str(self.workspace), "NANOCLAW_SESSION_DIR": str(self.session),
                "NANOCLAW_INBOUND_DIR": str(self.inbound),
                "NANOCLAW_GROUP_DIR": str(self.group), "NANOCLAW_GLOBAL_DIR": str(self.global_)}

    # host side -----------------------------------------------------------------------------------
    def write(self, text: str, *, trigger: bool = True, sender: str = "Alice", **content) -> str:
        """Insert a messages_in row as the host does; returns its id."""
        mid = uuid.uuid4().hex
        conn = schema.connect(self.inbound / schema.INBOUND)
        try:
            conn.execute("BEGIN IMMEDIATE")
            seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_in").fetchone()[0]
            conn.execute("INSERT INTO messages_in (id, seq, kind, timestamp, status, trigger, channel_type,"
                         " platform_id, thread_id, content) VALUES (?, ?, 'chat', ?, 'pending', ?, ?, ?, ?, ?)",
                         (mid, seq, schema.utc_now_iso(), int(trigger), ROUTING.channel_type, ROUTING.platform_id,
                          ROUTING.thread_id, json.dumps({"text": text, "sender": sender, **content})))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return mid

    def bump_tries(self, mid: str) -> None:
        conn = schema.connect(self.inbound / schema.INBOUND)
        conn.execute("UPDATE messages_in SET tries = tries + 1 WHERE id = ?", (mid,))
        conn.close()

    def _query(self, sql: str, args=()) -> list[dict]:
        """Read the agent's outbound.db as the host does (read-only); [] until the runner made it."""
        path = self.session / schema.OUTBOUND
        if not path.exists():
            return []
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute(sql, args)]
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return []
            raise
        finally:
            conn.close()

    def out_rows(self) -> list[dict]:
        rows = self._query("SELECT * FROM messages_out ORDER BY seq")
        for r in rows:
            r["content"] = json.loads(r["content"])
        return rows

    def acks(self) -> dict[str, str]:
        return {r["message_id"]: r["status"] for r in self._query("SELECT message_id, status FROM processing_ack")}

    def state(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM session_state WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def container_state(self) -> dict:
        rows = self._query("SELECT * FROM container_state WHERE id = 1")
        return rows[0] if rows else {}

    def wait_out(self, predicate, timeout: float = 20.0, after_seq: int = 0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.out_rows():
                if r["seq"] > after_seq and predicate(r):
                    return r
            time.sleep(0.02)
        raise AssertionError(f"no matching outbound row in {timeout}s; rows: {self.out_rows()}")

    def wait_ack(self, mid: str, status: str = "completed", timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.acks().get(mid) == status:
                return
            time.sleep(0.02)
        raise AssertionError(f"{mid} never became {status}: {self.acks().get(mid)}")

    def looked_again_after(self, row: dict, timeout: float = 20.0) -> None:
        """Wait for the runner's first look at inbound.db after it wrote `row`: it touches its
        heartbeat when it is idle again, at once after a turn."""
        written = datetime.strptime(row["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
        beat = self.session / "heartbeat"
        deadline = time.monotonic() + timeout
        while not (beat.exists() and beat.stat().st_mtime > written):
            assert time.monotonic() < deadline, "the runner never looked again"
            time.sleep(0.02)

    def last_seq(self) -> int:
        rows = self.out_rows()
        return rows[-1]["seq"] if rows else 0


@pytest.fixture
def tool_ctx(tmp_path):
    lay = Layout.make(tmp_path)
    cfg = RunnerConfig.from_env({**lay.env(), "TZ": TZ})
    store = SessionStore(lay.session, lay.inbound)
    ctx = ToolContext(store=store, config=cfg, turn=Turn(reply_to=ROUTING, in_reply_to="in-1"))
    yield ctx, lay
    store.close()


def test_send_message_writes_a_row_to_the_current_chat_or_a_named_destination(tool_ctx):
    ctx, lay = tool_ctx
    assert "message_id 1" in messaging.send_message(ctx, "hello <internal>x</internal>")
    messaging.send_message(ctx, "to family", to="family")
    rows = lay.out_rows()
    assert [(r["content"], r["channel_type"], r["platform_id"], r["thread_id"]) for r in rows] == [
        ({"op": "text", "text": "hello"}, "cli", "owner-chat", None),
        ({"op": "text", "text": "to family"}, "telegram", "-100200", "7")]
    assert rows[0]["in_reply_to"] == "in-1"


def test_unknown_destination_is_a_tool_error_listing_valid_names(tool_ctx):
    ctx, lay = tool_ctx
    result = call_tool(ctx, messaging.send_message, {"text": "hi", "to": "nobody"})
    assert result["is_error"] and "unknown destination 'nobody'" in result["content"][0]["text"]
    assert "family" in result["content"][0]["text"]
    assert lay.out_rows() == []


def test_send_file_accepts_workspace_files_and_refuses_everything_else(tool_ctx):
    ctx, lay = tool_ctx
    (lay.group / "report.txt").write_text("the report")
    (lay.group / "sneaky").symlink_to("/etc/passwd")
    (lay.group / "sub").mkdir()
    for bad, why in [("/etc/passwd", "outside the workspace"), ("../../x", "outside the workspace"),
                     ("sneaky", "outside the workspace"), ("nope.txt", "no such file"), ("sub", "not a regular")]:
        with pytest.raises(ToolError, match=why):
            messaging.send_file(ctx, bad)
    assert "report.txt sent" in messaging.send_file(ctx, "report.txt", text="here")
    [r] = lay.out_rows()
    assert r["content"]["op"] == "file" and r["content"]["text"] == "here"
    assert (lay.session / r["content"]["path"]).read_text() == "the report"


def test_edit_and_react_only_to_own_messages(tool_ctx):
    ctx, lay = tool_ctx
    messaging.send_message(ctx, "first", to="family")
    messaging.edit_message(ctx, "1", "first, edited")
    messaging.add_reaction(ctx, 1, "👍")
    ops = [(r["content"], r["platform_id"]) for r in lay.out_rows()[1:]]
    assert ops == [({"op": "edit", "target_seq": 1, "text": "first, edited"}, "-100200"),
                   ({"op": "reaction", "target_seq": 1, "emoji": "👍"}, "-100200")]
    for bad in (99, "abc", 2):  # unknown, not a number, an edit row (not a message)
        with pytest.raises(ToolError):
            messaging.add_reaction(ctx, bad, "👍")


def test_store_claims_and_stale_claims(tmp_path):
    lay = Layout.make(tmp_path)
    store = SessionStore(lay.session, lay.inbound)
    store.claim(["a", "b"])
    store.complete(["b"])
    assert store.forget_stale_claims() == 1
    assert store.acked_ids(["a", "b"]) == {"b"}
    store.close()


def test_what_a_retried_turn_already_sent_is_looked_up_not_searched_for(tmp_path):
    """Each turn asks what already went out for its messages (the retry note): in a session with a
    long history that must not read every reply it ever wrote, on the answer's path."""
    work = {}
    for n in (10, 3000):
        lay = Layout.make(tmp_path / str(n))
        store = SessionStore(lay.session, lay.inbound)
        store.out.execute("BEGIN")
        store.out.executemany(
            "INSERT INTO messages_out (id, seq, in_reply_to, timestamp, kind, channel_type, platform_id, content) "
            "VALUES (?, ?, ?, '2026-11-01T00:00:00.000Z', 'chat', 'cli', 'owner-chat', ?)",
            [(f"o{i}", i, f"in-{i}", json.dumps({"op": "text", "text": f"reply {i}"})) for i in range(1, n + 1)])
        store.out.execute("COMMIT")
        store.write_out({"op": "text", "text": "said before the crash"}, ROUTING, in_reply_to="in-now")
        steps = [0]
        store.out.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1), 10)
        assert store.already_sent(["in-now"]) == [{"op": "text", "text": "said before the crash"}]
        store.out.set_progress_handler(None, 0)
        work[n] = steps[0]
        store.close()
    assert work[3000] <= work[10] * 1.5 + 5, work


# ------------------------------------------------------------------------------------------------
# the runner in a real sandbox
# ------------------------------------------------------------------------------------------------

class UnixToTcp:
    """Stands in for the proxy: a unix socket whose connections go to the fake model's port."""

    def __init__(self, path: Path, port: int):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        os.chmod(path, 0o777)
        sock.listen(32)
        self.port = port
        self.loop = AcceptLoop(sock, self._forward, name="unix-to-tcp")

    def _forward(self, client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self.port))
        threading.Thread(target=_relay, args=(client, up), daemon=True).start()
        threading.Thread(target=_relay, args=(up, client), daemon=True).start()

    def close(self) -> None:
        self.loop.close()


class RunnerProc:
    """The runner in a sandbox made by the project's bubblewrap runtime, as the host makes it."""

    def __init__(self, lay: Layout, fake: FakeModel, extra_env: dict[str, str] | None = None):
        require(shutil.which("bwrap") is not None, "bubblewrap is not installed (apt-get install bubblewrap)")
        from nanoclaw.runtime.base import INSTALL_LABEL, SandboxSpec
        from nanoclaw.runtime.bwrap import BwrapRuntime, probe
        why = probe()
        require(why is None, f"bubblewrap cannot make a sandbox here: {why}")
        self.lay = lay
        sock = lay.proxy / "proxy.sock"
        if sock.exists():
            sock.unlink()
        self.forwarder = UnixToTcp(sock, fake.port)
        env = {"TZ": TZ, "LANG": "C.UTF-8", "NANOCLAW_SESSION_DIR": "/workspace/session",
               "NANOCLAW_INBOUND_DIR": "/workspace/inbound",
               "NANOCLAW_GROUP_DIR": "/workspace/group", "NANOCLAW_PROXY_SOCKET": "/run/nanoclaw-proxy/proxy.sock",
               "NANOCLAW_MAX_MESSAGES_PER_PROMPT": "5", "NANOCLAW_ASSISTANT_NAME": "Andy",
               "CLAUDE_CODE_MAX_RETRIES": "0", "PYTHONDONTWRITEBYTECODE": "1", **(extra_env or {})}
        self.name = "runner-test-" + uuid.uuid4().hex[:8]
        self.runtime = BwrapRuntime(lay.root / "run", secrets=[os.environ.get("ANTHROPIC_API_KEY")])
        spec = SandboxSpec(name=self.name, session_dir=lay.session, inbound_dir=lay.inbound, group_dir=lay.group,
                           global_dir=lay.global_,
                           runner_dir=PROJECT_ROOT / "container" / "agent_runner", proxy_dir=lay.proxy, env=env,
                           labels={INSTALL_LABEL: "test-runner"})
        self.started_at = time.time()
        self.runtime.start(spec)

    def logs(self) -> str:
        return self.runtime.logs(self.name)

    def stop(self) -> None:
        self.runtime.stop(self.name, timeout=15)
        self.forwarder.close()


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """One runner shared by the scenario tests (it is one chat; each test scripts its own turn)."""
    saved = os.environ.get("ANTHROPIC_API_KEY")
    os.environ["ANTHROPIC_API_KEY"] = HOST_SECRET  # the host holds a key: it must never reach the agent
    fake = FakeModel().start()
    lay = Layout.make(tmp_path_factory.mktemp("agent"))
    (lay.group / "CLAUDE.md").write_text("Group memory: the family dog is called Biscuit.\n")
    (lay.global_ / "CLAUDE.md").write_text("Global rule: always sign as Andy.\n")
    runner = RunnerProc(lay, fake)
    yield lay, fake, runner
    runner.stop()
    fake.stop()
    if saved is None:
        os.environ.pop("ANTHROPIC_API_KEY", None)
    else:
        os.environ["ANTHROPIC_API_KEY"] = saved
    assert HOST_SECRET not in runner.logs()


def _turn(fake: FakeModel, lay: Layout, text: str, script, **kw):
    """Send one message with `script` answering it; returns (message id, first model call index)."""
    fake.script = script
    n = len(fake.model_calls())
    mid = lay.write(text, **kw)
    return mid, n


def test_a_message_gets_an_answer_in_its_chat(agent):
    lay, fake, runner = agent
    mid, n = _turn(fake, lay, "hello there", lambda r: "Hi Alice!")
    reply = lay.wait_out(lambda r: r["content"] == {"op": "text", "text": "Hi Alice!", "answer": True}, timeout=60)
    assert (reply["channel_type"], reply["platform_id"], reply["in_reply_to"]) == ("cli", "owner-chat", mid)
    lay.wait_ack(mid)
    call = fake.wait_for(lambda r: "hello there" in r.current_prompt(), after=n)
    prompt = call.current_prompt()
    assert prompt.startswith(f'<context timezone="{TZ}" />') and '<message sender="Alice"' in prompt
    assert call.headers.get("x-api-key") == "sandbox-placeholder"  # the proxy swaps in the real key
    assert "Biscuit" in call.all_text()  # the group's CLAUDE.md reached the model
    assert "always sign as Andy" in call.system_text()  # and the global one, in the system prompt
    assert not set(BLOCKED_TOOLS) & set(call.tool_names())
    # the CLI's agent-team and background tools are not offered: no teammates, nobody outside a turn
    assert not {"SendMessage", "ListAgents", "Monitor", "Workflow", "ReportFindings"} & set(call.tool_names())
    assert {"mcp__nanoclaw__send_message", "mcp__nanoclaw__send_file", "mcp__nanoclaw__edit_message",
            "mcp__nanoclaw__add_reaction"} <= set(call.tool_names())
    assert lay.state(SDK_SESSION_KEY) and (lay.session / "heartbeat").exists()


def test_context_only_messages_wait_for_a_trigger(agent):
    lay, fake, _ = agent
    n = len(fake.model_calls())
    fake.script = lambda r: "ok"
    runner_logs = agent[2].logs
    said = runner_logs().count("2 message(s) kept as context until one is for me")
    quiet = [lay.write("ctx one", trigger=False), lay.write("ctx two", trigger=False)]
    deadline = time.monotonic() + 20  # the runner saw both rows, and said it keeps them
    while runner_logs().count("2 message(s) kept as context until one is for me") == said:
        assert time.monotonic() < deadline, runner_logs()[-2000:]
        time.sleep(0.02)
    assert len(fake.model_calls()) == n, "context-only rows must not start a turn"
    assert not set(quiet) & set(lay.acks())
    mid = lay.write("now answer", sender="Bob")
    prompt = fake.wait_for(lambda r: "now answer" in r.current_prompt(), after=n).current_prompt()
    assert prompt.index("ctx one") < prompt.index("ctx two") < prompt.index("now answer")
    for m in quiet + [mid]:
        lay.wait_ack(m)


def test_only_the_newest_messages_are_shown(agent):
    lay, fake, _ = agent  # NANOCLAW_MAX_MESSAGES_PER_PROMPT=5
    n = len(fake.model_calls())
    fake.script = lambda r: "ok"
    old = [lay.write(f"old-{i}", trigger=False) for i in range(7)]
    mid = lay.write("the question")
    prompt = fake.wait_for(lambda r: "the question" in r.current_prompt(), after=n).current_prompt()
    assert prompt.count("<message ") == 5
    assert all(f"old-{i}" in prompt for i in (3, 4, 5, 6)) and not any(f"old-{i}<" in prompt for i in (0, 1, 2))
    lay.wait_ack(mid)
    assert all(lay.acks().get(m) == "completed" for m in old)  # the older context is superseded, not re-shown


def test_send_message_tool_round_trip(agent):
    lay, fake, _ = agent

    def script(r):
        if not r.turn_tool_results():
            return Reply.call(SEND, text="Working on it…")
        return "All done."
    mid, n = _turn(fake, lay, "do the thing", script)
    lay.wait_ack(mid)
    rows = [r for r in lay.out_rows() if r["in_reply_to"] == mid]
    assert [r["content"]["text"] for r in rows] == ["Working on it…", "All done."]
    result = fake.wait_for(lambda r: r.turn_tool_results() and "do the thing" in r.current_prompt(), after=n)
    assert not result.turn_tool_results()[0].is_error
    assert f"message_id {rows[0]['seq']}" in result.turn_tool_results()[0].text


def test_send_file_outside_the_workspace_is_refused(agent):
    lay, fake, _ = agent
    (lay.group / "notes.txt").write_text("workspace notes")
    attempts = [{"path": "/etc/passwd"}, {"path": "../../x"}, {"path": "notes.txt", "text": "your notes"}]

    def script(r):
        done = len(r.turn_tool_results())
        return Reply.call(SEND_FILE, **attempts[done]) if done < len(attempts) else "sent what I could"
    mid, n = _turn(fake, lay, "send me files", script)
    lay.wait_ack(mid)
    final = fake.wait_for(lambda r: len(r.turn_tool_results()) == 3 and "send me files" in r.current_prompt(),
                          after=n)
    passwd, dotdot, ok = final.turn_tool_results()
    assert passwd.is_error and "outside the workspace" in passwd.text and "root:" not in passwd.text
    assert dotdot.is_error and "outside the workspace" in dotdot.text
    assert not ok.is_error and "notes.txt sent" in ok.text
    files = [r for r in lay.out_rows() if r["in_reply_to"] == mid and r["content"]["op"] == "file"]
    assert len(files) == 1 and files[0]["content"]["text"] == "your notes"
    assert (lay.session / files[0]["content"]["path"]).read_text() == "workspace notes"


def test_unknown_destination_is_refused_and_a_named_one_works(agent):
    lay, fake, _ = agent
    attempts = [{"text": "psst", "to": "nobody"}, {"text": "hello family", "to": "family"}]

    def script(r):
        done = len(r.turn_tool_results())
        return Reply.call(SEND, **attempts[done]) if done < len(attempts) else ""
    mid, n = _turn(fake, lay, "tell the family", script)
    lay.wait_ack(mid)
    final = fake.wait_for(lambda r: len(r.turn_tool_results()) == 2 and "tell the family" in r.current_prompt(),
                          after=n)
    bad, good = final.turn_tool_results()
    assert bad.is_error and "unknown destination 'nobody'" in bad.text and "family" in bad.text
    assert not good.is_error
    rows = [r for r in lay.out_rows() if r["in_reply_to"] == mid]
    assert [(r["content"]["text"], r["platform_id"], r["thread_id"]) for r in rows] == [
        ("hello family", "-100200", "7")]  # the empty final answer sent nothing


def test_internal_text_is_stripped_and_empty_answers_send_nothing(agent):
    lay, fake, _ = agent
    mid, _ = _turn(fake, lay, "think first", lambda r: "<internal>plan: be brief</internal>Brief answer.")
    lay.wait_ack(mid)
    assert [r["content"]["text"] for r in lay.out_rows() if r["in_reply_to"] == mid] == ["Brief answer."]
    mid2, _ = _turn(fake, lay, "say nothing", lambda r: "<internal>nothing to add</internal>")
    lay.wait_ack(mid2)
    assert [r for r in lay.out_rows() if r["in_reply_to"] == mid2] == []


def test_edit_and_reaction_through_the_model(agent):
    lay, fake, _ = agent

    def script(r):
        results = r.turn_tool_results()
        if not results:
            return Reply.call(SEND, text="draft")
        if len(results) == 1:
            seq = int(results[0].text.split("message_id ")[1].rstrip(")."))
            return Reply(tool_calls=[ToolCall("mcp__nanoclaw__edit_message", {"message_id": seq, "text": "final"}),
                                     ToolCall("mcp__nanoclaw__add_reaction", {"message_id": seq, "emoji": "✅"})])
        return ""
    mid, _ = _turn(fake, lay, "draft and fix", script)
    lay.wait_ack(mid)
    ops = [r["content"] for r in lay.out_rows() if r["in_reply_to"] == mid]
    assert [o["op"] for o in ops] == ["text", "edit", "reaction"]
    draft_seq = [r["seq"] for r in lay.out_rows() if r["in_reply_to"] == mid][0]
    assert ops[1] == {"op": "edit", "target_seq": draft_seq, "text": "final"}
    assert ops[2] == {"op": "reaction", "target_seq": draft_seq, "emoji": "✅"}


def test_bash_is_recorded_in_container_state_while_it_runs(agent):
    lay, fake, _ = agent

    def script(r):
        if not r.turn_tool_results():
            return Reply.call("Bash", command="sleep 1.5", timeout=7000, description="wait")
        return "slept"
    mid, _ = _turn(fake, lay, "sleep a bit", script)
    seen = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and lay.acks().get(mid) != "completed":
        st = lay.container_state()
        if st.get("current_tool") == "Bash":
            seen = st
        time.sleep(0.05)
    assert seen.get("tool_declared_timeout_ms") == 7000 and seen.get("tool_started_at")
    lay.wait_ack(mid)
    assert lay.container_state().get("current_tool") is None


def test_a_slow_stream_keeps_the_heartbeat_fresh(agent):
    lay, fake, _ = agent
    words = " ".join(f"w{i}" for i in range(12))
    mid, _ = _turn(fake, lay, "talk slowly", lambda r: Reply.say(words, chunk_delay_s=0.25))
    beat = lay.session / "heartbeat"
    deadline, touches, last = time.monotonic() + 30, 0, None
    while time.monotonic() < deadline and lay.acks().get(mid) != "completed":
        m = beat.stat().st_mtime_ns
        touches += last is not None and m != last
        last = m
        time.sleep(0.1)
    lay.wait_ack(mid)
    assert touches >= 5, f"heartbeat touched {touches} times during a ~4 s stream"
    assert lay.out_rows()[-1]["content"]["text"] == words


def test_a_blocked_tool_is_refused(agent):
    lay, fake, _ = agent

    def script(r):
        if not r.turn_tool_results():
            return Reply.call("AskUserQuestion", questions=[{"question": "Which?", "header": "Q", "options": [
                {"label": "a", "description": "a"}, {"label": "b", "description": "b"}], "multiSelect": False}])
        return "fine"
    mid, n = _turn(fake, lay, "ask me", script)
    lay.wait_ack(mid)
    res = fake.wait_for(lambda r: r.turn_tool_results() and "ask me" in r.current_prompt(), after=n)
    assert res.turn_tool_results()[0].is_error


def _run_bash(fake: FakeModel, lay: Layout, prompt: str, commands: list[str]) -> list[str]:
    """Have the model run each command with Bash; the outputs it received."""
    def script(r):
        done = len(r.turn_tool_results())
        return Reply.call("Bash", command=commands[done]) if done < len(commands) else "checked"
    mid, n = _turn(fake, lay, prompt, script)
    lay.wait_ack(mid)
    final = fake.wait_for(lambda r: len(r.turn_tool_results()) == len(commands) and prompt in r.current_prompt(),
                          after=n)
    return [t.text for t in final.turn_tool_results()]


def test_no_secret_reaches_the_agent(agent):
    lay, fake, runner = agent
    assert os.environ["ANTHROPIC_API_KEY"] == HOST_SECRET
    outputs = _run_bash(fake, lay, "show me your environment", [
        "env", "cat /proc/self/environ | tr '\\0' '\\n'",
        "grep -rs sk-ant $HOME /workspace /tmp 2>/dev/null | grep -v grep | head -5; echo searched"])
    assert "PATH=" in outputs[0] and "sandbox-placeholder" in outputs[0]  # the commands really ran
    for out in outputs:
        assert HOST_SECRET not in out and "HOSTSECRET" not in out
    for call in fake.model_calls():
        assert HOST_SECRET not in call.all_text() and call.headers.get("x-api-key") == "sandbox-placeholder"
    assert HOST_SECRET not in runner.logs()


def test_no_secret_in_the_sandbox_pid1_environment(agent):
    lay, fake, _ = agent
    [out] = _run_bash(fake, lay, "show me pid 1", ["cat /proc/1/environ | tr '\\0' '\\n'; echo; echo done"])
    assert "done" in out
    assert HOST_SECRET not in out


def test_warm_turn_latency(agent):
    """Message row written -> model request at the fake, over 10 messages, one at a time."""
    lay, fake, _ = agent
    fake.script = lambda r: "ok"
    gaps, whole = [], []
    for i in range(10):
        n = len(fake.model_calls())
        t0 = time.monotonic()
        mid = lay.write(f"latency probe {i}")
        call = fake.wait_for(lambda r, i=i: f"latency probe {i}<" in r.current_prompt(), after=n)
        gaps.append(call.received_mono - t0)
        lay.wait_out(lambda r, mid=mid: r["in_reply_to"] == mid, timeout=10)
        whole.append(time.monotonic() - t0 - (call.handled_s or 0))
        lay.wait_ack(mid)
    p50, worst = statistics.median(gaps), max(gaps)
    print(f"\nwarm: row written -> model request: p50 {p50 * 1000:.0f} ms, max {worst * 1000:.0f} ms "
          f"({', '.join(f'{g * 1000:.0f}' for g in gaps)}); row written -> reply row, minus the fake's time: "
          f"p50 {statistics.median(whole) * 1000:.0f} ms, max {max(whole) * 1000:.0f} ms")
    assert p50 < 0.3, f"warm turn overhead p50 {p50 * 1000:.0f} ms"


# ------------------------------------------------------------------------------------------------
# runners of their own: failures, restarts
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def fake():
    with FakeModel() as model:
        yield model


def test_model_errors_reach_the_user_and_release_the_rows(tmp_path, fake):
    lay = Layout.make(tmp_path)
    runner = RunnerProc(lay, fake, {"NANOCLAW_TURN_TIMEOUT_S": "4"})
    try:
        fake.script = lambda r: Reply.error(500, "upstream exploded")
        mid = lay.write("are you there?")
        err = lay.wait_out(lambda r: r["in_reply_to"] == mid, timeout=60)
        assert err["content"]["text"].startswith("Sorry — the model call failed: the model API is unavailable "
                                                 "(HTTP 500)") and "retried" in err["content"]["text"]
        assert (err["channel_type"], err["platform_id"]) == ("cli", "owner-chat")
        calls = len(fake.model_calls())
        lay.looked_again_after(err)
        assert mid not in lay.acks(), "the claim must be released so the host can retry"
        assert len(fake.model_calls()) == calls, "a failed row must not be retried in a loop"

        # the host retries it (tries bumped): now the model answers
        fake.script = lambda r: "I am here."
        lay.bump_tries(mid)
        lay.wait_out(lambda r: r["in_reply_to"] == mid and r["content"]["text"] == "I am here.", timeout=30)
        lay.wait_ack(mid)

        # a bad credential at the proxy: 401
        fake.script = lambda r: Reply.error(401, "invalid x-api-key")
        mid2 = lay.write("again?")
        err2 = lay.wait_out(lambda r: r["in_reply_to"] == mid2, timeout=60)
        assert "credentials (HTTP 401)" in err2["content"]["text"]

        # a turn that runs past NANOCLAW_TURN_TIMEOUT_S is stopped and released
        fake.script = lambda r: Reply.say("too late", delay_s=8)
        mid3 = lay.write("slow one")
        err3 = lay.wait_out(lambda r: r["in_reply_to"] == mid3, timeout=30)
        assert "took longer than 4 s" in err3["content"]["text"]
        lay.looked_again_after(err3)
        assert mid3 not in lay.acks()

        # and the agent still answers the next message
        fake.script = lambda r: "back to normal"
        mid4 = lay.write("still alive?")
        lay.wait_out(lambda r: r["in_reply_to"] == mid4 and r["content"]["text"] == "back to normal", timeout=30)
    finally:
        runner.stop()


def test_messages_of_a_failed_turn_are_answered_once_when_newer_ones_pile_up(tmp_path, fake):
    """The model fails a turn while more messages than fit in one prompt arrive. The CLI keeps the
    failed prompt in its conversation and sends it with the next one, so the next answer covers it:
    its messages must be completed with that answer, not answered again in a turn of their own."""
    def answer(req):
        marks = list(dict.fromkeys(re.findall(r"m-\d+", req.current_prompt())))
        if marks == ["m-001"] and not failed:
            failed.append(req)
            return Reply(status=500, error_message="upstream exploded", delay_s=2)
        return Reply.say("ack " + " ".join(marks))
    failed: list = []
    fake.script = answer
    lay = Layout.make(tmp_path)
    runner = RunnerProc(lay, fake)  # at most 5 messages per prompt
    try:
        first = lay.write("note m-001")
        fake.wait_for(lambda r: failed, timeout=60)
        ids = [lay.write(f"note m-{i:03d}") for i in range(2, 8)]  # six more while the model fails
        for mid in [first, *ids]:
            lay.wait_ack(mid, timeout=60)
        said = [m for r in lay.out_rows() if r["content"].get("text", "").startswith("ack ")
                for m in re.findall(r"m-\d+", r["content"]["text"])]
        assert sorted(said) == [f"m-{i:03d}" for i in range(1, 8)], said  # each answered, none twice
    finally:
        runner.stop()


def test_a_restarted_runner_resumes_the_conversation(tmp_path, fake):
    lay = Layout.make(tmp_path)
    fake.script = lambda r: "noted: " + ("remember" if "remember the number 4711" in r.current_prompt() else "?")
    mid = lay.write("remember the number 4711")
    runner = RunnerProc(lay, fake)
    try:
        first = fake.wait_for(timeout=60)
        cold = first.received_at - runner.started_at
        lay.wait_ack(mid)
    finally:
        runner.stop()
    sid = lay.state(SDK_SESSION_KEY)
    assert sid and first.headers.get("x-claude-code-session-id") == sid

    # a claim left by a dead runner is forgotten at start
    mid2 = lay.write("what was the number?")
    with sqlite3.connect(lay.session / schema.OUTBOUND) as conn:
        conn.execute("INSERT INTO processing_ack VALUES (?, 'processing', ?)", (mid2, schema.utc_now_iso()))
    fake.script = lambda r: "It was 4711." if "4711" in r.all_text() else "no idea"
    n = len(fake.model_calls())
    runner = RunnerProc(lay, fake)
    try:
        call = fake.wait_for(lambda r: "what was the number?" in r.current_prompt(), after=n, timeout=60)
        cold2 = call.received_at - runner.started_at
        lay.wait_out(lambda r: r["in_reply_to"] == mid2 and r["content"]["text"] == "It was 4711.")
    finally:
        runner.stop()
    assert call.headers.get("x-claude-code-session-id") == sid
    assert any("remember the number 4711" in t for t in call.user_texts())  # the earlier turn is in context
    assert lay.state(SDK_SESSION_KEY) == sid
    print(f"\ncold: runner start -> first model request: {cold * 1000:.0f} ms (fresh), "
          f"{cold2 * 1000:.0f} ms (resumed)")
