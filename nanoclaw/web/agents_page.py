"""The operator's page, per agent: /admin/agents (the list) and /admin/agents/<folder> (its
instructions, extra mounts, destinations, wirings, what it may reach, its packages and MCP servers),
with their writes. Routes of the admin blueprint (admin.py), each write limited to the person's scope."""
from __future__ import annotations

import shlex

from flask import abort, flash, g, redirect, render_template, request, url_for
from markupsafe import Markup

from .. import platforms
from ..mounts import AllowlistError, current_allowlist, declared_mounts
from ..models import AgentDestination, MessagingGroup, Session, Wiring
from ..inbound import lookups
from ..operator import capability_edits, policy_edits, skill_store
from ..operator import models as models_ops
from ..reading import settings as internet
from ..sessions import destinations
from . import auth, current_wake
from .admin import agent_for_write, agent_or_404, bp, forbidden, settings
from .changes import ChangeRefused, Forbidden, add_mount, clean_why, remove_mount
from .scope import chat_facts, destination_refusal
from .memory_page import changes_for, memories_for
from .links_page import links_of
from .spending import chart_svg, spending_of
from ..memory.entries import MAX_CHARS
from ..usage.budgets import usd



def running_count(agent) -> int | None:
    """How many of the agent's sandboxes run now (None: this process does not run sandboxes)."""
    manager = current_wake().manager
    if manager is None:
        return None
    from ..sandboxes.manager import sandbox_name
    names = set(manager.running())
    return sum(1 for s in Session.select(Session.id).where(Session.agent_group == agent)
               if sandbox_name(settings().install_id, agent.folder, s.id) in names)


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
    try:
        hosts, routes, policy_error = *policy_edits.current(settings(), a), None
    except policy_edits.EditRefused as exc:
        hosts, routes, policy_error = [], [], str(exc)
    spending = spending_of(a)
    limit = spending.budget and spending.budget.daily_usd
    try:
        choice, model_error = models_ops.current(settings(), a), None
    except models_ops.ModelRefused as exc:
        choice, model_error = None, str(exc)
    return render_template("agent.html", agent=a, mounts=declared_mounts(a), wirings=list(wirings),
                           spending=spending, chart=Markup(chart_svg(spending.days, limit and round(limit * 1e6))),
                           usd=usd, choice=choice, model_error=model_error, sandboxes=running_count(a),
                           fallback_text=" ".join(link.describe() for link in choice.fallbacks) if choice else "",
                           memories=memories_for(a, g.user_id), memory_changes=changes_for(a, g.user_id),
                           memory_max=MAX_CHARS, keep_history_days=settings().keep_history_days,
                           upstream_names=["anthropic", *sorted(models_ops.upstreams(settings()))]
                           if not model_error else ["anthropic"],
                           granted=models_ops.granted(settings(), a) if not model_error else set(),
                           features=models_ops.FEATURES, allowed=models_ops.features(settings(), a),
                           allowlist=allowlist, allowlist_error=allowlist_error, destinations=places,
                           channels=(*platforms.names(), "web"), hosts=hosts, routes=routes, policy_error=policy_error,
                           internet=internet.current(a, settings().search != "none"),
                           fetches=internet.fetches(a.folder, 10), search_provider=settings().search,
                           skills=skill_store.installed(a.folder), **links_of(a))


@bp.post("/admin/agents/<folder>/destinations")
def destination_add(folder: str):
    a = agent_for_write(folder)
    f = request.form
    name = f.get("name", "").strip()
    scope = auth.scope_of(g.user_id)
    try:
        destinations.add(g.user_id, a, name, f.get("channel", ""), f.get("chat_id", ""), f.get("thread"),
                         why=clean_why(f.get("why")),
                         refusal=lambda channel, chat_id: destination_refusal(scope, a.id, chat_facts(channel, chat_id)))
    except destinations.DestinationRefused as exc:
        return forbidden(str(exc))
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


# --- what the agent may reach: egress hosts and credential routes ------------------------------------

