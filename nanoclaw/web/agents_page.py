"""The operator's page, per agent: /admin/agents (the list) and /admin/agents/<folder> (its
instructions, extra mounts, destinations and wirings), with the writes of the mounts and
destinations. Routes of the admin blueprint (admin.py), each write limited to the person's scope."""
from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for

from ..mounts import AllowlistError, current_allowlist, declared_mounts
from ..models import AgentDestination, MessagingGroup, Session, Wiring
from ..sessions import destinations
from . import auth
from .admin import agent_for_write, agent_or_404, bp, forbidden, settings
from .changes import ChangeRefused, Forbidden, add_mount, clean_why, remove_mount

PLATFORMS = ("telegram", "slack", "discord", "whatsapp", "web")


# --- agents and their mounts ------------------------------------------------------------------

@bp.get("/admin/agents")
def agents():
    rows = [(a, a.wirings.count(), Session.select().where(Session.agent_group == a).count(), declared_mounts(a))
            for a in auth.visible_agents(g.user_id)]
    return render_template("agents.html", rows=rows)


@bp.get("/admin/agents/<folder>")
def agent(folder: str):
    a = agent_or_404(folder)
    try:
        allowlist, allowlist_error = current_allowlist(settings().mount_allowlist), None
    except AllowlistError as exc:
        allowlist, allowlist_error = None, str(exc)
    wirings = (Wiring.select(Wiring, MessagingGroup).join(MessagingGroup).where(Wiring.agent_group == a)
               .order_by(MessagingGroup.channel_type, MessagingGroup.platform_id))
    added = {r.name for r in AgentDestination.select().where(AgentDestination.agent_group == a)}
    places = [(name, target, label, name in added) for name, (target, label) in destinations.destinations_of(a.id).items()]
    return render_template("agent.html", agent=a, mounts=declared_mounts(a), wirings=list(wirings),
                           allowlist=allowlist, allowlist_error=allowlist_error, destinations=places,
                           channels=PLATFORMS)


@bp.post("/admin/agents/<folder>/destinations")
def destination_add(folder: str):
    a = agent_for_write(folder)
    f = request.form
    name = f.get("name", "").strip()
    try:
        destinations.add(g.user_id, a, name, f.get("channel", ""), f.get("chat_id", ""), f.get("thread"),
                         why=clean_why(f.get("why")))
    except destinations.DestinationError as exc:
        flash(f"Destination refused: {exc}", "error")
    else:
        synced = destinations.sync_agent(settings().sessions_dir, a)
        flash(f"{a.name} may send to “{name}” now ({synced} conversation(s) updated).", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#destinations")


@bp.post("/admin/agents/<folder>/destinations/<name>/remove")
def destination_remove(folder: str, name: str):
    a = agent_for_write(folder)
    try:
        destinations.remove(g.user_id, a, name, why=clean_why(request.form.get("why")))
    except destinations.DestinationError as exc:
        flash(str(exc), "error")
    else:
        destinations.sync_agent(settings().sessions_dir, a)
        flash(f"{a.name} can no longer send to “{name}”.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#destinations")


@bp.post("/admin/agents/<folder>/mounts")
def mount_add(folder: str):
    a = agent_for_write(folder)
    readwrite = request.form.get("mode") == "rw"
    try:
        approved = add_mount(g.user_id, settings(), a, request.form.get("host_path", ""),
                             request.form.get("name", ""), readwrite, why=request.form.get("why"),
                             scope=auth.scope_of(g.user_id))
    except Forbidden as exc:
        return forbidden(str(exc))
    except ChangeRefused as exc:
        flash(f"Mount refused: {exc}", "error")
    else:
        mode = "read-write: it can create, change and delete files there" if readwrite else "read-only"
        flash(f"{a.folder} will see {approved.host_path} at /workspace/extra/{approved.name} ({mode}) "
              "from its next sandbox start.", "warn" if readwrite else "ok")
    return redirect(url_for("admin.agent", folder=folder))


@bp.post("/admin/agents/<folder>/mounts/<name>/remove")
def mount_remove(folder: str, name: str):
    a = agent_for_write(folder)
    try:
        remove_mount(g.user_id, a, name, why=request.form.get("why"), scope=auth.scope_of(g.user_id))
    except ChangeRefused as exc:
        flash(str(exc), "error")
    else:
        flash(f"Removed mount {name!r} from {folder} (from its next sandbox start).", "ok")
    return redirect(url_for("admin.agent", folder=folder))
