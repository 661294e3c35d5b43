"""Changes the page makes: wirings and extra mounts, validated exactly as the CLI validates them,
stored where the CLI stores them, and audited with who made them, why (the form's optional
"why" box) and a diff of what changed ('- before' / '+ after' lines, like a proposal's)."""
from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from .. import platforms
from ..db import database
from ..inbound.wiring import WiringError, resolve_engage
from ..models import (CHAT_KINDS, UNKNOWN_SENDER_POLICIES, VOICE_MODES, WHILE_BUSY, AgentGroup, MessagingGroup, Session,
                      Wiring, audit)
from ..sessions import store
from ..mounts import (MountRefused, MountRequest, current_allowlist, declared_mounts, protected_paths, save_mounts,
                      validate_mount)
from .scope import Scope, chat_facts, removal_refusal, wiring_refusal


WHY_MAX = 300


class ChangeRefused(ValueError):
    """A one-line reason shown on the page."""


class Forbidden(ChangeRefused):
    """Outside what this person may change (403): nothing was changed."""


def field_diff(before: dict, after: dict) -> list[str]:
    """'- key: old' / '+ key: new' for each key whose value differs; a key on one side only (or
    None there) shows only on the other."""
    lines = []
    for key in [*before, *(k for k in after if k not in before)]:
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if old is not None:
            lines.append(f"- {key}: {old}")
        if new is not None:
            lines.append(f"+ {key}: {new}")
    return lines


def clean_why(text: str | None) -> str | None:
    """The operator's reason as stored: one line, at most WHY_MAX characters, None when empty."""
    text = " ".join((text or "").split())
    return text[:WHY_MAX] or None


def wiring_state(mg: MessagingGroup | None, wiring: Wiring | None) -> dict:
    """What a wiring's audit diff compares (the chat's settings and the wiring's own)."""
    state = {}
    if mg is not None:
        state.update(kind=mg.kind, name=mg.name, strangers=mg.unknown_sender_policy)
    if wiring is not None:
        state.update(engage=wiring.engage_mode, pattern=wiring.engage_pattern, senders=wiring.sender_scope,
                     ignored=wiring.ignored_message_policy, voice=wiring.voice, stream=wiring.stream,
                     while_busy=wiring.while_busy)
    return state


def mount_line(m: dict) -> str:
    return f"{m['host_path']} -> /workspace/extra/{m['name']} ({'read-write' if m['readwrite'] else 'read-only'})"


@dataclass(frozen=True)
class WiringForm:
    channel: str
    chat_id: str
    kind: str | None = None
    engage: str | None = None
    pattern: str | None = None
    sender_scope: str = "all"
    ignored: str = "drop"
    unknown_senders: str | None = None
    name: str | None = None
    why: str | None = None
    voice: str | None = None
    stream: str | None = None   # on | off
    while_busy: str | None = None


