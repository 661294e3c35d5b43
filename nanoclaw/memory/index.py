"""What goes into the history index, and when: a message the router wrote into one of the agent's
sessions (the router admits only senders the chat's policy lets in; a stranger's or a pending
sender's message is never written, so never indexed), and a text the host delivered for the agent.
Cards, system rows and tool answers are never indexed. Also: the memory snapshot's options for each
message a turn reads, and the daily pruning of the index."""
from __future__ import annotations

import logging

from ..db import connected
from ..inbound import router
from ..lifecycle.housekeeping import register_job
from ..outbound import delivery
from ..sessions import session_schema as schema
from ..sessions import store
from . import history, notes, snapshot

log = logging.getLogger("nanoclaw.memory")


@router.on_written
def index_message(event, session, path, message_id: str) -> None:
    text = event.text or ""
    names = [a.get("name") for a in (event.attachments or []) if isinstance(a, dict) and a.get("name")]
    if names:
        text = (text + "\n" if text else "") + "[sent " + ", ".join(names) + "]"
    with connected():
        history.add(session.agent_group.folder, event.channel, event.chat_id, event.thread_id, session.id,
                    message_id, event.user_id, event.sender_name or "", event.timestamp, text)


def index_reply(session_path, row, platform_id) -> None:
    if row.op.get("op") != "text":
        return
    with connected():
        history.add(session_path.parent.name, row.target.channel_type, row.target.platform_id, row.target.thread_id,
                    session_path.name, f"out:{row.id}", f"agent:{session_path.parent.name}", "",
                    schema.utc_now_iso(), str(row.op.get("text") or ""))


delivery.on_sent(index_reply)
store.provide_options(snapshot.options_for)


@register_job("history.index", every_s=60, first_after_s=30)
def index_new(settings, manager, now=None) -> int:
    """Keep the pending part of the search index small (a search indexes what is left first)."""
    return history.catch_up()


@register_job("history.prune", every_s=24 * 3600, first_after_s=300)
def prune(settings, manager, now=None) -> int:
    removed = history.prune(settings.keep_history_days)
    changes = notes.prune_changes(settings.keep_history_days)
    if removed or changes:
        log.info("removed %d message(s) from the history index and %d memory change record(s) older than %d days",
                 removed, changes, settings.keep_history_days)
    return removed
