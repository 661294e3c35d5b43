"""The local `cli` channel: send one message to an agent as the owner and print its reply.

Works with or without the service running: if no proxy answers on the agent's
socket, this process opens the door itself for the length of the conversation
(and then stops the sandbox it started, since the door closes with it).
"""
from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..outbound import delivery
from ..inbound import router
from ..channels.events import InboundEvent, iso_utc
from ..db import database
from ..models import AgentGroup, MessagingGroup, User, UserRole, Wiring
from ..sandboxes.manager import SandboxManager, mounts_for
from ..operator.skill_offer import offer as skills_offered
from ..proxy import ProxyServer
from ..runtime.select import select_runtime

log = logging.getLogger("nanoclaw.chat")
CHANNEL = "cli"


class ChatError(RuntimeError):
    """A one-line explanation for the user; the command exits 1."""


@dataclass
class Reply:
    text: str
    error: bool


def ensure_cli_chat(agent: AgentGroup) -> MessagingGroup:
    """The agent's local chat: a DM wired to it (created on first use)."""
    with database.atomic():
        mg, _ = MessagingGroup.get_or_create(channel_type=CHANNEL, platform_id=agent.folder,
                                             defaults={"kind": "dm", "name": f"local chat with {agent.name}",
                                                       "unknown_sender_policy": "public"})
        Wiring.get_or_create(messaging_group=mg, agent_group=agent,
                             defaults={"engage_mode": "pattern", "engage_pattern": "."})
    return mg


def owner_identity() -> tuple[str, str]:
    """(platform user id, display name) to send as: the first owner, else a local 'owner'."""
    role = UserRole.select().join(User).where(UserRole.role == "owner").order_by(UserRole.id).first()
    if role:
        return role.user.id.partition(":")[2] or "owner", role.user.name or "Owner"
    return "owner", "Owner"


def proxy_answers(sock: Path) -> bool:
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        try:
            s.connect(str(sock))
            return True
        except OSError:
            return False


def replies_for(session_path: Path, message_id: str) -> tuple[list[Reply], bool]:
    """Delivered replies to `message_id`, and whether the agent has finished with it."""
    conn = delivery.open_session(session_path)
    if conn is None:
        return [], False
    try:
        rows = conn.execute(
            "SELECT o.kind, o.content, d.status FROM ob.messages_out o LEFT JOIN delivered d "
            "ON d.message_out_id = o.id WHERE o.in_reply_to = ? ORDER BY o.seq", (message_id,)).fetchall()
        ack = conn.execute("SELECT status FROM ob.processing_ack WHERE message_id = ?", (message_id,)).fetchone()
    finally:
        conn.close()
    replies, pending = [], False
    for kind, content, status in rows:
        if status not in ("delivered", "failed"):
            pending = True
            continue
        op = json.loads(content)
        if op.get("op") in ("text", "file"):
            replies.append(Reply(op.get("text") or f"[file {op.get('path')}]", error=kind == "system"))
    errored = any(r.error for r in replies)
    finished = not pending and ((ack is not None and ack[0] in ("completed", "failed")) or (errored and ack is None))
    return replies, finished


def chat(settings, folder: str, text: str, *, timeout: float, runtime=None, echo=print) -> list[Reply]:
    """Send `text` to agent `folder` and return its replies once the turn is over."""

    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if agent is None:
        raise ChatError(f"no agent with folder {folder!r}; create one: flask --app app nanoclaw agent create NAME")
    ensure_cli_chat(agent)
    sender_id, sender_name = owner_identity()
    event_id = uuid.uuid4().hex
    event = InboundEvent(channel=CHANNEL, event_id=event_id, chat_id=folder, kind="dm", sender_id=sender_id,
                         sender_name=sender_name, text=text, timestamp=iso_utc(time.time()), mentioned=True)
    woken = []
    result = router.route(event, settings, wake=woken.append)
    if not woken:
        raise ChatError(f"the message was not routed to {folder} ({result.dropped or 'no session'})")
    session = woken[0]
    path = router.session_dir(settings, session)
    message_id = f"{CHANNEL}:{event_id}"

    door = None
    sock = settings.proxy_dir / folder / "proxy.sock"
    if not proxy_answers(sock):
        log.info("no proxy program answers for %s; opening the door in this process", folder)
        door = ProxyServer(settings, lambda: [folder]).start()
        door.ensure_socket(folder)
        door.wait_ready(folder, timeout=10)
    manager = None
    try:
        runtime = runtime or select_runtime(settings, log)
        manager = SandboxManager(settings, runtime, mounts_for=mounts_for(settings), skills_for=skills_offered(settings))
        started = time.monotonic()
        if not manager.wake(folder, session.id):
            raise ChatError(manager.last_error or "the sandbox could not start; see the log above")
        deadline = started + timeout
        shown = 0
        while time.monotonic() < deadline:
            delivery.deliver_session(path, settings)
            replies, finished = replies_for(path, message_id)
            for reply in replies[shown:]:
                echo(reply)
            shown = len(replies)
            if finished:
                return replies
            if not manager.is_running(folder, session.id):
                raise ChatError(f"the sandbox of {folder} stopped before answering; "
                                f"its log: {runtime.logs(manager.name_of(folder, session.id))[-500:]}")
            time.sleep(0.05)
        raise ChatError(f"no reply from {folder} within {timeout:.0f} s; is the model reachable "
                        f"(ANTHROPIC_UPSTREAM_URL={settings.anthropic_upstream_url})? The message stays queued.")
    finally:
        if door is not None:
            if manager is not None:
                manager.stop(folder, session.id)  # its only door is closing
            door.stop()
