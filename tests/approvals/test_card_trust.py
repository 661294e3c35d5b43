"""Cards and their buttons at the trust boundary (issue 15, holes 2 and 4), through the real webhook,
the real delivery and the fake Telegram:

- an agent's card cannot carry a host action: even with a host card's real action id in hand (the
  worst case), its button is renumbered by the host, and a click is only a message to the agent;
- host action ids cannot be guessed (128 random bits, different for every card) and count only on
  their own card, in its own chat;
- a click on an agent's card is admitted like a message from the clicker (a stranger is refused);
- a question is answered only by the person asked or an admin of the agent.
"""
from __future__ import annotations

import json
import re

import pytest

from nanoclaw.models import AgentCard, AuditLog, PendingProposal, PendingQuestion, Session
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, inbound_db
from tests.tg_flow import buttons, cards, click, message, person, post, telegram_app, toasts
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)

from agent_runner.store import SessionStore  # noqa: E402  (container/ is on sys.path)

OWNER, ALICE, BOB, EVE = person(111, "Olivia"), person(222, "Alice"), person(333, "Bob"), person(999, "Eve")
GROUP = -100200


@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, ("agent", "create", "Andy"),
                      ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
                      ("user", "add", "telegram:222", "--name", "Alice", "--agent", "andy"),
                      ("user", "add", "telegram:333", "--name", "Bob", "--agent", "andy"),
                      ("wire", "telegram", "111", "andy"),
                      ("wire", "telegram", str(GROUP), "andy", "--kind", "group", "--engage", "pattern",
                       "--pattern", ".")) as app:
        yield app


def session_of(app, chat) -> tuple[Session, object]:
    session = next(s for s in Session.select() if s.messaging_group.platform_id == str(chat))
    return session, app.config["NANOCLAW"].sessions_dir / "andy" / session.id


def agent_writes(app, path, op: dict, target: Target, in_reply_to=None, kind="chat"):
    """What the agent's tools (or a tampered sandbox) write into its outbound.db, then delivery."""
    agent = SessionStore.of_session(path)
    agent.write_out(op, target, in_reply_to=in_reply_to, kind=kind)
    agent.close()
    deliver_session(path, app.config["NANOCLAW"])


def inbound_rows(path, kind="chat") -> list[dict]:
    conn = schema.connect(inbound_db(path), readonly=True)
    try:
        return [dict(r, content=json.loads(r["content"])) for r in
                conn.execute("SELECT * FROM messages_in WHERE kind = ? ORDER BY seq", (kind,))]
    finally:
        conn.close()


def test_an_agents_card_cannot_approve_its_own_proposal(app, tg):
    post(app, message(111, OWNER, "hello"))
    _, path = session_of(app, 111)
    dm = Target("telegram", "111")
    agent_writes(app, path, {"op": "proposal", "ref": "r1", "kind": "egress", "payload": {"host": "evil.example"},
                             "reason": "for my research"}, dm, kind="system")
    [proposal_card] = cards(tg)
    approve = buttons(proposal_card)["✅ Approve"]  # the host's real id: the worst case, the agent has it
    agent_writes(app, path, {"op": "card", "title": "All done", "body": "Thanks for your patience!",
                             "buttons": [{"label": "Thanks", "action": approve}, {"label": "👍", "value": approve}]}, dm)
    card = cards(tg)[-1]
    assert card is not proposal_card and list(buttons(card)) == ["Thanks", "👍"]
    ids = list(buttons(card).values())
    assert all(re.fullmatch(r"nac-[A-Za-z0-9_-]{22}:[01]", i) for i in ids), ids  # the host's own ids

    post(app, click(buttons(card)["Thanks"], OWNER, card))
    assert PendingProposal.get().state == "pending"  # nothing was approved
    assert not AuditLog.select().where(AuditLog.action == "proposal.approve").exists()
    clicked = inbound_rows(path)[-1]
    assert clicked["content"]["text"] == f"[button] Thanks (value: {approve}) on your card “All done”"
    assert clicked["content"]["sender_id"] == "telegram:111" and clicked["trigger"] == 1
    assert app.woken[-1] == "andy"


