"""Cards that wait too long expire (SQLite and PostgreSQL, the real Telegram channel against a fake
Bot API): a question card says so at its timeout, once, and a late click writes nothing to the
agent; pending sender (nsa-) and chat (nca-) approvals expire after NANOCLAW_APPROVAL_EXPIRY_HOURS:
the card is edited, the page stops listing them, a late click is told "expired" and does nothing,
and the next message from that sender or chat asks again."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.approvals import chats, common as approvals, pending, questions
from nanoclaw.lifecycle import housekeeping  # noqa: F401  (the jobs registry the expiries register in)
from nanoclaw.models import (AgentGroup, AgentGroupMember, AuditLog, PendingChannelApproval, PendingQuestion,
                             PendingSenderApproval, Wiring, utcnow)
from tests.approvals.test_questions import answers, ask
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import (OLIVIA_AND_ANDY, buttons, cards, click, edits, message, person, post, sandbox_service,
                           telegram_app, toasts)

OWNER, BOB, CARL = person(111, "Olivia"), person(444, "Bob"), person(555, "Carl")
GROUP = -100777


@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, *OLIVIA_AND_ANDY) as app:
        yield app


def page_keys(app, user="telegram:111") -> list[str]:
    return [item.key for item in pending.pending_items(app.config["NANOCLAW"], user).items]


# --- questions ---------------------------------------------------------------------------------

def test_a_question_card_says_it_expired_at_its_timeout_once(app, tg):
    settings = app.config["NANOCLAW"]
    path, _ = ask(app, seconds=30)
    [card] = cards(tg)
    assert questions.expire_questions(settings) == 0  # still open: untouched
    assert edits(tg) == []
    # The job's clock moved past the timeout (not a sleep: a loaded machine would blur the second).
    assert questions.expire_questions(settings, now=utcnow() + timedelta(seconds=31)) == 1
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
    from tests.approvals.test_questions import asks_then_says, setup_owner
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
        assert took < 2 + 2, took  # at its deadline, not at the job's next look
        svc.wait(lambda: texts(svc.tg, 111), what="the agent's reply after the timeout")
        assert len(edits(svc.tg)) == 1


# --- approvals -----------------------------------------------------------------------------------

def cli(app, *args):
    result = app.test_cli_runner().invoke(args=["nanoclaw", *args])
    assert result.exit_code == 0, result.output
    return result


def age(model, hours: float) -> None:
    """Time passes for every pending row of `model` (its card went out `hours` ago)."""
    then = utcnow() - timedelta(hours=hours)
    model.update(created_at=then, **({"updated_at": then} if model is PendingChannelApproval else {})).execute()


def test_a_sender_approval_nobody_decides_expires_and_the_next_message_asks_again(app, tg):
    settings = app.config["NANOCLAW"]
    assert settings.approval_expiry_hours == 72
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "can you book a table?", title="Team", mention=True))
    [card] = cards(tg)
    [row] = PendingSenderApproval.select()
    assert page_keys(app) == [f"nsa-{row.token}"]

    age(PendingSenderApproval, 71)
    assert approvals.expire_approvals(settings) == 0 and page_keys(app) == [f"nsa-{row.token}"]  # not yet
    age(PendingSenderApproval, 72.1)
    assert page_keys(app) == []  # the page stops showing it at once
    assert approvals.expire_approvals(settings) == 1
    [edit] = edits(tg)
    assert (str(edit["chat_id"]), edit["message_id"]) == ("111", card["_message_id"])
    assert edit["text"] == ("⏱ Expired: nobody decided within 72 h, so Bob (telegram:444) was not let in to talk to "
                            "Andy in the Telegram group 'Team'. If they write again, you will be asked again.")
    assert not PendingSenderApproval.select().exists()
    assert AuditLog.select().where(AuditLog.action == "approval.sender.expire").count() == 1

    post(app, click(buttons(card)["✅ Allow"], OWNER, card))  # the owner finds the old card and clicks
    assert toasts(tg)[-1] == "This request expired."
    assert not AgentGroupMember.select().where(AgentGroupMember.user == "telegram:444").exists()
    assert app.woken == [] and len(edits(tg)) == 1  # nothing replayed, the card not edited again

    post(app, message(GROUP, BOB, "hello? table for 4", title="Team", mention=True))
    assert len(cards(tg)) == 2 and "table for 4" in cards(tg)[-1]["text"]  # asked again
    [fresh] = PendingSenderApproval.select()
    post(app, click(buttons(cards(tg)[-1])["✅ Allow"], OWNER, cards(tg)[-1]))
    assert toasts(tg)[-1] == "Allowed: Bob can talk to Andy now."
    assert app.woken == ["andy"] and fresh.id != row.id


def test_a_click_on_a_card_past_its_time_expires_it_before_the_job_does(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "can you book a table?", title="Team", mention=True))
    [card] = cards(tg)
    age(PendingSenderApproval, 80)
    post(app, click(buttons(card)["✅ Allow"], OWNER, card))
    assert toasts(tg)[-1] == "This request expired."
    assert [e["text"][:10] for e in edits(tg)] == ["⏱ Expired:"]
    assert not PendingSenderApproval.select().exists() and not AgentGroupMember.select().where(
        AgentGroupMember.user == "telegram:444").exists()
    post(app, click(buttons(card)["🚫 Deny"], OWNER, card))
    assert toasts(tg)[-1] == "This request expired." and len(edits(tg)) == 1


def test_a_message_while_an_old_request_waits_asks_again_at_once(app, tg):
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "first", title="Team", mention=True))
    age(PendingSenderApproval, 73)  # the job has not come round yet
    post(app, message(GROUP, BOB, "second", title="Team", mention=True))
    assert len(cards(tg)) == 2 and [e["text"][:10] for e in edits(tg)] == ["⏱ Expired:"]
    assert PendingSenderApproval.select().count() == 1


def test_a_new_chat_approval_expires_and_the_chat_asks_again(app, tg):
    settings = app.config["NANOCLAW"]
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, BOB, "anyone here?", title="Lab", mention=True))
    [card] = cards(tg)
    [row] = PendingChannelApproval.select()
    assert page_keys(app) == [f"nca-{row.token}"]
    age(PendingChannelApproval, 73)
    assert page_keys(app) == []
    assert approvals.expire_approvals(settings) == 1
    assert edits(tg)[-1]["text"] == ("⏱ Expired: nobody decided within 72 h, so no agent answers in the Telegram "
                                     "group 'Lab'. If someone writes there again, you will be asked again.")
    post(app, click(buttons(card)["Bea"], OWNER, card))
    assert toasts(tg)[-1] == "This request expired."
    assert not Wiring.select().join(AgentGroup).where(AgentGroup.folder == "bea").exists()
    post(app, message(GROUP, BOB, "hello?", title="Lab", mention=True))
    assert len(cards(tg)) == 2


def test_an_abandoned_naming_expires_and_the_approvers_next_dm_is_an_ordinary_message(app, tg):
    settings = app.config["NANOCLAW"]
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, BOB, "help with research", title="Lab", mention=True))
    [card] = cards(tg)
    post(app, click(buttons(card)["➕ Create new"], OWNER, card))
    assert PendingChannelApproval.get().state == "naming"
    age(PendingChannelApproval, 73)  # the owner never replied with a name
    post(app, message(111, OWNER, "what's the weather?"))  # days later, to their own agent
    assert not AgentGroup.select().where(AgentGroup.name == "what's the weather?").exists()
    assert not PendingChannelApproval.select().exists()
    assert edits(tg)[-1]["text"].startswith("⏱ Expired:")
    assert app.woken == ["andy"]  # Andy got the message
    assert approvals.expire_approvals(settings) == 0


def test_the_expiry_period_is_a_setting(make_settings):
    assert make_settings(NANOCLAW_APPROVAL_EXPIRY_HOURS="6").approval_expiry_hours == 6
    from nanoclaw.config import SettingsError
    with pytest.raises(SettingsError, match="NANOCLAW_APPROVAL_EXPIRY_HOURS"):
        make_settings(NANOCLAW_APPROVAL_EXPIRY_HOURS="0")


def test_the_page_form_of_an_expired_new_chat_does_nothing(app, tg):
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, BOB, "help with research", title="Lab", mention=True))
    [row] = PendingChannelApproval.select()
    age(PendingChannelApproval, 73)
    answer = chats.create_from_page("telegram:111", row.token, {"name": "Lab Helper"}, app.config["NANOCLAW"], NO_WAKE)
    assert (answer.ok, answer.message) == (False, "This request expired.")
    assert not AgentGroup.select().where(AgentGroup.name == "Lab Helper").exists()
