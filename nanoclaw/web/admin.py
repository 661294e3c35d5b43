"""The operator's page (behind a login, every form CSRF-protected):

/admin            Waiting on you: every pending item, newest first, with the chat card's buttons
                  and the item's small forms (modify a proposal, name a new agent for a chat)
/admin/agents     agents, their extra mounts (read-only by default), destinations and wirings
/admin/wirings    create, change, remove wirings
/admin/sessions   sessions with their sandbox state
/admin/tasks      scheduled work
/admin/audit      the audit log
"""
from __future__ import annotations

import dataclasses
import logging
import uuid
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from flask import (Blueprint, abort, current_app, flash, g, jsonify, make_response, redirect, render_template,
                   request, url_for)

from ..sandboxes import setup as runtime_setup
from ..approvals import actions, common as approvals, pending
from ..mounts import declared_mounts
from ..channels.events import Action
from ..inbound import stopping
from ..sessions import store
from ..models import (CHAT_KINDS, ENGAGE_MODES, IGNORED_POLICIES, SENDER_SCOPES, UNKNOWN_SENDER_POLICIES, VOICE_MODES,
                      AgentGroup, AuditLog, MessagingGroup, ScheduledTask, Session, Wiring, audit)
from . import auth, current_manager, current_wake, sandbox_state
from .changes import ChangeRefused, Forbidden, WiringForm, clean_why, field_diff, remove_wiring, save_wiring
from ..tasks.scheduling import TaskError, set_state

bp = Blueprint("admin", __name__)
bp.before_request(auth.require_login)
log = logging.getLogger("nanoclaw.admin")

AUDIT_PAGE = 50


def settings():
    return current_app.config["NANOCLAW"]


def manager():
    return current_manager()


def agent_or_404(folder: str) -> AgentGroup:
    agent = auth.visible_agents(g.user_id).where(AgentGroup.folder == folder).first()
    if agent is None:
        abort(404)
    return agent


def visible_ids() -> list[int]:
    return [a.id for a in auth.visible_agents(g.user_id)]


def forbidden(reason: str):
    """A write outside this person's scope: 403 with the reason, and nothing changed."""
    log.warning("refused %s %s for %s: %s", request.method, request.path, g.user_id, reason)
    return render_template("error.html", title="Not allowed", message=f"Not allowed: {reason}."), 403


def writable_agent(agent_id: int) -> None:
    """Abort with 403 unless this person administers the agent (the object exists: else 404)."""
    if not auth.scope_of(g.user_id).covers(agent_id):
        abort(make_response(*forbidden("you administer other agents, not this one")))


def agent_for_write(folder: str) -> AgentGroup:
    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if agent is None:
        abort(404)
    writable_agent(agent.id)
    return agent


@bp.app_template_filter("local")
def local_time(value) -> str:
    """A stored UTC time in the user's timezone (TZ), as the agent sees it."""
    if value is None:
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(ZoneInfo(current_app.config["NANOCLAW"].timezone)).strftime("%Y-%m-%d %H:%M")


@bp.app_context_processor
def page_context():
    return {"tz": current_app.config["NANOCLAW"].timezone, "me": getattr(g, "user", None)}


@bp.get("/")
def home():
    return redirect(url_for("admin.waiting"))


# --- Waiting on you ---------------------------------------------------------------------------

@bp.get("/admin")
def waiting():
    return render_waiting()


def render_waiting(refused: dict | None = None):
    """refused: a form the handler turned down ({form, ident, message, values}); it is shown next to
    that form with what was typed, or at the top when its item is gone (decided meanwhile)."""
    listing = pending.pending_items(settings(), g.user_id)
    placed = refused is not None and any(f.name == refused["form"] and f.ident == refused["ident"]
                                         for item in listing.items for f in item.forms)
    return render_template("waiting.html", items=listing.items, problems=listing.problems,
                           providers=pending.providers(), refused=refused if placed else None,
                           refused_elsewhere=refused["message"] if refused and not placed else None)


FORM_META = ("csrf_token", "form", "ident")


