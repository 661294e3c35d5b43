"""Webhooks that wake an agent (issue 65, item 5): `webhook add|list|remove|disable|enable`."""
from __future__ import annotations

from pathlib import Path

import click

from ..hooks import registry
from ..hooks.tables import Webhook
from ..models import audit
from .base import Mistake, channel_names, get_agent, group, print_table, require_schema, settings


@group("webhook")
def webhook_group():
    """Webhooks that wake an agent: a signed POST to /hooks/NAME becomes a message in its chat."""


@webhook_group.command("add")
@click.argument("name")
@click.option("--agent", "folder", required=True, help="The agent it wakes (its folder).")
@click.option("--chat", nargs=2, required=True, metavar="CHANNEL CHAT_ID",
              help="Where the agent answers: a chat it is wired to.")
@click.option("--template", "template_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A Jinja template: the instruction, with the payload's fields as {{ payload.… }}.")
@click.option("--github", "github_env", metavar="SECRET_ENV", help="GitHub's X-Hub-Signature-256, keyed by this variable.")
@click.option("--standard", "standard_env", metavar="SECRET_ENV", help="Standard Webhooks signatures (whsec_…).")
@click.option("--bearer", "bearer_env", metavar="SECRET_ENV", help="Authorization: Bearer with this variable's value.")
@click.option("--events", default="", help="GitHub events that wake the agent, comma-separated (default: all).")
def webhook_add(name, folder, chat, template_file, github_env, standard_env, bearer_env, events):
    """Register the hook NAME: POST /hooks/NAME, signed with the secret in a host variable (named, never
    given), wakes the agent FOLDER, whose answer goes to the chat CHANNEL CHAT_ID.

    \b
    Example:
      flask --app app nanoclaw webhook add gh-issues --agent andy --chat telegram 42 \\
          --template issue.j2 --github GITHUB_HOOK_SECRET --events issues
    """
    require_schema()
    schemes = [(s, env) for s, env in (("github", github_env), ("standard", standard_env), ("bearer", bearer_env)) if env]
    if len(schemes) != 1:
        raise Mistake("say how deliveries are signed: exactly one of --github, --standard, --bearer SECRET_ENV")
    scheme, secret_env = schemes[0]
    agent = get_agent(folder)
    channel, chat_id = chat
    if channel not in channel_names():
        raise Mistake(f"unknown channel {channel!r} (one of: {', '.join(channel_names())})")
    if not template_file.is_file():
        raise Mistake(f"no template file {template_file}")
    try:
        registry.add("cli", name, agent, channel, chat_id, template_file.read_text(), scheme, secret_env,
                     [e.strip() for e in events.split(",") if e.strip()])
    except registry.HookRefused as exc:
        raise Mistake(str(exc)) from None
    base = (settings().public_url or "https://YOUR-HOST").rstrip("/")
    click.echo(f"added: POST {base}/hooks/{name} ({scheme}, secret ${secret_env}) wakes {agent.folder} in "
               f"{channel} {chat_id}")


@webhook_group.command("list")
def webhook_list():
    """Every hook: its agent and chat, how it is signed, which events, enabled or not."""
    require_schema()
    rows = [[h.name, h.agent_group.folder, f"{h.messaging_group.channel_type} {h.messaging_group.platform_id}",
             f"{h.scheme} ${h.secret_env}", ",".join(h.events) or "all", "on" if h.enabled else "off"]
            for h in Webhook.select().order_by(Webhook.name)]
    print_table(["hook", "agent", "chat", "signed", "events", "enabled"], rows, empty="no webhooks yet")


def _hook(name: str) -> Webhook:
    hook = Webhook.get_or_none(Webhook.name == name)
    if hook is None:
        raise Mistake(f"no hook named {name!r} (see: webhook list)")
    return hook


@webhook_group.command("remove")
@click.argument("name")
def webhook_remove(name):
    """Remove the hook NAME: its deliveries are answered 404 from now on."""
    require_schema()
    _hook(name).delete_instance()
    audit("cli", "webhook.remove", f"hook:{name}")
    click.echo(f"removed {name}")


def _switch(name: str, enabled: bool) -> None:
    require_schema()
    Webhook.update(enabled=enabled).where(Webhook.id == _hook(name).id).execute()
    audit("cli", "webhook.enable" if enabled else "webhook.disable", f"hook:{name}")
    click.echo(f"{name} is {'enabled' if enabled else 'disabled'}")


@webhook_group.command("disable")
@click.argument("name")
def webhook_disable(name):
    """Refuse NAME's deliveries (410) without forgetting it."""
    _switch(name, False)


@webhook_group.command("enable")
@click.argument("name")
def webhook_enable(name):
    """Take NAME's deliveries again."""
    _switch(name, True)
