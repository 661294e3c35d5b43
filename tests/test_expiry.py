"""Cards that wait too long expire (SQLite and PostgreSQL, the real Telegram channel against a fake
Bot API): a question card says so at its timeout, once, and a late click writes nothing to the
agent; pending sender (nsa-) and chat (nca-) approvals expire after NANOCLAW_APPROVAL_EXPIRY_HOURS:
the card is edited, the page stops listing them, a late click is told "expired" and does nothing,
and the next message from that sender or chat asks again."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest

from nanoclaw import approvals, housekeeping, pending, questions
from nanoclaw.models import (AgentGroupMember, AuditLog, PendingChannelApproval, PendingQuestion,
                             PendingSenderApproval, Wiring, utcnow)
from tests.test_questions import answers, ask
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import buttons, cards, click, edits, message, person, post, sandbox_service, telegram_app, toasts

OWNER, BOB, CARL = person(111, "Olivia"), person(444, "Bob"), person(555, "Carl")
GROUP = -100777


@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, ("agent", "create", "Andy"),
                      ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
                      ("wire", "telegram", "111", "andy")) as app:
        yield app


def page_keys(app, user="telegram:111") -> list[str]:
    return [item.key for item in pending.pending_items(app.config["NANOCLAW"], user).items]


# --- questions ---------------------------------------------------------------------------------

def test_a_question_card_says_it_expired_at_its_timeout_once(app, tg):
    settings = app.config["NANOCLAW"]
    path, _ = ask(app, seconds=1)
    [card] = cards(tg)
    assert questions.expire_questions(settings) == 0  # still open: untouched
    assert edits(tg) == []
    time.sleep(1.1)
    assert questions.expire_questions(settings) == 1
    [edit] = edits(tg)
    assert (str(edit["chat_id"]), edit["message_id"]) == ("111", card["_message_id"])
    assert edit["text"] == "Lunch\nPizza or sushi?\n\n⏱ Expired: no answer came in time."
    assert "reply_markup" not in edit or not edit["reply_markup"].get("inline_keyboard")  # the buttons are gone
    assert questions.expire_questions(settings) == 0 and len(edits(tg)) == 1  # once

    post(app, click(buttons(card)["Pizza"], OWNER, card))
    assert toasts(tg)[-1] == "This question expired; the agent has moved on."
    assert answers(path) == [] and len(edits(tg)) == 1  # nothing for the agent, no second edit
    assert PendingQuestion.get().answered_at is None
    assert AuditLog.select().where(AuditLog.action == "question.expire").count() == 1


def test_a_click_just_after_the_timeout_expires_the_card_itself(app, tg):
    path, _ = ask(app, seconds=-1)  # the job has not come round yet
    [card] = cards(tg)
    post(app, click(buttons(card)["Sushi"], OWNER, card))
    assert toasts(tg)[-1] == "This question expired; the agent has moved on."
    assert [e["text"].splitlines()[-1] for e in edits(tg)] == ["⏱ Expired: no answer came in time."]
    assert questions.expire_questions(app.config["NANOCLAW"]) == 0 and len(edits(tg)) == 1
    assert answers(path) == []


def test_the_service_marks_an_unanswered_question_expired_without_a_click(make_settings, sqlite_url):
    from tests.test_questions import asks_then_says, setup_owner
    from tests.tg_flow import texts
    with sandbox_service(make_settings, sqlite_url, asks_then_says(2)) as svc:
        setup_owner(svc)
        svc.post(message(111, OWNER, "plan lunch for us"))
        card = svc.wait(lambda: next(iter(cards(svc.tg)), None), what="the question card")
        asked = time.monotonic()
        svc.wait(lambda: edits(svc.tg), timeout=30, what="the card marked expired")
        took = time.monotonic() - asked
        assert edits(svc.tg)[-1]["message_id"] == card["_message_id"]
        assert edits(svc.tg)[-1]["text"].endswith("⏱ Expired: no answer came in time.")
        assert took < 2 + questions.EXPIRY_CHECK_S + 2, took
        svc.wait(lambda: texts(svc.tg, 111), what="the agent's reply after the timeout")
        assert len(edits(svc.tg)) == 1