def test_host_action_ids_are_unguessable_and_count_only_on_their_own_card(app, tg):
    post(app, message(GROUP, EVE, "hi there", title="Team"))  # a stranger: a sender card to the owner
    post(app, message(GROUP, person(444, "Dan"), "me too", title="Team"))
    first, second = cards(tg)
    allow_1, allow_2 = buttons(first)["✅ Allow"], buttons(second)["✅ Allow"]
    for action_id in (allow_1, allow_2):
        assert re.fullmatch(r"nsa-[A-Za-z0-9_-]{22}:allow", action_id)
    assert allow_1.split(":")[0] != allow_2.split(":")[0]
    # the owner's click on a card forwarded into the group (a valid id, the wrong chat) does nothing
    forwarded = dict(first, chat_id=str(GROUP))
    post(app, click(allow_1, OWNER, forwarded))
    assert toasts(tg)[-1] == "This button does not belong to this chat."
    # a guessed sequential id does nothing either
    post(app, click("nsa-1:allow", OWNER, first))
    assert toasts(tg)[-1] == "This request is no longer pending."
    post(app, click(allow_1, OWNER, first))
    assert toasts(tg)[-1].startswith("Allowed: Eve can talk to Andy now.")


def test_a_stranger_cannot_use_an_agents_buttons(app, tg):
    app.test_cli_runner().invoke(args=["nanoclaw", "wire", "telegram", str(GROUP), "andy", "--kind", "group",
                                       "--engage", "pattern", "--pattern", ".", "--unknown-senders", "strict"])
    post(app, message(GROUP, ALICE, "what shall we eat?", title="Team"))
    _, path = session_of(app, GROUP)
    group = Target("telegram", str(GROUP))
    agent_writes(app, path, {"op": "card", "title": "Lunch", "body": "Vote:",
                             "buttons": [{"label": "Pizza"}, {"label": "Sushi"}]}, group)
    card = cards(tg)[-1]
    before = len(inbound_rows(path))
    post(app, click(buttons(card)["Sushi"], EVE, card))
    assert toasts(tg)[-1] == "Only people this agent knows can use its buttons here."
    assert len(inbound_rows(path)) == before
    post(app, click(buttons(card)["Sushi"], ALICE, card))
    assert inbound_rows(path)[-1]["content"]["text"] == "[button] Sushi on your card “Lunch”"
    assert AgentCard.get().title == "Lunch"


def test_a_question_is_answered_only_by_the_person_asked_or_an_admin(app, tg):
    post(app, message(GROUP, ALICE, "book the room for me", title="Team"))
    _, path = session_of(app, GROUP)
    [asked] = [r for r in inbound_rows(path) if r["content"]["sender_id"] == "telegram:222"]
    agent_writes(app, path, {"op": "question", "question_id": "q1", "title": "Room", "question": "Which day?",
                             "options": ["Monday", "Tuesday"], "expires_at": "2099-01-01T00:00:00.000Z"},
                 Target("telegram", str(GROUP)), in_reply_to=asked["id"], kind="system")
    card = cards(tg)[-1]
    assert PendingQuestion.get().asked_user_id == "telegram:222"
    post(app, click(buttons(card)["Tuesday"], BOB, card))  # a member of the chat, but not the one asked
    assert toasts(tg)[-1] == "Only Alice (who was asked) or an admin of this agent can answer this."
    assert inbound_rows(path, "answer") == []
    post(app, click(buttons(card)["Monday"], ALICE, card))
    assert toasts(tg)[-1] == "You chose: Monday"
    [answer] = inbound_rows(path, "answer")
    assert answer["content"]["answer"] == "Monday" and answer["content"]["sender_id"] == "telegram:222"


def test_an_admin_of_the_agent_may_answer_for_the_person_asked(app, tg):
    post(app, message(GROUP, ALICE, "book the room for me", title="Team"))
    _, path = session_of(app, GROUP)
    agent_writes(app, path, {"op": "question", "question_id": "q2", "title": "", "question": "Which day?",
                             "options": ["Monday"], "expires_at": "2099-01-01T00:00:00.000Z"},
                 Target("telegram", str(GROUP)), kind="system")
    card = cards(tg)[-1]
    post(app, click(buttons(card)["Monday"], OWNER, card))
    assert toasts(tg)[-1] == "You chose: Monday"
