"""The v1 trigger tests (formatting.test.ts blocks 3, 4 and 7) as engage-mode tests, plus what the
engage modes add: fan-out to agents with different modes, accumulate then trigger (the agent sees
the context), sticky thread follow-ups, sender scope, and the strict/public sender policies —
through the real Telegram channel module and, for the context, the real runner in a sandbox."""
from __future__ import annotations

import json

import pytest

from nanoclaw.models import AgentGroup, DroppedMessage, PendingSenderApproval, Session
from nanoclaw.inbound.decide import engages, trigger_pattern
from nanoclaw.sessions import session_schema as schema
from nanoclaw.inbound.wiring import resolve_engage
from tests.fakes.model_api import Reply
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import OLIVIA_AND_ANDY, telegram_app, cards, message, person, post, sandbox_service, texts

OWNER, BOB, ADA = person(111, "Olivia"), person(444, "Bob"), person(666, "Ada")
GROUP, FORUM = -100777, -100999


def pattern_engages(pattern: str, text: str) -> bool:
    return engages("pattern", pattern, text=text, mentioned=False, is_dm=False, sticky_session=False)


# --- block 3: the default trigger ('@Andy' at the start) as an engage pattern -------------------

DEFAULT = trigger_pattern(None, "Andy")


@pytest.mark.parametrize("text, expected", [
    ("@Andy hello", True),             # matches @name at start of message
    ("@andy hello", True),             # case-insensitively
    ("@ANDY hello", True),
    ("hello @Andy", False),            # not when it is not at the start
    ("@Andyextra hello", False),       # not a partial name (word boundary)
    ("@Andy's thing", True),           # word boundary before an apostrophe
    ("@Andy", True),                   # the name alone (end of text is a boundary)
    (" @Andy hey", True),              # leading whitespace
])
def test_block3_default_trigger(text, expected):
    assert pattern_engages(DEFAULT, text) is expected


# --- block 4: a per-chat trigger ----------------------------------------------------------------

def test_block4_custom_trigger_replaces_the_default():
    claw = trigger_pattern("@Claw", "Andy")
    assert pattern_engages(claw, "@Claw hello")
    assert not pattern_engages(claw, "@Andy hello")


def test_block4_missing_trigger_falls_back_to_the_assistant_name():
    assert pattern_engages(trigger_pattern(None, "Andy"), "@Andy hello")
    assert pattern_engages(trigger_pattern("  ", "Andy"), "@Andy hello")


def test_block4_regex_characters_in_a_trigger_are_literal():
    dotted = trigger_pattern("@C.L.A.U.D.E", "Andy")
    assert pattern_engages(dotted, "@C.L.A.U.D.E hi")
    assert not pattern_engages(dotted, "@CXLXAUXDXE hi")


# --- block 7: "requires trigger" is now the wiring's engage mode --------------------------------

@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, *OLIVIA_AND_ANDY) as app:
        yield app


def cli(app, *args):
    result = app.test_cli_runner().invoke(args=["nanoclaw", *args])
    assert result.exit_code == 0, result.output


def stored(app, folder: str) -> list[tuple[str, int]]:
    """(text, trigger) of every message in every session of `folder`, in order."""
    out = []
    for session in Session.select().join(AgentGroup).where(AgentGroup.folder == folder).order_by(Session.created_at):
        path = app.config["NANOCLAW"].sessions_dir / folder / session.id / "host" / schema.INBOUND
        conn = schema.connect(path, readonly=True)
        out += [(json.loads(r["content"])["text"], r["trigger"]) for r in conn.execute("SELECT * FROM messages_in ORDER BY seq")]
        conn.close()
    return out


def test_block7_main_chat_always_processes(app, tg):
    # v1's main group = a chat whose wiring engages on everything: the DM default, pattern '.'
    assert resolve_engage("dm", None, None).engage_mode == "pattern"
    post(app, message(111, OWNER, "no trigger here"))
    assert stored(app, "andy") == [("no trigger here", 1)]


def test_block7_a_dm_counts_as_a_mention_even_in_mention_mode(app, tg):
    # "main processes even with requiresTrigger=true": a direct message needs no trigger word
    cli(app, "wire", "telegram", "111", "andy", "--engage", "mention")
    post(app, message(111, OWNER, "still no trigger"))
    assert stored(app, "andy") == [("still no trigger", 1)]


