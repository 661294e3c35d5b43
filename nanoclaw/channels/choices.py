"""Cards where a platform has no buttons (Matrix): the options as numbered lines, the choice taken
from a reply ("2") or a reaction (2️⃣) to the card.

Which action a number stands for comes from the host's own record of that card (card_choices, by
the card's message id), never from the card's text or the reply's: a person who edits a quoted card
or writes "2" under something else gets no action. Whoever answers, the action then goes through
the same dispatch as a button anywhere (approvals/actions.py), which decides who may press it.
"""
from __future__ import annotations

import re

from ..db import connected
from ..models import CardChoice
from .base import Card

KEYCAPS = ["1️⃣", "2️⃣", "3️⃣", "4️⃣", "5️⃣", "6️⃣", "7️⃣", "8️⃣", "9️⃣", "🔟"]
_NUMBER = re.compile(r"^\s*#?(\d{1,2})\s*(?:[.):]|$|\s)")


def numbered(card: Card) -> str:
    """The card as text: title, body, one line per option, and how to choose (pure)."""
    lines = [card.title, "", card.body] if card.body else [card.title]
    if card.buttons:
        lines += [""] + [f"{i}. {label}" for i, (label, _action) in enumerate(card.buttons, 1)]
        lines += ["", "Reply to this message with a number, or react with "
                      f"{' '.join(KEYCAPS[:min(len(card.buttons), len(KEYCAPS))])}."]
    return "\n".join(lines).strip()


def number_in(text: str | None) -> int | None:
    """The option a reply or a reaction names: "2", "2.", "#2 please", "2️⃣" (pure); None otherwise."""
    text = (text or "").strip()
    for n, keycap in enumerate(KEYCAPS, 1):
        if text.startswith(keycap) or text.startswith(keycap.replace("\ufe0f", "")):
            return n
    m = _NUMBER.match(text)
    return int(m.group(1)) or None if m else None


def remember(channel: str, chat_id: str, message_id: str, card: Card) -> None:
    if not card.buttons:
        return
    with connected():
        CardChoice.insert(channel=channel, chat_id=chat_id, message_id=message_id,
                          buttons=[list(b) for b in card.buttons]).on_conflict_ignore().execute()


def chosen(channel: str, chat_id: str, message_id: str | None, n: int | None) -> str | None:
    """The action id of option `n` of the card this message is, in this chat; None when the message is
    no card of ours or has no such option."""
    if not message_id or not n:
        return None
    with connected():
        row = CardChoice.get_or_none((CardChoice.channel == channel) & (CardChoice.message_id == message_id)
                                     & (CardChoice.chat_id == chat_id))
    if row is None or not 1 <= n <= len(row.buttons):
        return None
    return row.buttons[n - 1][1]