@bp.post("/admin/form")
def item_form():
    """An item's small form, handled by the capability that registered it (pending.register_form).
    A refusal changes nothing: the page comes back with the reason next to the form (422)."""
    name, ident = request.form.get("form", ""), request.form.get("ident", "")
    if not name or not ident:
        abort(400)
    values = {k: v for k, v in request.form.items() if k not in FORM_META}
    try:
        answer = pending.submit_form(name, ident, values, g.user_id, settings(), current_wake())
    except actions.NotAllowed as exc:
        return forbidden(str(exc).rstrip("."))
    except Exception:
        log.exception("form %s for %s from the page failed", name, ident)
        answer = pending.FormAnswer(False, "Something went wrong handling that form; see the log.")
    if not answer.ok:
        return render_waiting(dict(form=name, ident=ident, message=answer.message, values=values)), 422
    audit(g.user_id, "web.form", f"{name}:{ident}")
    flash(answer.message, "ok")
    return redirect(url_for("admin.waiting"))


@bp.get("/admin/folder-preview.json")
def folder_preview():
    """The folder a new agent would get for this name (or typed folder): the rule that creates it."""
    wanted = (request.args.get("folder") or "").strip() or (request.args.get("name") or "").strip()
    if not wanted:
        return jsonify(folder=None)
    try:
        return jsonify(folder=approvals.free_folder(wanted))
    except ValueError:
        return jsonify(folder=None, error="no letters or digits to make a folder from")


@bp.post("/admin/decide")
def decide():
    """A button on the page: the same action id as the chat card, through the same handler."""
    action_id = request.form.get("action_id", "")
    if actions.parse_action_id(action_id) is None:
        abort(400)
    action = Action(channel="web", action_id=action_id, user_id=g.user_id, event_id=uuid.uuid4().hex, origin="page",
                    user_name=g.user.name)
    try:
        answer = actions.dispatch(action, settings(), current_wake(), refusals=True)
    except actions.NotAllowed as exc:
        return forbidden(str(exc).rstrip("."))
    except Exception:
        log.exception("action %s from the page failed", action_id)
        answer = None
        flash("Something went wrong handling that decision; see the log.", "error")
    else:
        flash(answer or "Done.", "ok")
    audit(g.user_id, "web.decide", action_id, answer=answer)
    return redirect(url_for("admin.waiting"))


@bp.post("/admin/reply")
def reply():
    prefix, ident, text = (request.form.get(k, "") for k in ("prefix", "ident", "text"))
    if not prefix or not ident or not text.strip():
        flash("Write a reply first.", "error")
        return redirect(url_for("admin.waiting"))
    try:
        answer = pending.reply(prefix, ident, text.strip(), g.user_id, settings(), current_wake())
    except actions.NotAllowed as exc:
        return forbidden(str(exc).rstrip("."))
    except Exception:
        log.exception("reply to %s-%s from the page failed", prefix, ident)
        flash("Something went wrong sending that reply; see the log.", "error")
    else:
        flash(answer or "Sent.", "ok")
        audit(g.user_id, "web.reply", f"{prefix}-{ident}")
    return redirect(url_for("admin.waiting"))


# --- wirings ----------------------------------------------------------------------------------

def form_choices() -> dict:
    return dict(kinds=CHAT_KINDS, engage_modes=ENGAGE_MODES, sender_scopes=SENDER_SCOPES,
                ignored_policies=IGNORED_POLICIES, unknown_policies=UNKNOWN_SENDER_POLICIES, voice_modes=VOICE_MODES)


def wiring_or_404(wiring_id: int) -> Wiring:
    w = Wiring.get_or_none(Wiring.id == wiring_id)
    if w is None or w.agent_group_id not in visible_ids():
        abort(404)
    return w


def wiring_for_write(wiring_id: int) -> Wiring:
    w = Wiring.get_or_none(Wiring.id == wiring_id)
    if w is None:
        abort(404)
    writable_agent(w.agent_group_id)
    return w


