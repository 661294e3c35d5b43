"""/chat: the logged-in owner or admin talks to an agent (the `web` channel, channels/web.py).

The page works without JavaScript (a form that posts and redirects); with it, static/chat.js
sends without a reload and polls /chat/<folder>/messages.json for new and changed lines.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from flask import (Blueprint, abort, current_app, flash, g, jsonify, redirect, render_template, request,
                   send_file, url_for)

from ..approvals import actions
from ..channels import web as channel
from ..channels.events import Action, InboundEvent, iso_utc
from ..db import database
from ..inbound import router
from ..inbound.inbox import safe_name
from ..models import AgentGroup, MessagingGroup, WebMessage, Wiring, audit, utcnow
from ..security import UnsafePath, contained
from . import auth, current_wake

bp = Blueprint("chat", __name__)
bp.before_request(auth.require_login)
log = logging.getLogger("nanoclaw.webchat")


# --- a line typed on the page ----------------------------------------------------------------

def ensure_web_chat(agent: AgentGroup, user_id: str) -> MessagingGroup:
    """The user's web chat with `agent`: a DM wired to it (created on first use).

    The page itself is behind a login, so the chat admits its one sender ('public')."""
    with database.atomic():
        mg, _ = MessagingGroup.get_or_create(channel_type=channel.CHANNEL, platform_id=channel.chat_id_for(user_id, agent.folder),
                                             defaults={"kind": "dm", "name": f"web chat with {agent.name}",
                                                       "unknown_sender_policy": "public"})
        Wiring.get_or_create(messaging_group=mg, agent_group=agent,
                             defaults={"engage_mode": "pattern", "engage_pattern": "."})
    return mg


@dataclass(frozen=True)
class Posted:
    message: WebMessage
    routed: bool
    dropped: str | None
    sessions: list      # router Sessions that were given a trigger
    rows: list = ()     # every line it made on the page: one per attached file, then the text


def keep_upload(settings, upload) -> dict:
    """A file sent from the page, kept under data/web/files/ (the chat shows it; the router's
    InboxFiles fetches it from there like any platform's file): its attachment entry."""
    name = safe_name(upload.filename)
    relative = f"{uuid.uuid4().hex}/{name}"
    target = channel.files_dir(settings) / relative
    target.parent.mkdir(parents=True)
    upload.save(target)
    mime = (upload.mimetype or "").split(";")[0].strip() or None
    return {k: v for k, v in {"kind": "file", "name": name, "mime": mime, "size": target.stat().st_size,
                              "web_file": relative}.items() if v is not None}


def post(settings, agent: AgentGroup, user_id: str, user_name: str, text: str, wake,
         uploads: list | None = None) -> Posted:
    """The user typed `text` (and attached `uploads`) on the page: record it, then route it like
    any inbound message."""
    text = text.strip()[:channel.MAX_TEXT]
    ensure_web_chat(agent, user_id)
    chat_id = channel.chat_id_for(user_id, agent.folder)
    attachments = tuple(keep_upload(settings, u) for u in uploads or [])
    rows = [WebMessage.create(chat_id=chat_id, direction="in", sender=user_name, text="", file_name=a["name"],
                              file_path=str(channel.files_dir(settings) / a["web_file"])) for a in attachments]
    if text or not rows:
        rows.append(WebMessage.create(chat_id=chat_id, direction="in", sender=user_name, text=text))
    row = rows[-1]
    event = InboundEvent(channel=channel.CHANNEL, event_id=uuid.uuid4().hex, chat_id=chat_id, kind="dm",
                         sender_id=user_id, sender_name=user_name, text=text, timestamp=iso_utc(time.time()),
                         message_id=channel.message_ref(row.id), mentioned=True, attachments=attachments)
    woken = []

    def on_wake(session):
        woken.append(session)
        wake(session)
    result = router.route(event, settings, wake=on_wake)
    return Posted(row, bool(result.written), result.dropped, woken, rows)


MAX_UPLOADS = 10  # files in one message from the page


def allow_uploads(settings) -> None:
    """An app-level before_request, ahead of CSRF's (which reads the form): the logged-in chat's
    send takes files up to NANOCLAW_ATTACHMENT_MAX_BYTES each; every other request keeps 1 MiB."""
    if request.endpoint == "chat.send" and auth.session_user() is not None:
        request.max_content_length = settings.attachment_max_bytes * MAX_UPLOADS + 64 * 1024


# a poll asks for rows changed since its last cursor; the overlap covers a write that
# committed with an updated_at just before the cursor was taken
CURSOR_OVERLAP = timedelta(seconds=2)


def agent_or_404(folder: str) -> AgentGroup:
    agent = auth.visible_agents(g.user_id).where(AgentGroup.folder == folder).first()
    if agent is None:
        abort(404)
    return agent


def agent_for_write(folder: str) -> AgentGroup:
    """A POST to another agent's chat is refused (403), not merely hidden."""
    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if agent is None:
        abort(404)
    if not auth.scope_of(g.user_id).covers(agent.id):
        abort(403)
    return agent


def wants_json() -> bool:
    return request.accept_mimetypes.best == "application/json"


@bp.get("/chat")
def index():
    agents = list(auth.visible_agents(g.user_id))
    if len(agents) == 1:
        return redirect(url_for("chat.conversation", folder=agents[0].folder))
    return render_template("chat_index.html", agents=agents)


@bp.get("/chat/<folder>")
def conversation(folder: str):
    agent = agent_or_404(folder)
    rows = channel.transcript(channel.chat_id_for(g.user_id, folder))
    return render_template("chat.html", agent=agent, rows=rows, cursor=utcnow().isoformat(),
                           last_id=rows[-1].id if rows else 0,
                           live=current_wake().connected)


@bp.post("/chat/<folder>")
def send(folder: str):
    agent = agent_for_write(folder)
    text = (request.form.get("text") or "").strip()
    uploads = [f for f in request.files.getlist("file") if f and f.filename][:MAX_UPLOADS]
    if not text and not uploads:
        if wants_json():
            return jsonify(error="the message is empty"), 400
        flash("Write a message first.", "error")
        return redirect(url_for("chat.conversation", folder=folder))
    posted = post(current_app.config["NANOCLAW"], agent, g.user_id, g.user.name or g.user_id, text,
                  wake=current_wake(), uploads=uploads)
    note = None
    if not posted.routed:
        note = f"Not delivered to {agent.name}: {posted.dropped}."
    elif not current_wake().connected:
        note = "Stored. No sandbox runtime runs in this process; the agent answers when the service runs."
    if wants_json():
        return jsonify(message=channel.serialize(posted.message), messages=[channel.serialize(r) for r in posted.rows],
                       note=note)
    if note:
        flash(note, "warn")
    return redirect(url_for("chat.conversation", folder=folder))


@bp.get("/chat/<folder>/messages.json")
def messages(folder: str):
    agent_or_404(folder)
    after = request.args.get("after", default=0, type=int)
    since = None
    if request.args.get("since"):
        try:
            since = datetime.fromisoformat(request.args["since"]) - CURSOR_OVERLAP
        except ValueError:
            return jsonify(error="since must be an ISO time"), 400
    cursor = utcnow().isoformat()
    rows = channel.transcript(channel.chat_id_for(g.user_id, folder), after=after, since=since)
    return jsonify(messages=[channel.serialize(r) for r in rows], cursor=cursor)


@bp.post("/chat/<folder>/action")
def action(folder: str):
    """A button on a card the agent (or a capability) sent to this chat."""
    agent_for_write(folder)
    action_id = request.form.get("action_id", "")
    if actions.parse_action_id(action_id) is None:
        abort(400)
    clicked = Action(channel="web", action_id=action_id, user_id=g.user_id,
                     chat_id=channel.chat_id_for(g.user_id, folder), message_id=request.form.get("message_id"),
                     event_id=uuid.uuid4().hex)
    try:
        answer = actions.dispatch(clicked, current_app.config["NANOCLAW"], current_wake())
    except Exception:
        log.exception("web chat action %s failed", action_id)
        answer = "Something went wrong handling that button."
    audit(g.user_id, "web.decide", action_id, answer=answer, via="chat")
    if wants_json():
        return jsonify(text=answer or "Done.")
    flash(answer or "Done.", "ok")
    return redirect(url_for("chat.conversation", folder=folder))


@bp.get("/chat/<folder>/file/<int:message_id>")
def file(folder: str, message_id: int):
    agent_or_404(folder)
    row = WebMessage.get_or_none(WebMessage.id == message_id,
                                 WebMessage.chat_id == channel.chat_id_for(g.user_id, folder))
    if row is None or not row.file_path:
        abort(404)
    try:
        path = contained(current_app.config["NANOCLAW"].data_dir / "web" / "files", row.file_path)
    except UnsafePath:
        abort(404)
    # never rendered inline: an agent-made HTML file must not run as this site
    return send_file(path, as_attachment=True, download_name=row.file_name)