def _policy_change(folder: str, change, done: str, section: str = "reach"):
    a = agent_for_write(folder)
    try:
        diff = change(a)
    except (policy_edits.EditRefused, capability_edits.CapabilityRefused) as exc:
        flash(f"Not changed: {exc}", "error")
    else:
        flash(done if diff else "Nothing to change: it was so already.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + f"#{section}")


@bp.post("/admin/agents/<folder>/egress")
def egress_add(folder: str):
    host, why = request.form.get("host", "").strip(), clean_why(request.form.get("why"))
    return _policy_change(folder, lambda a: policy_edits.allow_host(settings(), g.user_id, a, host, why),
                          f"{folder} may reach {host} from its next request.")


@bp.post("/admin/agents/<folder>/egress/remove")
def egress_remove(folder: str):
    host, why = request.form.get("host", "").strip(), clean_why(request.form.get("why"))
    return _policy_change(folder, lambda a: policy_edits.revoke_host(settings(), g.user_id, a, host, why),
                          f"{folder} may no longer reach {host}.")


@bp.post("/admin/agents/<folder>/routes")
def route_add(folder: str):
    f = request.form
    match, upstream, secret = f.get("match", "").strip(), f.get("upstream", "").strip(), f.get("secret", "").strip()
    a = agent_for_write(folder)
    delegated = (a.container_config or {}).get("admin_secrets", [])
    if secret not in delegated and not lookups.is_owner(g.user_id):
        return forbidden(f"only the owner grants ${secret}: it is a host secret this agent's admins were not given")
    return _policy_change(folder, lambda a: policy_edits.put(settings(), g.user_id, a, match, upstream, secret,
                                                             clean_why(f.get("why"))),
                          f"{folder}: {match} goes to {upstream} with ${secret} from its next request.")


@bp.post("/admin/agents/<folder>/routes/remove")
def route_remove(folder: str):
    match, why = request.form.get("match", "").strip(), clean_why(request.form.get("why"))
    return _policy_change(folder, lambda a: policy_edits.remove_route(settings(), g.user_id, a, match, why),
                          f"{folder} no longer has the route {match}.")


# --- packages and MCP servers: installed or started inside its sandboxes, which restart -----------------

def _capability_change(folder: str, done: str, edit, *args):
    """edit(settings, user, agent, *args, wake=) of capability_edits, answered like the reach section's."""
    return _policy_change(folder, lambda a: edit(settings(), g.user_id, a, *args, wake=current_wake()), done,
                          "capabilities")


@bp.post("/admin/agents/<folder>/packages")
def packages_add(folder: str):
    f = request.form
    return _capability_change(folder, f"Installed for {folder}; its sandboxes restart with them.",
                              capability_edits.add_packages, f.get("manager", ""), f.get("names", ""),
                              clean_why(f.get("why")))


@bp.post("/admin/agents/<folder>/packages/remove")
def packages_remove(folder: str):
    f = request.form
    name = f.get("name", "").strip()
    return _capability_change(folder, f"Removed {name} from {folder}; its sandboxes restart without it.",
                              capability_edits.remove_package, f.get("manager", ""), name, clean_why(f.get("why")))


@bp.post("/admin/agents/<folder>/mcp")
def mcp_add(folder: str):
    f = request.form
    name, command = f.get("name", "").strip(), f.get("command", "").strip()
    try:
        args = shlex.split(f.get("args", ""))
    except ValueError as exc:
        flash(f"Not changed: the arguments do not parse ({exc}); quote them as in a shell.", "error")
        return redirect(url_for("admin.agent", folder=folder) + "#capabilities")
    return _capability_change(folder, f"{folder} has the MCP server {name}; its sandboxes restart with it.",
                              capability_edits.add_mcp_server, name, command, args,
                              f.get("env", "").replace(",", " ").split(), clean_why(f.get("why")))


@bp.post("/admin/agents/<folder>/mcp/<name>/remove")
def mcp_remove(folder: str, name: str):
    return _capability_change(folder, f"{folder} no longer has the MCP server {name}; its sandboxes restart without it.",
                              capability_edits.remove_mcp_server, name, clean_why(request.form.get("why")))


# --- its model ---------------------------------------------------------------------------------

@bp.post("/admin/agents/<folder>/model")
def model_set(folder: str):
    a = agent_for_write(folder)
    why = clean_why(request.form.get("why"))
    fallbacks = [f.strip() for f in (request.form.get("fallbacks") or "").split() if f.strip()]
    try:
        if request.form.get("clear"):
            models_ops.clear_model(settings(), g.user_id, a, why, wake=current_wake())
            flash(f"{a.name} runs on the defaults again.", "ok")
        else:
            choice = models_ops.set_model(settings(), g.user_id, a, request.form.get("model") or "",
                                          request.form.get("upstream") or None, fallbacks,
                                          request.form.get("effort") or None, why, wake=current_wake())
            flash(f"{a.name} runs on {' → '.join(link.describe() for link in choice.chain)} from its next turn.", "ok")
    except models_ops.ModelRefused as exc:
        if "administer other agents" in str(exc):
            return forbidden(str(exc))
        flash(str(exc), "error")
    return redirect(url_for("admin.agent", folder=a.folder) + "#model")


# --- what the owner lets it use: upstreams its admins may choose, provider features (issue 60, items 4, 8)

@bp.post("/admin/agents/<folder>/upstreams/<name>/<verb>")
def upstream_grant(folder: str, name: str, verb: str):
    a = agent_for_write(folder)
    if verb not in ("grant", "revoke"):
        abort(404)
    return _owner_change(a, "#grants", lambda: models_ops.grant(settings(), g.user_id, a, name, verb == "grant",
                                                               clean_why(request.form.get("why"))),
                         f"{a.name}'s admins may {'now' if verb == 'grant' else 'no longer'} put it on {name}.")


@bp.post("/admin/agents/<folder>/features/<feature>/<verb>")
def feature_change(folder: str, feature: str, verb: str):
    a = agent_for_write(folder)
    if verb not in ("allow", "deny"):
        abort(404)
    return _owner_change(a, "#grants", lambda: models_ops.set_feature(settings(), g.user_id, a, feature,
                                                                     verb == "allow", clean_why(request.form.get("why"))),
                         f"{a.name}'s model requests may {'now' if verb == 'allow' else 'no longer'} use {feature}"
                         " (from its next request).")


@bp.post("/admin/agents/<folder>/internet")
def internet_change(folder: str):
    a = agent_for_write(folder)
    try:
        after = internet.change(g.user_id, a, read=request.form.get("read") or None,
                                search=request.form.get("search") or None, browser=request.form.get("browser") or None,
                                why=clean_why(request.form.get("why")))
    except internet.NotOwner as exc:
        return forbidden(str(exc))
    except ValueError as exc:
        flash(str(exc), "error")
    else:
        flash(f"{a.name} reads the web: {after.read}; searches: {after.search}; browser: {after.browser} (tools change "
              "at its next start).", "ok")
    return redirect(url_for("admin.agent", folder=a.folder) + "#internet")


def _owner_change(a, anchor: str, change, done: str):
    try:
        change()
    except models_ops.ModelRefused as exc:
        if "only the owner" in str(exc):
            return forbidden(str(exc))
        flash(str(exc), "error")
    else:
        flash(done, "ok")
    return redirect(url_for("admin.agent", folder=a.folder) + anchor)
