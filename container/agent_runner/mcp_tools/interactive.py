"""Interactive tools: ask_user_question (blocks until a person answers or the time is up) and
send_card (a display-only card).

ask_user_question writes a `question` row to outbound.db (ours); the host shows the card and,
on a click, writes an `answer` row (kind 'answer', content.question_id) into inbound.db (the
host's). The tool polls inbound.db for it, marks it completed in processing_ack so the loop does
not take it for a new message, and returns the choice. The wait touches the heartbeat so the
host's stuck detection sees a live sandbox. It runs on a worker thread (blocking = True) with
its own database connections, so the SDK's event loop keeps running meanwhile.
"""
from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone

from .. import session_schema as schema
from ..store import SessionStore
from .context import ToolContext, ToolError, find_answer_row

DEFAULT_TIMEOUT_S = 300
MIN_TIMEOUT_S = 1
SILENT_LIMIT_S = 30 * 60  # the host stops a turn silent this long (lifecycle/sweep.py CEILING_S)
MAX_OPTIONS = 10
MAX_LABEL = 80
POLL_S = 0.1
HEARTBEAT_S = 5.0


def _iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def clamp_timeout(timeout, turn_timeout_s: float | None) -> int:
    """Seconds to wait: the asked timeout, kept inside what one turn may last (with no cap on the
    turn, inside what the host's stuck detection allows a silent turn: 30 min)."""
    try:
        asked = int(float(timeout))
    except (TypeError, ValueError):
        raise ToolError(f"timeout must be a number of seconds, not {timeout!r}") from None
    limit = min(turn_timeout_s, SILENT_LIMIT_S) if turn_timeout_s else SILENT_LIMIT_S
    ceiling = max(MIN_TIMEOUT_S, int(limit) - 30)
    return min(max(asked, MIN_TIMEOUT_S), ceiling)


def clean_options(options) -> list[str]:
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            options = [o for o in options.split("\n")]
    if not isinstance(options, list):
        raise ToolError("options must be a list of short answers, e.g. [\"Yes\", \"No\"]")
    cleaned = [" ".join(str(o).split()) for o in options]
    cleaned = [o for o in cleaned if o]
    if not cleaned:
        raise ToolError("give at least one option")
    if len(cleaned) > MAX_OPTIONS:
        raise ToolError(f"at most {MAX_OPTIONS} options")
    too_long = [o for o in cleaned if len(o) > MAX_LABEL]
    if too_long:
        raise ToolError(f"option {too_long[0][:20]!r}… is longer than {MAX_LABEL} characters; keep buttons short")
    if len(set(cleaned)) != len(cleaned):
        raise ToolError("two options are the same")
    return cleaned


def find_answer(conn, question_id: str) -> tuple[str, dict] | None:
    """The host's answer row for this question, if it has come."""
    return find_answer_row(conn, "question_id", question_id)


def ask_user_question(ctx: ToolContext, title: str, question: str, options, timeout=DEFAULT_TIMEOUT_S) -> str:
    question = (question or "").strip()
    if not question:
        raise ToolError("the question is empty")
    labels = clean_options(options)
    wait_s = clamp_timeout(timeout, ctx.config.turn_timeout_s)
    target = ctx.default_target()
    if target is None:
        raise ToolError("this session has no chat to ask in")
    question_id = uuid.uuid4().hex
    deadline = time.monotonic() + wait_s
    expires = datetime.now(timezone.utc) + timedelta(seconds=wait_s)
    own = ctx.store.sibling()  # this runs on a worker thread: connections of its own
    try:
        own.write_out({"op": "question", "question_id": question_id, "title": (title or "").strip()[:200],
                       "question": question, "options": labels, "expires_at": _iso(expires)},
                      target, in_reply_to=ctx.turn.in_reply_to)
        answer = _wait(own, question_id, deadline)
    finally:
        own.close()
    if answer is None:
        return (f"No answer within {wait_s} s; the question has expired (a late click is refused). "
                "Carry on without the answer, or ask again later.")
    who = answer.get("sender") or "The user"
    return f"{who} answered: {answer.get('answer')!s} (option {int(answer.get('option_index', 0)) + 1} of {len(labels)})."


def _wait(own: SessionStore, question_id: str, deadline: float) -> dict | None:
    conn = None
    last_beat = 0.0
    try:
        while True:
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                own.touch_heartbeat()
                last_beat = now
            if conn is None and own.inbound_path.exists():
                conn = schema.connect(own.inbound_path, readonly=True)
            found = find_answer(conn, question_id) if conn is not None else None
            if found:
                row_id, content = found
                own.complete([row_id])  # read here: the poll loop must not take it for a new message
                return content
            if now >= deadline:
                return None
            time.sleep(min(POLL_S, max(0.0, deadline - now)))
    finally:
        if conn is not None:
            conn.close()


