"""An agent's skills on its page (issue 66): the list (name, hash, where from, who added it), adding from
a source (the owner: any; a scoped admin of the agent: only sources the owner trusts), removing (anyone
who may write the agent). Routes of the admin blueprint; each write checked against the person's scope."""
from __future__ import annotations

from flask import flash, g, redirect, request, url_for

from ..operator import skill_adding, skill_store
from ..operator.skill_format import SkillRefused
from . import auth
from .admin import agent_for_write, bp, settings
from .changes import clean_why


@bp.post("/admin/agents/<folder>/skills")
def skill_add(folder: str):
    a = agent_for_write(folder)
    source = (request.form.get("source") or "").strip()
    try:
        skill = skill_adding.add(settings(), a, source, (request.form.get("sha256") or "").strip() or None,
                                 g.user_id, owner=auth.is_owner(g.user_id))
    except SkillRefused as exc:
        flash(f"Not added: {exc}", "error")
    except OSError as exc:
        flash(f"Not added: the skill could not be read ({exc.strerror or exc})", "error")
    else:
        flag = f" Read first: {'; '.join(skill.flags)}." if skill.flags else ""
        flash(f"Added {skill.name} (sha256:{skill.hash[:16]}…) to {a.folder}; it is offered from its next sandbox "
              f"start as nanoclaw:{skill.name}.{flag}", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#skills")


@bp.post("/admin/agents/<folder>/skills/<name>/remove")
def skill_remove(folder: str, name: str):
    a = agent_for_write(folder)
    if skill_store.remove(settings(), a, name):
        from ..models import audit
        audit(g.user_id, "skill.remove", f"skill:{a.folder}/{name}", why=clean_why(request.form.get("why")))
        flash(f"Removed {name} from {a.folder}; its next sandbox start offers it no more.", "ok")
    else:
        flash(f"{a.folder} has no skill {name}.", "error")
    return redirect(url_for("admin.agent", folder=folder) + "#skills")
