"""The `agent` channel: what an asked agent says goes back to the agent that asked, never to a chat.

The asked agent's session is routed to `agent:<asker>><asked>` (ops.link_session); each text it sends
answers the oldest open ask of that pair, inside the envelope, marked as from agent <asked>: as the
asking tool's result while it still waits, else as a message in the asking conversation, which wakes it.
Cards and files have nobody to see them here: they are recorded as sent and go nowhere."""
from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path

from ..channels.base import Card, register
from ..db import database
from ..internet.envelope import wrap
from ..models import utcnow
from ..sessions import store
from ..sessions.store import Target
from . import ops
from .tables import AgentAsk

log = logging.getLogger("nanoclaw.delegation")
SLACK_S = 5  # an answer this close to the asker's deadline goes as a message: the tool may have given up


def deliver_answer(settings, asker: str, asked: str, text: str) -> bool:
    """Hand `text` to the oldest open ask of asker → asked; False when none is open."""
    with database.connection_context():
        ask = (AgentAsk.select().where(AgentAsk.from_folder == asker, AgentAsk.to_folder == asked,
                                       AgentAsk.state == "open").order_by(AgentAsk.id).first())
        if ask is None:
            return False
        claimed = AgentAsk.update(state="answered", answered_at=utcnow()).where(
            AgentAsk.id == ask.id, AgentAsk.state == "open").execute()
        if claimed != 1:
            return False
    path = store.session_path(settings.sessions_dir, asker, ask.from_session)
    wrapped = wrap(text, source=f"agent {asked}", kind="answer from another agent")
    waiting = ask.wait_s and utcnow() < ask.asked_at + timedelta(seconds=ask.wait_s - SLACK_S)
    if waiting:
        ops.answer(path, ask.request_id, True, wrapped)
        return True
    routing = store.routing_of(path)
    store.write_message(path, content={"text": wrapped, "sender": f"agent:{asked}"}, target=routing, kind="agent",
                        trigger=True, message_id=f"asked:{ask.id}")
    ops.wake(asker, ask.from_session)
    return True


@register("agent")
class AgentChannel:
    def __init__(self, settings):
        self.settings = settings

    def send_text(self, target: Target, text: str) -> str:
        asker, _, asked = target.platform_id.partition(">")
        if not deliver_answer(self.settings, asker, asked, text):
            log.info("%s said something to %s with no ask open; it goes nowhere", asked, asker)
        return f"agent-{uuid.uuid4().hex[:12]}"

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        return None

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        return None

    def send_file(self, target: Target, path: Path, caption: str | None) -> str:
        return f"agent-{uuid.uuid4().hex[:12]}"

    def send_card(self, target: Target, card: Card) -> str:
        return f"agent-{uuid.uuid4().hex[:12]}"
