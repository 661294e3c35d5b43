"""Registering a hook (the CLI's `webhook add` and the owner's form on the agent's page): one set of
checks, each refusal one line that says what to do."""
from __future__ import annotations

from ..models import AgentGroup, MessagingGroup, Wiring, audit
from ..proposal_rules import RuleError, check_secret_name
from ..security import folder_problem
from .render import TemplateRefused, check_template
from .tables import Webhook

SCHEMES = ("github", "standard", "bearer")


class HookRefused(ValueError):
    """Why the hook was not added (one line)."""


def add(actor: str, name: str, agent: AgentGroup, channel: str, chat_id: str, template: str, scheme: str,
        secret_env: str, events: list[str]) -> Webhook:
    if folder_problem(name) or len(name) > 64:
        raise HookRefused(f"the name {name!r} must be letters, digits, '-' and '_' (at most 64)")
    if scheme not in SCHEMES:
        raise HookRefused(f"signed how? one of {', '.join(SCHEMES)}")
    try:
        secret_env = check_secret_name(secret_env)
    except RuleError as exc:
        raise HookRefused(str(exc)) from None
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    if mg is None or not Wiring.select().where(Wiring.messaging_group == mg.id, Wiring.agent_group == agent.id).exists():
        raise HookRefused(f"{agent.folder} is not wired to {channel} {chat_id}; wire it first "
                          f"(wire {channel} {chat_id} {agent.folder})")
    try:
        check_template(template)
    except TemplateRefused as exc:
        raise HookRefused(str(exc)) from None
    if Webhook.get_or_none(Webhook.name == name):
        raise HookRefused(f"a hook named {name} exists; remove it first (webhook remove {name})")
    hook = Webhook.create(name=name, agent_group=agent.id, messaging_group=mg.id, template=template, scheme=scheme,
                          secret_env=secret_env, events=events, created_by=actor)
    audit(actor, "webhook.add", f"hook:{name}", agent=agent.folder, chat=f"{channel}:{chat_id}", scheme=scheme,
          secret=secret_env, events=events)
    return hook
