"""Agent questions: the agent's `ask_user_question` tool → a card in the session's chat →
a click `ncq-<id>:<option index>` → an `answer` row in the session's inbound.db, which the
tool (blocked, polling) reads.

- The outbound row `{"op": "question", question_id, title, question, options, expires_at}` is a
  system op (delivery.register_op): the card goes to the row's own target, which must be the
  session's chat or one of its destinations. Re-applying the row never sends a second card.
- Only the person asked (the sender of the message the agent was answering, from the host's own
  inbound.db) or an owner/admin of the agent may answer; anyone else is told so and nothing is
  written. A click counts only on the card itself (its chat, or the page). The first answer wins;
  the card is edited to show the choice.
- At expires_at (the tool returns then) a housekeeping job edits the card to say it expired,
  once; a later click is told the question expired and nothing reaches the agent. The job runs at
  the next open question's deadline (and once a minute as a safety net), not every few seconds.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import peewee

from ..channels.base import Card, DeliveryError, get_adapter
from ..db import connected, database
from ..inbound import router
from ..lifecycle.housekeeping import register_job, run_by
from ..models import PendingQuestion, Session, User, audit, utcnow
from ..outbound.delivery import register_op
from ..sessions import session_schema as schema
from ..sessions import store
from ..sessions.store import Target
from .actions import NOT_HERE, NotAllowed, on_card, register_action
from .pending import PendingItem, register_pending

log = logging.getLogger("nanoclaw.questions")

MAX_OPTIONS = 10
EXPIRY_CHECK_S = 60.0  # the safety net: the job runs at each question's deadline (next_deadline)
EXPIRED_LINE = "⏱ Expired: no answer came in time."


def parse_expiry(value: str | None, fallback_s: float = 300.0) -> datetime:
    """The tool's UTC ISO deadline as the naive UTC datetime the central DB stores."""
    try:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        return dt.astimezone(timezone.utc).replace(tzinfo=None) if dt.tzinfo else dt
    except (TypeError, ValueError):
        return utcnow() + timedelta(seconds=fallback_s)


def card_for(pq: PendingQuestion) -> Card:
    buttons = tuple((str(label)[:80], f"ncq-{pq.token}:{i}") for i, label in enumerate(pq.options[:MAX_OPTIONS]))
    return Card(pq.title or "Question", pq.question, buttons)


def outcome_text(pq: PendingQuestion, line: str) -> str:
    head = f"{pq.title}\n{pq.question}" if pq.title else pq.question
    return f"{head}\n\n{line}"


def deliver_question(session_path: Path, row, settings) -> str | None:
    """System op "question": record the pending question and show its card (once)."""
    op = row.op
    options = op.get("options")
    if not isinstance(options, list) or not options or not op.get("question") or not op.get("question_id"):
        raise DeliveryError("malformed question (needs question_id, question and options)", permanent=True)
    if row.target not in store.allowed_targets(session_path):
        raise DeliveryError(f"target {row.target} is not this session's chat or destination", permanent=True)
    with connected():
        try:
            with database.atomic():
                pq, created = PendingQuestion.get_or_create(
                    session=session_path.name, question_id=str(op["question_id"])[:64],
                    defaults=dict(title=str(op.get("title") or "")[:255], question=str(op["question"]),
                                  options=[str(o) for o in options[:MAX_OPTIONS]],
                                  channel_type=row.target.channel_type, platform_id=row.target.platform_id,
                                  thread_id=row.target.thread_id, expires_at=parse_expiry(op.get("expires_at")),
                                  asked_user_id=asked_person(session_path, row.in_reply_to)))
        except peewee.IntegrityError:
            raise DeliveryError(f"no session {session_path.name} for this question", permanent=True) from None
        if created:
            run_by("questions.expire", pq.expires_at)
        if pq.card_message_id:
            return pq.card_message_id  # applied again after a restart: the card is out already
        message_id = get_adapter(row.target.channel_type, settings).send_card(row.target, card_for(pq))
        PendingQuestion.update(card_message_id=message_id).where(PendingQuestion.id == pq.id).execute()
    return message_id


register_op("question", deliver_question)


def _edit(settings, pq: PendingQuestion, text: str) -> None:
    if not pq.card_message_id:
        return
    try:
        get_adapter(pq.channel_type, settings).edit_text(Target(pq.channel_type, pq.platform_id, pq.thread_id),
                                                         pq.card_message_id, text)
    except Exception as exc:
        log.warning("could not edit question card %s: %s", pq.card_message_id, exc)


def state(pq: PendingQuestion, now) -> str:
    """answered | expired | open (naive UTC `now`, as stored)."""
    if pq.answered_at is not None:
        return "answered"
    if pq.expired_at is not None or now >= pq.expires_at:
        return "expired"
    return "open"


def mark_expired(settings, pq: PendingQuestion, now) -> bool:
    """Mark one question expired and edit its card, once (False if answered or marked meanwhile)."""
    claimed = (PendingQuestion.update(expired_at=now)
               .where(PendingQuestion.id == pq.id, PendingQuestion.answered_at.is_null(),
                      PendingQuestion.expired_at.is_null()).execute())
    if claimed != 1:
        return False
    _edit(settings, pq, outcome_text(pq, EXPIRED_LINE))
    audit("system", "question.expire", f"ncq-{pq.token}", session=pq.session_id)
    return True


