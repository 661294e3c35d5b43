"""Memory and history on the host, as a person meets them (issue 40), with the real router, the real
session files and the real delivery ops (no sandbox: the agent's tool calls are the op rows its runner
writes). A new thread of a chat and a session archived for silence and woken again start with the
memory and find the old history; a backup restored into a fresh install keeps both, and one without
the index gets it made anew from its sessions; the owner's commands show, change, search and forget;
the page shows a scoped admin no other person's private memory and refuses the write."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from nanoclaw.config import PROJECT_ROOT
from nanoclaw.lifecycle import silent
from nanoclaw.memory import ops, snapshot
from nanoclaw.memory.tables import History, Memory
from nanoclaw.models import Session
from nanoclaw.outbound.delivery import Outgoing
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.tg_flow import Telegram, message, person, post, telegram_app

OWNER, ADA = person(111, "Olivia"), person(333, "Ada")
TEAM = -100500
SETUP = (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
         ("user", "add", "telegram:333", "--role", "admin", "--agent", "andy"),
         ("wire", "telegram", "111", "andy"), ("wire", "telegram", str(TEAM), "andy", "--kind", "thread"))


def session_path(app, chat, thread=None):
    settings = app.config["NANOCLAW"]
    for s in Session.select():
        path = store.session_path(settings.sessions_dir, "andy", s.id)
        target = store.routing_of(path)
        if target and target.platform_id == str(chat) and target.thread_id == thread:
            return path
    raise AssertionError(f"no session of {chat} thread {thread}")


def tool(app, path, op: str, **fields) -> dict:
    """What the agent's tool gets back: the op row as its runner writes it, applied by the host."""
    request_id = f"r{time.monotonic_ns()}"
    row = Outgoing(f"o-{request_id}", 1, None, Target("telegram", "x"), {"op": op, "request_id": request_id, **fields})
    {"memory": ops.handle_memory, "search_history": ops.handle_search}[op](path, row, app.config["NANOCLAW"])
    conn = schema.connect(store.inbound_db(path), readonly=True)
    try:
        return json.loads(conn.execute("SELECT content FROM messages_in WHERE id = ?",
                                       (f"answer:{request_id}",)).fetchone()[0])
    finally:
        conn.close()


def option(path, key):
    conn = schema.connect(store.inbound_db(path), readonly=True)
    try:
        row = conn.execute("SELECT value FROM options WHERE key = ?", (key,)).fetchone()
        return row and row[0]
    finally:
        conn.close()


def answered(path) -> None:
    """Every message of the session answered (as its runner would have)."""
    conn = schema.connect(store.inbound_db(path))
    conn.execute("UPDATE messages_in SET status = 'completed'")
    conn.close()


def thread_message(text, topic):
    return message(TEAM, ADA, text, title="Team", mention=True, topic=topic)


def test_a_new_thread_and_a_woken_archived_session_keep_memory_and_history(make_settings, sqlite_url):
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *SETUP, TELEGRAM_MODE="webhook") as app:
        post(app, thread_message("the wifi password changed to sunflower", 7))
        first = session_path(app, TEAM, "7")
        assert tool(app, first, "memory", action="add", text="wifi password is sunflower")["ok"]
        assert Memory.get().scope == f"chat:telegram:{TEAM}"
        post(app, thread_message("a new topic", 8))  # another thread of the same chat: its own session
        second = session_path(app, TEAM, "8")
        assert second != first and "wifi password is sunflower" in option(second, "memory")
        assert "sunflower" in tool(app, second, "search_history", query="wifi")["text"]

        post(app, message(111, OWNER, "my locker code is 4711"))
        dm = session_path(app, "111")
        assert tool(app, dm, "memory", action="add", text="locker code 4711")["ok"]
        assert "4711" not in (option(second, "memory") or "")  # the group never gets the private memory
        assert "4711" not in tool(app, second, "search_history", query="locker")["text"]
        settings = app.config["NANOCLAW"]
        answered(dm)
        later = time.time() + (settings.silent_session_days + 1) * 86400  # the chat falls silent that long
        snapshot.forget()
        assert dm.name in silent.clear_silent(settings, None, now=later)
        assert not dm.exists()  # archived for silence
        post(app, message(111, OWNER, "what was my code?"))
        woken = session_path(app, "111")
        assert "locker code 4711" in option(woken, "memory")  # a fresh folder, the memory as it was
        found = tool(app, woken, "search_history", query="locker")
        assert found["ok"] and "my locker code is 4711" in found["text"]