def test_block7_group_default_requires_a_mention(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")  # requiresTrigger undefined
    post(app, message(GROUP, OWNER, "no trigger", title="Team"))
    assert stored(app, "andy") == []
    post(app, message(GROUP, OWNER, "now with one", title="Team", mention=True))
    assert stored(app, "andy") == [("@andy_test_bot now with one", 1)]


def test_block7_trigger_pattern_required_and_present(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--engage", "pattern",
        "--pattern", trigger_pattern(None, "Andy"))
    post(app, message(GROUP, OWNER, "no trigger", title="Team"))
    post(app, message(GROUP, OWNER, "@Andy do something", title="Team"))
    assert stored(app, "andy") == [("@Andy do something", 1)]


def test_block7_per_chat_trigger_instead_of_the_default(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--engage", "pattern",
        "--pattern", trigger_pattern("@Claw", "Andy"))
    post(app, message(GROUP, OWNER, "@Andy do something", title="Team"))  # only the default: no
    post(app, message(GROUP, OWNER, "@Claw do something", title="Team"))
    assert stored(app, "andy") == [("@Claw do something", 1)]


def test_block7_no_trigger_required_processes_everything(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--engage", "pattern", "--pattern", ".")
    post(app, message(GROUP, OWNER, "plain chatter", title="Team"))
    assert stored(app, "andy") == [("plain chatter", 1)]


# --- what engage modes add ---------------------------------------------------------------------

def test_fan_out_to_two_agents_with_different_modes(app, tg):
    cli(app, "agent", "create", "Bea")
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--ignored", "accumulate")
    cli(app, "wire", "telegram", str(GROUP), "bea", "--engage", "pattern", "--pattern", r"(?i)\bbea\b")
    post(app, message(GROUP, OWNER, "lunch at one?", title="Team"))
    post(app, message(GROUP, OWNER, "Bea, what do you think?", title="Team"))
    post(app, message(GROUP, OWNER, "summarize please", title="Team", mention=True))
    assert stored(app, "andy") == [("lunch at one?", 0), ("Bea, what do you think?", 0),
                                   ("@andy_test_bot summarize please", 1)]
    assert stored(app, "bea") == [("Bea, what do you think?", 1)]
    assert sorted(app.woken) == ["andy", "bea"]  # each woken by its own trigger only
    assert Session.select().count() == 2  # one session per agent


def test_wiring_changes_take_effect_on_the_next_message(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, OWNER, "first", title="Team"))
    cli(app, "wire", "telegram", str(GROUP), "andy", "--engage", "pattern", "--pattern", ".")
    post(app, message(GROUP, OWNER, "second", title="Team"))
    cli(app, "unwire", "telegram", str(GROUP), "andy")
    post(app, message(GROUP, OWNER, "third", title="Team"))
    assert stored(app, "andy") == [("second", 1)]
    assert [d.reason for d in DroppedMessage.select()][-1] == "no_agent_wired"


def test_sticky_threads_follow_up_without_a_mention(app, tg):
    cli(app, "wire", "telegram", str(FORUM), "andy", "--kind", "thread")  # default: mention-sticky
    post(app, message(FORUM, OWNER, "status of the release?", title="Dev", topic=200, mention=True))
    post(app, message(FORUM, OWNER, "and the changelog?", title="Dev", topic=200))  # sticks
    post(app, message(FORUM, OWNER, "unrelated topic", title="Dev", topic=300))  # another thread: no
    assert stored(app, "andy") == [("@andy_test_bot status of the release?", 1), ("and the changelog?", 1)]
    [session] = Session.select()
    assert session.thread_id == "200"
    post(app, message(FORUM, OWNER, "now here too", title="Dev", topic=300, mention=True))
    assert {s.thread_id for s in Session.select()} == {"200", "300"}  # each thread its own session


def test_sender_scope_known_ignores_strangers_that_the_chat_admits(app, tg):
    cli(app, "agent", "create", "Bea")
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--engage", "pattern", "--pattern", ".",
        "--unknown-senders", "public")
    cli(app, "wire", "telegram", str(GROUP), "bea", "--engage", "pattern", "--pattern", ".", "--sender-scope", "known")
    post(app, message(GROUP, ADA, "hello all", title="Team"))  # a stranger: public chat, only Andy listens
    post(app, message(GROUP, OWNER, "hi both", title="Team"))
    assert stored(app, "andy") == [("hello all", 1), ("hi both", 1)]
    assert stored(app, "bea") == [("hi both", 1)]


def test_policy_strict_drops_strangers_without_asking(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--unknown-senders", "strict")
    post(app, message(GROUP, BOB, "let me in", title="Team", mention=True))
    assert stored(app, "andy") == [] and cards(tg) == [] and not PendingSenderApproval.select().exists()
    assert [d.reason for d in DroppedMessage.select()] == ["unknown_sender_strict"]


def test_policy_public_lets_everyone_in(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--unknown-senders", "public")
    post(app, message(GROUP, BOB, "hello", title="Team", mention=True))
    assert stored(app, "andy") == [("@andy_test_bot hello", 1)] and cards(tg) == []


def test_a_refused_stranger_is_never_accumulated(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group", "--ignored", "accumulate",
        "--unknown-senders", "strict")
    post(app, message(GROUP, BOB, "psst", title="Team"))
    post(app, message(GROUP, OWNER, "ok", title="Team"))
    assert stored(app, "andy") == [("ok", 0)]


def test_accumulated_context_reaches_the_agent_with_the_trigger(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, lambda req: Reply.say("Lunch at one, Bob brings cake.")) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", str(GROUP), "andy", "--kind", "group", "--ignored", "accumulate",
                "--unknown-senders", "public")
        svc.post(message(GROUP, BOB, "lunch at one?", title="Team"))
        svc.post(message(GROUP, ADA, "I'll bring cake", title="Team"))
        svc.post(message(GROUP, OWNER, "what did we agree?", title="Team", mention=True))
        svc.wait(lambda: texts(svc.tg, GROUP), what="the agent's answer")
        [call] = svc.model.model_calls()  # one turn, woken by the mention only
        prompt = call.current_prompt()
        said = [prompt.index(t) for t in ("lunch at one?", "I&apos;ll bring cake" if "&apos;" in prompt
                                          else "I'll bring cake", "what did we agree?")]
        assert said == sorted(said)  # the context, oldest first, then the question
        assert '<message sender="Bob"' in prompt and '<message sender="Ada"' in prompt
        assert texts(svc.tg, GROUP) == ["Lunch at one, Bob brings cake."]


@pytest.mark.parametrize("text, expected", [
    ("@Scout find my keys", {2}),
    ("  @scout, and you?", {2}),          # case and leading space as the trigger allows
    ("@Scouting trip tomorrow", set()),   # a word that starts with the name is not the name
    ("hey @Scout", set()),                 # only at the start
    ("@Andy and @Scout", {1}),             # the first name is who is addressed
    ("what's for dinner?", set()),
])
def test_addressed_by_name(text, expected):
    from nanoclaw.inbound.decide import addressed
    assert addressed(text, {1: "Andy", 2: "Scout"}) == expected
