"""Links between agents and the hooks that wake one, on the agent's page (issue 65): who this agent may
ask and who may ask it; making or removing a link needs the owner or an admin of both agents (`nanoclaw
/delegation`); a hook can be disabled, enabled or removed by the owner. Routes of the admin blueprint,
each write checked against the person's scope and audited."""
from __future__ import annotations

from flask import abort, flash, g, redirect, request, url_for

from ..delegation.tables import MODES, AgentLink
from ..hooks import registry
from ..hooks.tables import Webhook
from ..models import AgentGroup, Wiring, audit
from . import auth
from .admin import agent_for_write, bp


def links_of(agent: AgentGroup) -> dict:
    """What the page shows: links from and to this agent, the agents it could be linked to, its hooks."""
    out = list(AgentLink.select().where(AgentLink.from_agent == agent.id).order_by(AgentLink.id))
    into = list(AgentLink.select().where(AgentLink.to_agent == agent.id).order_by(AgentLink.id))
    others = [a for a in AgentGroup.select().order_by(AgentGroup.folder) if a.id != agent.id]
    hooks = list(Webhook.select().where(Webhook.agent_group == agent.id).order_by(Webhook.name))
    chats = [w.messaging_group for w in Wiring.select().where(Wiring.agent_group == agent.id)]
    return {"links_out": out, "links_in": into, "link_targets": others, "link_modes": MODES, "hooks": hooks,
            "hook_chats": chats, "hook_schemes": registry.SCHEMES}


def _both(asker: AgentGroup, asked: AgentGroup) -> None:
    scope = auth.scope_of(g.user_id)
    if not (scope.covers(asker.id) and scope.covers(asked.id)):
        abort(403)


@bp.post("/admin/agents/<folder>/links")
def link_add(folder: str):
    asker = agent_for_write(folder)
    asked = AgentGroup.get_or_none(AgentGroup.folder == (request.form.get("to") or ""))
    mode = request.form.get("mode") or ""
    if asked is None or asked.id == asker.id or mode not in MODES:
        flash("Not linked: choose another agent and a mode.", "error")
        return redirect(url_for("admin.agent", folder=folder) + "#links")
    _both(asker, asked)
    link, created = AgentLink.get_or_create(from_agent=asker.id, to_agent=asked.id,
                                            defaults={"mode": mode, "created_by": g.user_id})
    if not created:
        AgentLink.update(mode=mode).where(AgentLink.id == link.id).execute()
    audit(g.user_id, "agent.link", f"link:{asker.folder}>{asked.folder}", mode=mode,
          before=None if created else link.mode)
    flash(f"{asker.folder} may ask {asked.folder} ({mode}); ask_agent is offered from its next sandbox start.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#links")


@bp.post("/admin/agents/<folder>/links/<to>/remove")
def link_remove(folder: str, to: str):
    asker = agent_for_write(folder)
    asked = AgentGroup.get_or_none(AgentGroup.folder == to)
    if asked is None:
        abort(404)
    _both(asker, asked)
    if AgentLink.delete().where(AgentLink.from_agent == asker.id, AgentLink.to_agent == asked.id).execute():
        audit(g.user_id, "agent.unlink", f"link:{asker.folder}>{asked.folder}")
        flash(f"{asker.folder} can no longer ask {asked.folder}.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#links")


@bp.post("/admin/agents/<folder>/hooks")
def hook_add(folder: str):
    agent = agent_for_write(folder)
    if not auth.is_owner(g.user_id):
        abort(403)
    form = request.form
    channel, _, chat_id = (form.get("chat") or "").partition(" ")
    try:
        registry.add(g.user_id, (form.get("name") or "").strip(), agent, channel, chat_id, form.get("template") or "",
                     form.get("scheme") or "", (form.get("secret_env") or "").strip(),
                     [e.strip() for e in (form.get("events") or "").split(",") if e.strip()])
    except registry.HookRefused as exc:
        flash(f"Not added: {exc}", "error")
    else:
        flash(f"Added: POST /hooks/{form.get('name')} wakes {agent.folder}.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#links")


@bp.post("/admin/agents/<folder>/hooks/<name>/<verb>")
def hook_change(folder: str, name: str, verb: str):
    agent = agent_for_write(folder)
    if not auth.is_owner(g.user_id):
        abort(403)
    hook = Webhook.get_or_none(Webhook.name == name, Webhook.agent_group == agent.id)
    if hook is None or verb not in ("disable", "enable", "remove"):
        abort(404)
    if verb == "remove":
        hook.delete_instance()
    else:
        Webhook.update(enabled=verb == "enable").where(Webhook.id == hook.id).execute()
    audit(g.user_id, f"webhook.{verb}", f"hook:{name}")
    flash(f"The hook {name}: {verb}d.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#links")
