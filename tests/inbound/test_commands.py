"""Slash commands in chat, through the Telegram webhook: /clear and /compact only from admins,
Claude Code's terminal commands (/login, /logout, /config, /remote-control…) never reach the
agent, a refusal is a short reply and nothing is stored in any session."""
from __future__ import annotations

import json

import pytest

from nanoclaw.inbound.commands import parse, verdict
from nanoclaw.models import AgentGroup, DroppedMessage, Session
from nanoclaw.sessions import session_schema as schema
from tests.fakes.telegram_api import USERNAME
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import telegram_app, message, person, post, texts

OWNER, BOB, CARL = person(111, "Olivia"), person(444, "Bob"), person(555, "Carl")
GROUP = -100777


def test_parse_finds_the_command_word():
    assert parse("/clear") == "clear"
    assert parse("  /Compact keep the todo list") == "compact"
    assert parse(f"/clear@{USERNAME}") == "clear"
    assert parse("/remote-control") == "remote-control"
    assert parse("please /clear") is None
    assert parse("/") is None and parse("") is None and parse(None) is None
    assert parse("/clearly not a command?") == "clearly"  # a word of its own: an ordinary message


@pytest.mark.parametrize("command, admin, allowed", [
    ("clear", True, True), ("clear", False, False), ("compact", True, True), ("compact", False, False),
    ("login", True, False), ("logout", True, False), ("config", True, False), ("remote-control", True, False),
    ("start", False, True), ("help", False, True), ("clearly", False, True), (None, False, True),
])
def test_verdicts(command, admin, allowed):
    v = verdict(command, admin)
    assert v.allowed is allowed
    assert (v.reply is None) is allowed


@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg,
                      ("agent", "create", "Andy"),
                      ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
                      ("user", "add", "telegram:444", "--agent", "andy", "--name", "Bob"),  # a member
                      ("user", "add", "telegram:555", "--role", "admin", "--agent", "andy", "--name", "Carl"),
                      ("wire", "telegram", "111", "andy"), ("wire", "telegram", "444", "andy"),
                      ("wire", "telegram", "555", "andy"),
                      ("wire", "telegram", str(GROUP), "andy", "--kind", "group", "--ignored", "accumulate")) as app:
        yield app


def stored(app) -> list[tuple[str, str | None, int]]:
    """(text, command, trigger) of every message in every session of Andy."""
    out = []
    for session in Session.select().join(AgentGroup).where(AgentGroup.folder == "andy"):
        path = app.config["NANOCLAW"].sessions_dir / "andy" / session.id / "host" / schema.INBOUND
        conn = schema.connect(path, readonly=True)
        for r in conn.execute("SELECT * FROM messages_in ORDER BY seq"):
            c = json.loads(r["content"])
            out.append((c["text"], c.get("command"), r["trigger"]))
        conn.close()
    return out


def test_clear_and_compact_reach_the_agent_from_owners_and_admins(app, tg):
    post(app, message(111, OWNER, "/clear"))
    post(app, message(555, CARL, "/compact keep the todo list"))
    assert sorted(stored(app)) == [("/clear", "clear", 1), ("/compact keep the todo list", "compact", 1)]
    assert app.woken == ["andy", "andy"]
    assert texts(tg, 111) == [] and texts(tg, 555) == []


def test_clear_from_a_member_gets_a_short_no_and_stores_nothing(app, tg):
    post(app, message(444, BOB, "/clear"))
    post(app, message(444, BOB, "/compact"))
    assert texts(tg, 444) == ["Only an admin can use /clear here.", "Only an admin can use /compact here."]
    assert stored(app) == [] and app.woken == []
    assert [d.reason for d in DroppedMessage.select()] == ["command_refused", "command_refused"]


@pytest.mark.parametrize("command", ["/login", "/logout", "/config", "/remote-control"])
def test_terminal_commands_never_reach_the_agent_even_from_the_owner(app, tg, command):
    post(app, message(111, OWNER, command))
    assert stored(app) == []
    [reply] = texts(tg, 111)
    assert reply.startswith(f"{command} is not available in chat") and len(reply) < 120


def test_a_command_in_a_group_is_refused_only_when_addressed_and_never_kept_as_context(app, tg):
    post(app, message(GROUP, BOB, "/login", title="Team"))  # not addressed to the bot: silent
    assert texts(tg, GROUP) == []
    post(app, message(GROUP, BOB, f"/clear@{USERNAME}", title="Team", command=True))  # addressed
    assert texts(tg, GROUP) == ["Only an admin can use /clear here."]
    post(app, message(GROUP, BOB, "lunch at one?", title="Team"))  # ordinary chatter is context
    post(app, message(GROUP, OWNER, f"/clear@{USERNAME}", title="Team", command=True))
    assert stored(app) == [("lunch at one?", None, 0), (f"/clear@{USERNAME}", "clear", 1)]


def test_other_slash_words_are_ordinary_messages(app, tg):
    post(app, message(444, BOB, "/start"))
    post(app, message(444, BOB, "/weather in Berlin"))
    assert stored(app) == [("/start", None, 1), ("/weather in Berlin", None, 1)]
    assert texts(tg, 444) == []