ask_user_question.blocking = True


MAX_CARD_BUTTONS = 10


def clean_card_buttons(buttons) -> list[dict]:
    """[{label, value}] as the agent gave them: strings, short, distinct labels, at most 10."""
    if buttons in (None, "", []):
        return []
    if isinstance(buttons, str):
        try:
            buttons = json.loads(buttons)
        except ValueError:
            raise ToolError("buttons must be a list of {label, value}") from None
    if not isinstance(buttons, list) or len(buttons) > MAX_CARD_BUTTONS:
        raise ToolError(f"buttons must be a list of 1 to {MAX_CARD_BUTTONS} {{label, value}}")
    cleaned, seen = [], set()
    for b in buttons:
        b = {"label": b} if isinstance(b, str) else b
        if not isinstance(b, dict):
            raise ToolError("each button is {label, value}")
        label = " ".join(str(b.get("label") or "").split())
        if not label or len(label) > MAX_LABEL:
            raise ToolError(f"a button label must be 1 to {MAX_LABEL} characters")
        if label.lower() in seen:
            raise ToolError(f"two buttons read {label!r}; make each label different")
        seen.add(label.lower())
        value = b.get("value")
        cleaned.append({"label": label, "value": str(value if value is not None else label)[:200]})
    return cleaned


def send_card(ctx: ToolContext, card, to: str | None = None, buttons=None) -> str:
    from .messaging import _target
    if isinstance(card, str):
        try:
            card = json.loads(card)
        except ValueError:
            card = {"body": card}
    if not isinstance(card, dict):
        raise ToolError("card must be an object with a title and a body")
    title = str(card.get("title") or "").strip()
    body = str(card.get("body") or card.get("text") or card.get("description") or "").strip()
    fields = card.get("fields")
    if isinstance(fields, list):
        lines = [f"{f.get('label') or f.get('name')}: {f.get('value')}" for f in fields if isinstance(f, dict)]
        body = "\n".join([body, *lines]).strip()
    if not title and not body:
        raise ToolError("the card has no title and no body")
    cleaned = clean_card_buttons(buttons if buttons is not None else card.get("buttons"))
    target = _target(ctx, to)
    seq = ctx.store.write_out({"op": "card", "title": title[:200], "body": body, "buttons": cleaned}, target,
                              in_reply_to=ctx.turn.in_reply_to)
    if cleaned:
        return (f"Card sent (message_id {seq}) with {len(cleaned)} button(s). This does not wait: when someone "
                "presses one, you get a new message from them saying which button, on which card.")
    return f"Card sent (message_id {seq})."


SPECS = [
    (ask_user_question, "ask_user_question",
     "Ask the people in this chat a multiple-choice question and WAIT for the answer: a card with one "
     "button per option is shown, and this call returns the option someone picked, or says that nobody "
     "answered within `timeout` seconds (default 300). Use it when you cannot go on without a decision.",
     {"type": "object", "properties": {
         "title": {"type": "string", "description": "A short heading for the card."},
         "question": {"type": "string", "description": "The question, in plain words."},
         "options": {"type": "array", "items": {"type": "string"},
                     "description": f"1 to {MAX_OPTIONS} short answers, one button each."},
         "timeout": {"type": "integer", "description": "Seconds to wait for an answer (default 300)."}},
      "required": ["title", "question", "options"]}),
    (send_card, "send_card",
     "Show a card in the chat: a title and a body, optionally fields [{label, value}] and buttons "
     "[{label, value}]. It does not wait: a press comes back to you later as a new message from the person "
     "who pressed it (\"[button] <label> (value: …) on your card …\"). To wait for a decision, use "
     "ask_user_question instead.",
     {"type": "object", "properties": {
         "card": {"type": "object", "description": "{title, body, fields?: [{label, value}]}",
                  "properties": {"title": {"type": "string"}, "body": {"type": "string"},
                                 "fields": {"type": "array", "items": {"type": "object"}}}},
         "to": {"type": "string", "description": "Optional: a named destination; default: this chat."},
         "buttons": {"type": "array", "description": f"Optional: up to {MAX_CARD_BUTTONS} buttons.",
                     "items": {"type": "object", "properties": {"label": {"type": "string"},
                                                                "value": {"type": "string"}},
                               "required": ["label"]}}},
      "required": ["card"]}),
]