def save_wiring(actor: str, agent: AgentGroup, form: WiringForm, scope: Scope | None = None) -> tuple[Wiring, bool]:
    """Create or update the wiring of chat (channel, chat id) to `agent`. (wiring, created).
    `scope`: what the actor may change (None: everything, as the CLI); Forbidden when outside it."""
    channel, chat_id = form.channel.strip(), form.chat_id.strip()
    if not channel.isidentifier():
        raise ChangeRefused(f"channel {channel!r} is not a channel name (one of: "
                            f"{', '.join((*platforms.names(), 'web'))})")
    if not chat_id:
        raise ChangeRefused("the chat id is empty")
    if form.unknown_senders and form.unknown_senders not in UNKNOWN_SENDER_POLICIES:
        raise ChangeRefused(f"unknown policy for strangers {form.unknown_senders!r}")
    if form.while_busy and form.while_busy not in WHILE_BUSY:
        raise ChangeRefused(f"unknown choice for a message while busy {form.while_busy!r}; use one of: "
                            f"{', '.join(WHILE_BUSY)}")
    if form.stream and form.stream not in ("on", "off"):
        raise ChangeRefused(f"streaming is 'on' or 'off', not {form.stream!r}")
    if form.voice and form.voice not in VOICE_MODES:
        raise ChangeRefused(f"unknown voice choice {form.voice!r}; use one of: {', '.join(VOICE_MODES)}")
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    kind = form.kind or (mg.kind if mg else "dm")
    if kind not in CHAT_KINDS:
        raise ChangeRefused(f"unknown chat kind {kind!r}; use one of: {', '.join(CHAT_KINDS)}")
    if scope is not None:
        refusal = wiring_refusal(scope, agent.id, chat_facts(channel, chat_id, kind))
        if refusal:
            raise Forbidden(refusal)
    try:
        engage = resolve_engage(kind, form.engage or None, form.pattern or None, form.sender_scope, form.ignored)
    except WiringError as exc:
        raise ChangeRefused(str(exc).replace("--engage pattern needs --pattern REGEX",
                                             "engage 'pattern' needs a pattern")) from None
    values = dict(engage.__dict__)
    if form.voice:
        values["voice"] = form.voice
    if form.stream:
        values["stream"] = form.stream == "on"
    if form.while_busy:
        values["while_busy"] = form.while_busy
    with database.atomic():
        before = wiring_state(mg, mg and Wiring.get_or_none(Wiring.messaging_group == mg, Wiring.agent_group == agent))
        if mg is None:
            mg = MessagingGroup.create(channel_type=channel, platform_id=chat_id, kind=kind, name=form.name or None,
                                       unknown_sender_policy=form.unknown_senders or "request_approval")
        else:
            mg.kind = kind
            mg.name = form.name or mg.name
            mg.unknown_sender_policy = form.unknown_senders or mg.unknown_sender_policy
            mg.denied_at = None
            mg.save()
        wiring = Wiring.get_or_none(Wiring.messaging_group == mg, Wiring.agent_group == agent)
        created = wiring is None
        if created:
            wiring = Wiring.create(messaging_group=mg, agent_group=agent, **values)
        else:
            Wiring.update(**values).where(Wiring.id == wiring.id).execute()
        wiring = Wiring.get_by_id(wiring.id)
        audit(actor, "wiring.create" if created else "wiring.update", f"{channel}:{chat_id}", agent=agent.folder,
              kind=kind, unknown_senders=mg.unknown_sender_policy, via="web", why=clean_why(form.why),
              diff=field_diff(before, wiring_state(mg, wiring)), **values)
    options = {k: v for k, v in (("voice", form.voice), ("stream", form.stream), ("while_busy", form.while_busy)) if v}
    if options:  # the chat's sessions follow at once (their sandboxes read it at start too)
        for session in Session.select().where(Session.agent_group == agent, Session.messaging_group == mg):
            for key, value in options.items():
                store.set_option(store.session_path(current_app.config["NANOCLAW"].sessions_dir, agent.folder,
                                                    session.id), key, value)
    return wiring, created


def remove_wiring(actor: str, wiring: Wiring, why: str | None = None, scope: Scope | None = None) -> None:
    mg, agent = wiring.messaging_group, wiring.agent_group
    refusal = scope and removal_refusal(scope, agent.id)
    if refusal:
        raise Forbidden(refusal)
    with database.atomic():
        before = wiring_state(None, wiring)
        wiring.delete_instance()
        audit(actor, "wiring.delete", f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder, via="web",
              why=clean_why(why), diff=field_diff({"agent": agent.folder, **before}, {}))


def add_mount(actor: str, settings, agent: AgentGroup, host_path: str, name: str, readwrite: bool,
              why: str | None = None, scope: Scope | None = None):
    """Validate against the allowlist as it is now (and again at every sandbox start) and declare it."""
    if scope is not None and not scope.covers(agent.id):
        raise Forbidden("you administer other agents, not this one")
    try:
        approved = validate_mount(MountRequest(host_path.strip(), name.strip(), readwrite),
                                  current_allowlist(settings.mount_allowlist), protected_paths(settings))
    except MountRefused as exc:
        raise ChangeRefused(str(exc)) from None
    declared = declared_mounts(agent)
    mounts = [m for m in declared if m["name"] != approved.name]
    new = {"host_path": host_path.strip(), "name": approved.name, "readwrite": readwrite}
    mounts.append(new)
    before = {m["name"]: mount_line(m) for m in declared if m["name"] == approved.name}
    with database.atomic():
        save_mounts(agent, mounts)
        audit(actor, "mount.add", agent.folder, host_path=str(approved.host_path), name=approved.name,
              readwrite=readwrite, via="web", why=clean_why(why),
              diff=field_diff(before, {approved.name: mount_line(new)}))
    return approved


def remove_mount(actor: str, agent: AgentGroup, name: str, why: str | None = None, scope: Scope | None = None) -> None:
    if scope is not None and not scope.covers(agent.id):
        raise Forbidden("you administer other agents, not this one")
    mounts = declared_mounts(agent)
    gone = [m for m in mounts if m["name"] == name]
    if not gone:
        raise ChangeRefused(f"{agent.folder} has no extra mount named {name!r}")
    with database.atomic():
        save_mounts(agent, [m for m in mounts if m["name"] != name])
        audit(actor, "mount.remove", agent.folder, name=name, via="web", why=clean_why(why),
              diff=field_diff({name: mount_line(gone[0])}, {}))