def wiring_form() -> WiringForm:
    f = request.form
    engage = f.get("engage") or None
    # the pattern box only counts for engage 'pattern' (switching away from it must not need clearing it)
    return WiringForm(channel=f.get("channel", ""), chat_id=f.get("chat_id", ""), kind=f.get("kind") or None,
                      engage=engage, pattern=(f.get("pattern") or None) if engage == "pattern" else None,
                      sender_scope=f.get("sender_scope") or "all", ignored=f.get("ignored") or "drop",
                      unknown_senders=f.get("unknown_senders") or None, name=f.get("name") or None,
                      why=f.get("why"), voice=f.get("voice") or None, stream=f.get("stream") or None,
                      while_busy=f.get("while_busy") or None)


@bp.get("/admin/wirings")
def wirings():
    rows = (Wiring.select(Wiring, MessagingGroup, AgentGroup).join(MessagingGroup).switch(Wiring).join(AgentGroup)
            .where(Wiring.agent_group.in_(visible_ids() or [-1]))
            .order_by(MessagingGroup.channel_type, MessagingGroup.platform_id, AgentGroup.folder))
    return render_template("wirings.html", wirings=list(rows), agents=list(auth.visible_agents(g.user_id)),
                           **form_choices())


@bp.post("/admin/wirings")
def wiring_create():
    a = agent_for_write(request.form.get("agent", ""))
    try:
        w, created = save_wiring(g.user_id, a, wiring_form(), scope=auth.scope_of(g.user_id))
    except Forbidden as exc:
        return forbidden(str(exc))
    except ChangeRefused as exc:
        flash(f"Not wired: {exc}", "error")
        return redirect(url_for("admin.wirings"))
    mg = w.messaging_group
    flash(f"{'Wired' if created else 'Updated'} {mg.channel_type}:{mg.platform_id} → {a.folder}.", "ok")
    return redirect(url_for("admin.wirings"))


@bp.get("/admin/wirings/<int:wiring_id>")
def wiring_edit(wiring_id: int):
    w = wiring_or_404(wiring_id)
    return render_template("wiring_edit.html", w=w, mounts=declared_mounts(w.agent_group), **form_choices())


@bp.post("/admin/wirings/<int:wiring_id>")
def wiring_update(wiring_id: int):
    w = wiring_for_write(wiring_id)
    mg = w.messaging_group
    form = wiring_form()
    form = dataclasses.replace(form, channel=mg.channel_type, chat_id=mg.platform_id)
    try:
        save_wiring(g.user_id, w.agent_group, form, scope=auth.scope_of(g.user_id))
    except Forbidden as exc:
        return forbidden(str(exc))
    except ChangeRefused as exc:
        flash(f"Not changed: {exc}", "error")
        return redirect(url_for("admin.wiring_edit", wiring_id=wiring_id))
    flash(f"Updated {mg.channel_type}:{mg.platform_id} → {w.agent_group.folder}.", "ok")
    return redirect(url_for("admin.wirings"))


@bp.post("/admin/wirings/<int:wiring_id>/remove")
def wiring_remove(wiring_id: int):
    w = wiring_for_write(wiring_id)
    label = f"{w.messaging_group.channel_type}:{w.messaging_group.platform_id} → {w.agent_group.folder}"
    try:
        remove_wiring(g.user_id, w, why=request.form.get("why"), scope=auth.scope_of(g.user_id))
    except Forbidden as exc:
        return forbidden(str(exc))
    flash(f"Removed {label}.", "ok")
    return redirect(url_for("admin.wirings"))


# --- sessions ---------------------------------------------------------------------------------

@bp.get("/admin/sessions")
def sessions():
    mgr = manager()
    rows = []
    query = (Session.select(Session, AgentGroup).join(AgentGroup).where(Session.agent_group.in_(visible_ids() or [-1]))
             .order_by(Session.last_active_at.desc()).limit(200))
    for s in query:
        state, obs = sandbox_state.session_state(mgr, s.agent_group.folder, s.id, settings().sessions_dir)
        mg = s.messaging_group_id and MessagingGroup.get_or_none(MessagingGroup.id == s.messaging_group_id)
        rows.append((s, mg, state, obs))
    return render_template("sessions.html", rows=rows, explain=sandbox_state.EXPLAIN, has_runtime=mgr is not None,
                           build=runtime_setup.BUILD)


