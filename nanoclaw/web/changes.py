"""Changes the page makes: wirings and extra mounts, validated exactly as the CLI validates them,
stored where the CLI stores them, and audited with who made them."""
from __future__ import annotations

from dataclasses import dataclass

from ..cli import declared_mounts, save_mounts
from ..db import database
from ..models import CHAT_KINDS, UNKNOWN_SENDER_POLICIES, AgentGroup, MessagingGroup, Wiring, audit
from ..mounts import MountRefused, MountRequest, current_allowlist, validate_mount
from ..wiring import WiringError, resolve_engage


class ChangeRefused(ValueError):
    """A one-line reason shown on the page."""


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


def save_wiring(actor: str, agent: AgentGroup, form: WiringForm) -> tuple[Wiring, bool]:
    """Create or update the wiring of chat (channel, chat id) to `agent`. (wiring, created)."""
    channel, chat_id = form.channel.strip(), form.chat_id.strip()
    if not channel.isidentifier():
        raise ChangeRefused(f"channel {channel!r} is not a channel name (e.g. telegram, slack, web)")
    if not chat_id:
        raise ChangeRefused("the chat id is empty")
    if form.unknown_senders and form.unknown_senders not in UNKNOWN_SENDER_POLICIES:
        raise ChangeRefused(f"unknown policy for strangers {form.unknown_senders!r}")
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    kind = form.kind or (mg.kind if mg else "dm")
    if kind not in CHAT_KINDS:
        raise ChangeRefused(f"unknown chat kind {kind!r}; use one of: {', '.join(CHAT_KINDS)}")
    try:
        engage = resolve_engage(kind, form.engage or None, form.pattern or None, form.sender_scope, form.ignored)
    except WiringError as exc:
        raise ChangeRefused(str(exc).replace("--engage pattern needs --pattern REGEX",
                                             "engage 'pattern' needs a pattern")) from None
    values = dict(engage.__dict__)
    with database.atomic():
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
        audit(actor, "wiring.create" if created else "wiring.update", f"{channel}:{chat_id}", agent=agent.folder,
              kind=kind, unknown_senders=mg.unknown_sender_policy, via="web", **values)
    return Wiring.get_by_id(wiring.id), created


def remove_wiring(actor: str, wiring: Wiring) -> None:
    mg, agent = wiring.messaging_group, wiring.agent_group
    with database.atomic():
        wiring.delete_instance()
        audit(actor, "wiring.delete", f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder, via="web")


def add_mount(actor: str, settings, agent: AgentGroup, host_path: str, name: str, readwrite: bool):
    """Validate against the allowlist as it is now (and again at every sandbox start) and declare it."""
    try:
        approved = validate_mount(MountRequest(host_path.strip(), name.strip(), readwrite),
                                  current_allowlist(settings.mount_allowlist))
    except MountRefused as exc:
        raise ChangeRefused(str(exc)) from None
    mounts = [m for m in declared_mounts(agent) if m["name"] != approved.name]
    mounts.append({"host_path": host_path.strip(), "name": approved.name, "readwrite": readwrite})
    with database.atomic():
        save_mounts(agent, mounts)
        audit(actor, "mount.add", agent.folder, host_path=str(approved.host_path), name=approved.name,
              readwrite=readwrite, via="web")
    return approved


def remove_mount(actor: str, agent: AgentGroup, name: str) -> None:
    mounts = declared_mounts(agent)
    if not any(m["name"] == name for m in mounts):
        raise ChangeRefused(f"{agent.folder} has no extra mount named {name!r}")
    with database.atomic():
        save_mounts(agent, [m for m in mounts if m["name"] != name])
        audit(actor, "mount.remove", agent.folder, name=name, via="web")
