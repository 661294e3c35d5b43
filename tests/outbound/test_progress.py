"""The status message of a long turn, its rules alone (no platform, no sandbox): what it says, when it
is shown and edited, and the runner's few words for a tool call, which never carry the input whole."""
from __future__ import annotations

from agent_runner.activity import describe
from nanoclaw.outbound.progress import Status, clean_subject, next_step, status_text, summary_text
from nanoclaw.sessions.store import Target

T = Target("telegram", "42")


def test_the_text_says_how_long_and_what_now():
    assert status_text(42.3, "running `pytest`") == "⏳ Working… 0:40 · running pytest"
    assert status_text(125, None) == "⏳ Working… 2:05"
    assert summary_text(83) == "✓ Worked 1:25"


def test_the_agents_words_are_cleaned_and_cut():
    assert clean_subject("rm\n-rf /\x1b[31m *bold* <b>x</b> [link](y)") == "rm -rf / 31m bold b x /b link (y)"
    assert len(clean_subject("x" * 500)) == 48 and clean_subject("x" * 500).endswith("…")
    assert clean_subject(None) == ""


def test_shown_after_a_while_edited_when_the_text_changes_throttled_per_chat():
    s = Status("m1", T, since=100.0)
    kw = dict(after_s=10, last_edit=None, edit_every_s=3, blocked_until=0.0)
    assert next_step(s, 105, "a", **kw) is None                   # a fast turn shows nothing
    assert next_step(s, 110, "a", **kw) == "show"
    s.shown, s.text = "77", "a"
    assert next_step(s, 111, "a", **{**kw, "last_edit": 110}) is None      # nothing new
    assert next_step(s, 111, "b", **{**kw, "last_edit": 110}) is None      # too soon after the last edit
    assert next_step(s, 113, "b", **{**kw, "last_edit": 110}) == "edit"
    assert next_step(s, 113, "b", **{**kw, "last_edit": 110, "blocked_until": 120}) is None  # the platform's 429
    s.in_flight = True
    assert next_step(s, 200, "c", **kw) is None


def test_the_runner_describes_a_tool_call_without_its_input():
    assert describe("Bash", {"command": "GITHUB_TOKEN=ghp_secret123 /usr/bin/curl -H 'x: y' https://api"}) == \
        "running `curl`"
    assert describe("Read", {"file_path": "/workspace/group/reports/2026/report.pdf"}) == "reading `report.pdf`"
    assert describe("WebFetch", {"url": "https://user:pw@example.org/a?token=1"}) == "reading a page on example.org"
    assert describe("WebSearch", {"query": "my password is hunter2"}) == "searching the web"
    assert describe("mcp__nanoclaw__ask_operator", {"text": "the key is sk-ant"}) == "asking the owner"
    assert describe("mcp__github__create_issue", {"body": "..."}) == "using github"
    assert describe("Bash", {"command": "'unterminated"}) == "running `'unterminated`"
    assert describe("Write", "not a dict") == "writing a file"
    assert describe("mcp__nanoclaw__ask_agent", {"agent": "finance", "text": "the key is sk-ant"}) == "asking finance…"
    assert describe("mcp__nanoclaw__ask_agent", {"agent": "<b>Fin ance</b>"}) == "asking bfinanceb…"


def test_progress_follows_the_chats_wiring_and_what_its_platform_can_do(tmp_path):
    from nanoclaw.config import Settings
    from nanoclaw.outbound.progress import Progress
    from nanoclaw.sessions import session_schema as schema
    from nanoclaw.sessions import store
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC"}, dotenv_path=tmp_path / "x")
    path = tmp_path / "s"
    store.prepare(path, T)
    progress = Progress(settings)
    conn = schema.connect(store.inbound_db(path), readonly=True)
    try:
        assert progress.wanted(conn, T) == (True, False)         # the status line on unless the wiring says off
        store.set_option(path, "stream", "on")                    # the host writes the wiring's choice
        assert progress.wanted(conn, T) == (True, True)
        assert progress.wanted(conn, Target("whatsapp", "15551234")) == (False, False)  # no edits there
        store.set_option(path, "progress", "off")                 # wire … --progress off
        store.set_option(path, "stream", "off")                   # wire … --stream off
        assert progress.wanted(conn, T) == (False, False)
    finally:
        conn.close()