def test_the_owners_commands_show_change_search_and_forget(make_settings, sqlite_url):
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *SETUP, TELEGRAM_MODE="webhook") as app:
        runner = app.test_cli_runner()

        def run(*args):
            return runner.invoke(args=["nanoclaw", *args])
        post(app, message(111, OWNER, "the spare key is under the blue pot"))
        dm = session_path(app, "111")
        tool(app, dm, "memory", action="add", text="spare key: blue pot")
        shown = run("memory", "show", "andy").output
        assert "private:telegram:111" in shown and "spare key: blue pot" in shown and "agent:andy add" in shown
        assert run("memory", "edit", "andy", "--user", "telegram:111", "--text", "spare key: red pot").exit_code == 0
        assert Memory.get().text == "spare key: red pot"
        refused = run("memory", "edit", "andy", "--user", "telegram:111", "--text", "key sk-ant-api03-abcdefghijkl")
        assert refused.exit_code == 2 and "key" in refused.output and Memory.get().text == "spare key: red pot"
        assert "the spare key is under the blue pot" in run("history", "search", "andy", "spare key").output
        forgot = run("history", "forget", "andy", "--chat", "telegram", "111")
        assert forgot.exit_code == 0 and "transcripts" in forgot.output
        assert History.select().where(History.platform_id == "111").count() == 0
        assert "Nothing found" in run("history", "search", "andy", "spare").output
        for bad in (("memory", "edit", "andy", "--text", "x"), ("history", "forget", "andy"),
                    ("history", "search", "andy", '"!"'), ("memory", "show", "andy", "--chat", "nowhere", "1")):
            result = run(*bad)
            assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, (bad, result.output)
        assert run("memory", "clear", "andy").exit_code == 0 and Memory.get().text == ""


def test_a_scoped_admin_sees_chat_memories_and_their_own_never_anothers(make_settings, sqlite_url):
    from tests.web.test_admin import csrf_of, login
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *SETUP, TELEGRAM_MODE="webhook") as app:
        runner = app.test_cli_runner()
        for args in (("memory", "edit", "andy", "--user", "telegram:111", "--text", "owner secret: 4711"),
                     ("memory", "edit", "andy", "--chat", "telegram", str(TEAM), "--text", "team uses blue"),
                     ("memory", "edit", "andy", "--user", "telegram:333", "--text", "ada likes tea")):
            assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
        assert runner.invoke(args=["nanoclaw", "admin", "set-password", "telegram:333", "--password-stdin"],
                             input="ada password 123\n").exit_code == 0
        client = app.test_client()
        assert login(client, "telegram:333", "ada password 123").status_code == 302
        html = client.get("/admin/agents/andy").get_data(as_text=True)
        assert "team uses blue" in html and "ada likes tea" in html and "4711" not in html
        refused = client.post("/admin/agents/andy/memory", data={"scope": "private:telegram:111", "text": "",
                                                                  "clear": "1", "csrf_token": csrf_of(html)})
        assert refused.status_code == 403 and "owner secret: 4711" in Memory.get(Memory.scope == "private:telegram:111").text


def test_a_restored_backup_keeps_memory_and_history_and_one_without_the_index_gets_it_made(make_settings, sqlite_url,
                                                                                          tmp_path):
    import os
    archive = tmp_path / "b.tar.gz"
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *SETUP, TELEGRAM_MODE="webhook") as app:
        post(app, message(111, OWNER, "the boat is called Marlin"))
        tool(app, session_path(app, "111"), "memory", action="add", text="boat: Marlin")
        runner = app.test_cli_runner()
        assert runner.invoke(args=["nanoclaw", "backup", str(archive)]).exit_code == 0
        History.delete().execute()  # as if the archive came from before the index existed
        assert runner.invoke(args=["nanoclaw", "backup", str(tmp_path / "old.tar.gz")]).exit_code == 0
    flask = [str(__import__("pathlib").Path(sys.executable).parent / "flask"), "--app", "app", "nanoclaw"]
    for name, expect in (("b.tar.gz", "back to"), ("old.tar.gz", "made anew from the sessions: 1 message")):
        fresh = tmp_path / f"fresh-{name}"
        env = {**os.environ, "NANOCLAW_DATA_DIR": str(fresh / "data"), "NANOCLAW_GROUPS_DIR": str(fresh / "groups"),
               "DATABASE_URL": f"sqlite:///{fresh / 'data' / 'nanoclaw.db'}", "NANOCLAW_ENV_FILE": str(tmp_path / "x"),
               "NANOCLAW_MOUNT_ALLOWLIST": str(fresh / "allowlist.json")}
        done = subprocess.run(flask + ["restore", str(tmp_path / name)], env=env, cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and expect in done.stdout, done.stdout + done.stderr
        shown = subprocess.run(flask + ["memory", "show", "andy"], env=env, cwd=PROJECT_ROOT, capture_output=True,
                               text=True, timeout=60).stdout
        assert "boat: Marlin" in shown
        found = subprocess.run(flask + ["history", "search", "andy", "marlin"], env=env, cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=60).stdout
        assert "the boat is called Marlin" in found


def test_a_strangers_message_is_never_in_the_history_until_the_owner_lets_them_in(make_settings, sqlite_url):
    from tests.tg_flow import buttons, cards, click
    stranger = person(999, "Eve")
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *SETUP, TELEGRAM_MODE="webhook") as app:
        post(app, thread_message("hello team", 9))  # Ada (an admin): written, indexed
        post(app, message(TEAM, stranger, "secret plans of the stranger", title="Team", mention=True, topic=9))
        assert History.select().where(History.text.contains("stranger")).count() == 0  # waiting for the owner
        assert History.select().where(History.text == "@andy_test_bot hello team").count() == 1
        card = next(c for c in cards(tg) if "Eve" in c["text"])
        post(app, click(next(v for k, v in buttons(card).items() if "Allow" in k), OWNER, card))
        assert History.select().where(History.text.contains("secret plans of the stranger")).count() == 1