def session_for_write(session_id: str) -> Session:
    """The session, when this person may change its agent (404 or 403 otherwise)."""
    s = Session.get_or_none(Session.id == session_id)
    if s is None:
        abort(404)
    writable_agent(s.agent_group_id)
    return s


@bp.post("/admin/sessions/<session_id>/stop")
def session_stop(session_id: str):
    s = session_for_write(session_id)
    mgr = manager()
    if mgr is None:
        flash("This process does not run the sandboxes; stop it where the service runs.", "error")
    else:
        before = sandbox_state.session_state(mgr, s.agent_group.folder, s.id, settings().sessions_dir)[0]
        mgr.stop(s.agent_group.folder, s.id)
        audit(g.user_id, "session.stop", f"{s.agent_group.folder}/{s.id}", via="web",
              why=clean_why(request.form.get("why")), diff=field_diff({"sandbox": before}, {"sandbox": "stopped"}))
        flash(f"Stopped the sandbox of {s.agent_group.folder}/{s.id}; the next message starts a new one.", "ok")
    return redirect(url_for("admin.sessions"))


@bp.post("/admin/sessions/<session_id>/stop-turn")
def session_stop_turn(session_id: str):
    s = session_for_write(session_id)
    path = store.session_path(settings().sessions_dir, s.agent_group.folder, s.id)
    turn = stopping.stop_session(path, settings())
    if turn is None:
        flash(f"Nothing is running in {s.agent_group.folder}/{s.id}.", "warn")
    else:
        audit(g.user_id, "session.stop_turn", f"{s.agent_group.folder}/{s.id}", via="web",
              why=clean_why(request.form.get("why")), diff=field_diff({"turn": "running"}, {"turn": "stopped"}))
        flash(f"Stopped the turn in {s.agent_group.folder}/{s.id}; the sandbox stays up.", "ok")
    return redirect(url_for("admin.sessions"))


# --- tasks ------------------------------------------------------------------------------------

@bp.get("/admin/tasks")
def tasks():
    rows = (ScheduledTask.select(ScheduledTask, AgentGroup).join(AgentGroup)
            .where(ScheduledTask.agent_group.in_(visible_ids() or [-1]))
            .order_by(ScheduledTask.status, ScheduledTask.next_run_at.asc(nulls="LAST")).limit(200))
    return render_template("tasks.html", tasks=list(rows))


@bp.post("/admin/tasks/<task_id>/<any(pause, resume, cancel):action>")
def task_action(task_id: str, action: str):
    task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
    if task is None:
        abort(404)
    writable_agent(task.agent_group_id)
    try:
        set_state(task.agent_group, task.id, action, tz=settings().timezone)
    except TaskError as exc:
        flash(str(exc), "error")
    else:
        after = ScheduledTask.get_by_id(task.id)
        audit(g.user_id, f"task.{action}", task.id, via="web", why=clean_why(request.form.get("why")),
              diff=field_diff({"status": task.status}, {"status": after.status}))
        flash(f"Task {task.id} {dict(pause='paused', resume='resumed', cancel='cancelled')[action]}.", "ok")
    return redirect(url_for("admin.tasks"))


# --- audit log --------------------------------------------------------------------------------

@bp.get("/admin/audit")
def audit_log():
    if auth.admin_scope(g.user_id) is not None:
        return render_template("audit.html", rows=[], restricted=True, q="", older=None)
    q = (request.args.get("q") or "").strip()
    before = request.args.get("before", type=int)
    query = AuditLog.select().order_by(AuditLog.id.desc())
    if q:
        query = query.where(AuditLog.action.contains(q) | AuditLog.actor.contains(q) | AuditLog.target.contains(q))
    if before:
        query = query.where(AuditLog.id < before)
    rows = list(query.limit(AUDIT_PAGE + 1))
    older = rows[AUDIT_PAGE - 1].id if len(rows) > AUDIT_PAGE else None
    return render_template("audit.html", rows=rows[:AUDIT_PAGE], restricted=False, q=q, older=older)