def next_deadline() -> datetime | None:
    """The earliest deadline of a question still open (naive UTC), or None."""
    return (PendingQuestion.select(peewee.fn.MIN(PendingQuestion.expires_at))
            .where(PendingQuestion.answered_at.is_null(), PendingQuestion.expired_at.is_null()).scalar())


@register_job("questions.expire", every_s=EXPIRY_CHECK_S, due=next_deadline)
def expire_questions(settings, _manager=None, now=None) -> int:
    """Edit the cards of questions whose time is up (the tool has returned without an answer)."""
    now = now or utcnow()
    due = list(PendingQuestion.select().where(PendingQuestion.answered_at.is_null(),
                                              PendingQuestion.expired_at.is_null(),
                                              PendingQuestion.expires_at <= now).order_by(PendingQuestion.id))
    marked = sum(1 for pq in due if mark_expired(settings, pq, now))
    if marked:
        log.info("%d question card(s) marked expired", marked)
    return marked


def asked_person(session_path: Path, in_reply_to: str | None) -> str | None:
    """Who the agent is asking: the sender of the message its turn answers, else of the session's
    latest chat message (a task's turn), read from the host's inbound.db; None when nobody wrote."""
    conn = schema.connect(store.inbound_db(session_path), readonly=True)
    try:
        row = conn.execute("SELECT content FROM messages_in WHERE id = ? AND kind = 'chat'",
                           (in_reply_to or "",)).fetchone() or \
            conn.execute("SELECT content FROM messages_in WHERE kind = 'chat' ORDER BY seq DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    try:
        return (json.loads(row[0]).get("sender_id") or None) if row else None
    except (ValueError, AttributeError):
        return None


def may_answer(user_id: str, asked_user_id: str | None, is_admin: bool) -> bool:
    """The person asked, or an owner/admin of the agent; nobody else, whoever else is in the chat."""
    return is_admin or (asked_user_id is not None and user_id == asked_user_id)


def may_answer_question(user_id: str, pq: PendingQuestion) -> bool:
    return may_answer(user_id, pq.asked_user_id, router.is_owner_or_admin(user_id, pq.session.agent_group_id))


@register_action("ncq")
def answer_question(action, ident: str, value: str, settings, wake) -> str:
    pq = PendingQuestion.get_or_none(PendingQuestion.token == ident)
    if pq is None:
        return "This question is no longer open."
    now = utcnow()
    if state(pq, now) == "answered":
        return f"Already answered: {pq.options[pq.answer_index]}."
    if state(pq, now) == "expired":
        mark_expired(settings, pq, now)  # the job may not have come round yet
        return "This question expired; the agent has moved on."
    if not on_card(action, pq.channel_type, pq.platform_id):
        raise NotAllowed(NOT_HERE)
    if not value.isdigit() or int(value) >= len(pq.options):
        return "Unknown choice."
    session = pq.session
    if not may_answer_question(action.user_id, pq):
        asked = f"{display(pq.asked_user_id)} (who was asked)" if pq.asked_user_id else "the agent's admins"
        raise NotAllowed(f"Only {asked} or an admin of this agent can answer this.")
    index = int(value)
    claimed = (PendingQuestion.update(answered_at=now, answered_by=action.user_id, answer_index=index)
               .where(PendingQuestion.id == pq.id, PendingQuestion.answered_at.is_null(),
                      PendingQuestion.expired_at.is_null()).execute())
    if claimed != 1:  # answered, or marked expired, a moment ago
        pq = PendingQuestion.get_by_id(pq.id)
        if pq.answered_at is None:
            return "This question expired; the agent has moved on."
        return f"Already answered: {pq.options[pq.answer_index]}."
    choice = pq.options[index]
    name = display(action.user_id)
    path = router.session_dir(settings, session)
    target = Target(pq.channel_type, pq.platform_id, pq.thread_id)
    store.write_message(path, kind="answer", trigger=True, target=target, message_id=f"answer:{pq.question_id}",
                        content={"text": f"(answer to “{pq.title or pq.question}”) {choice}", "sender": name,
                                 "sender_id": action.user_id, "question_id": pq.question_id,
                                 "option_index": index, "answer": choice})
    audit(action.user_id, "question.answer", f"ncq-{pq.token}", session=session.id, option=index)
    _edit(settings, pq, outcome_text(pq, f"✅ {name} chose: {choice}"))
    wake(session)  # the sandbox waits already; this only matters if it stopped meanwhile
    return f"You chose: {choice}"


def display(user_id: str) -> str:
    user = User.get_or_none(User.id == user_id)
    return (user.name if user and user.name else None) or user_id


# --- the operator page's "Waiting on you" ------------------------------------------------------

@register_pending("questions")
def open_questions(settings, user_id: str):
    rows = (PendingQuestion.select(PendingQuestion, Session).join(Session)
            .where(PendingQuestion.answered_at.is_null(), PendingQuestion.expires_at > utcnow()))
    for pq in rows:
        if not may_answer_question(user_id, pq):
            continue
        card = card_for(pq)
        folder = pq.session.agent_group.folder
        yield PendingItem(key=f"ncq-{pq.token}", kind="Question", agent_folder=folder, created_at=pq.created_at,
                          title=card.title, body=card.body, buttons=card.buttons,
                          details=(("Asked in", f"{pq.channel_type}:{pq.platform_id}"),
                                   ("Open until", local(settings, pq.expires_at))))


def local(settings, naive_utc) -> str:
    return naive_utc.replace(tzinfo=timezone.utc).astimezone(ZoneInfo(settings.timezone)).strftime("%Y-%m-%d %H:%M")
