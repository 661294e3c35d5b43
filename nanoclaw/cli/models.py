"""Model upstreams (named model endpoints) and the model each agent runs on."""
from __future__ import annotations

import click

from ..operator import models as ops
from ..proxy import model_features
from ..proxy.model_body import FEATURES
from ..proxy.policy_files import policy_root
from ..upstreams.registry import AUTH_STYLES, DEFAULT
from .base import WHY, Mistake, get_agent, group, print_table, require_schema, settings


def _ops(fn, *args, **kwargs):
    require_schema()
    try:
        return fn(*args, **kwargs)
    except ops.ModelRefused as exc:
        raise Mistake(str(exc)) from None


@group("upstream")
def upstream_group():
    """Model upstreams: where agents' model calls may go (besides the default, anthropic)."""


@upstream_group.command("add")
@click.argument("name")
@click.option("--url", required=True, help="The upstream's base URL (https://…, or http://127.0.0.1:… for a local "
                                            "model server); /v1/messages is added to it.")
@click.option("--auth", type=click.Choice(AUTH_STYLES), required=True,
              help="How the key goes: x-api-key (Anthropic's style), bearer (Authorization), none (local servers).")
@click.option("--secret", "secret", metavar="ENV_NAME", help="The host environment variable (or .env entry) that "
                                                             "holds the key: its name, never its value.")
@click.option("--prices", default="default", show_default=True, metavar="default|free|FILE",
              help="default: the price table; free: its calls cost nothing and are never refused for a budget; or "
                   "a price table of your own, shaped like nanoclaw/usage/prices.json.")
@WHY
def upstream_add(name, url, auth, secret, prices, why):
    """Register the model upstream NAME ([a-z][a-z0-9-]{0,30}); an existing one of that name is replaced.

    \b
    Examples:
      flask --app app nanoclaw upstream add ollama --url http://127.0.0.1:11434 --auth none --prices free
      flask --app app nanoclaw upstream add openrouter --url https://openrouter.ai/api --auth bearer \\
          --secret OPENROUTER_API_KEY
    """
    upstream = _ops(ops.add_upstream, settings(), "cli", name, url, auth, secret, prices, why)
    click.echo(f"model upstream {upstream.describe()}; give an agent a model there with: flask --app app nanoclaw "
               f"model set AGENT MODEL --upstream {upstream.name}")


@upstream_group.command("list")
def upstream_list():
    """The model upstreams, the default one first (secret names only)."""
    found = _ops(ops.upstreams, settings())
    s = settings()
    rows = [[DEFAULT, s.anthropic_upstream_url, "x-api-key" if s.anthropic_api_key else
             "bearer (OAuth)" if s.claude_code_oauth_token else "none set",
             "$ANTHROPIC_API_KEY" if s.anthropic_api_key else "$CLAUDE_CODE_OAUTH_TOKEN" if s.claude_code_oauth_token
             else "-", "default", "-"]]
    for name, u in sorted(found.items()):
        rows.append([name, u.url, u.auth, f"${u.secret}" if u.secret else "-", u.prices,
                     ", ".join(ops.users_of(s, name)) or "-"])
    print_table(["NAME", "URL", "AUTH", "SECRET", "PRICES", "USED BY"], rows)


@upstream_group.command("remove")
@click.argument("name")
@WHY
def upstream_remove(name, why):
    """Remove the model upstream NAME (refused while an agent's model or fallbacks use it)."""
    gone = _ops(ops.remove_upstream, settings(), "cli", name, why)
    click.echo(f"model upstream {gone.name} removed")


@upstream_group.command("test")
@click.argument("name")
@click.option("--model", help="The model to ask (default: the first agent model on it, else claude-haiku-4-5).")
def upstream_test(name, model):
    """Ask the model upstream NAME for one token with its credential, and say what to fix."""
    from ..proxy.upstream_probe import probe
    require_schema()
    model = model or _model_on(name) or "claude-haiku-4-5"
    ok, detail = probe(settings(), name, model)
    click.echo(f"{'✓' if ok else '✗'} {name}: {detail}")
    if not ok:
        raise SystemExit(1)


@upstream_group.command("grant")
@click.argument("folder")
@click.argument("name")
@WHY
def upstream_grant(folder, name, why):
    """Let an admin of agent FOLDER put it on upstream NAME (the owner's choice; a free upstream's calls are
    never refused for a budget). Until the first grant or revoke, an agent has every upstream not priced free."""
    after = _ops(ops.grant, settings(), "cli", get_agent(folder), name, True, why)
    click.echo(f"{folder}'s admins may choose: {', '.join(sorted(after))}")


@upstream_group.command("revoke")
@click.argument("folder")
@click.argument("name")
@WHY
def upstream_revoke(folder, name, why):
    """Take upstream NAME away from what an admin of agent FOLDER may choose (its current model stays)."""
    after = _ops(ops.grant, settings(), "cli", get_agent(folder), name, False, why)
    click.echo(f"{folder}'s admins may choose: {', '.join(sorted(after)) or 'nothing but what the owner sets'}")


def _model_on(name: str) -> str | None:
    from ..models import AgentGroup
    for agent in AgentGroup.select().order_by(AgentGroup.folder):
        choice = _ops(ops.current, settings(), agent)
        for link in choice.chain if choice else ():
            if link.upstream == name:
                return link.model
    return None


@group("model")
def model_group():
    """The model an agent runs on, its fallbacks and effort."""


@model_group.command("set")
@click.argument("folder")
@click.argument("model")
@click.option("--upstream", help=f"The model upstream it is on (default: {DEFAULT}).")
@click.option("--fallback", "fallbacks", multiple=True, metavar="[UPSTREAM:]MODEL",
              help="A model to use when the ones before it fail (429, 529, 5xx, unreachable); repeat for more. The "
                   "part before the first ':' is an upstream only when it names a registered one, so llama3.1:8b is "
                   "a model on the agent's own upstream.")
@click.option("--effort", type=click.Choice(("low", "medium", "high", "xhigh", "max")),
              help="How much the model thinks (the SDK's effort levels).")
@WHY
def model_set(folder, model, upstream, fallbacks, effort, why):
    """Run agent FOLDER on MODEL from its next turn (its running sandboxes restart on the same conversation)."""
    require_schema()
    agent = get_agent(folder)
    choice = _ops(ops.set_model, settings(), "cli", agent, model, upstream, list(fallbacks), effort, why)
    click.echo(f"{folder} runs on, in this order:")
    for line in choice.describe():
        click.echo(f"  {line}")


@model_group.command("show")
@click.argument("folder")
def model_show(folder):
    """Agent FOLDER's model chain (upstream:model, in the order the door tries them)."""
    require_schema()
    choice = _ops(ops.current, settings(), get_agent(folder))
    if choice is None:
        click.echo(f"{folder} has no model of its own: any model, on {DEFAULT} (the Claude CLI's default)")
        return
    for line in choice.describe():
        click.echo(line)


@model_group.command("clear")
@click.argument("folder")
@WHY
def model_clear(folder, why):
    """Back to the defaults for agent FOLDER: any model, on the default upstream."""
    require_schema()
    cleared = _ops(ops.clear_model, settings(), "cli", get_agent(folder), why)
    click.echo(f"{folder} runs on the defaults again" if cleared else f"{folder} had no model of its own")


@model_group.group("feature")
def feature_group():
    """What an agent's model requests may ask the provider to do beyond answering. Refused at the door by
    default: url-source and file-source (the provider fetches a URL or reads a file of its own), web_search,
    web_fetch, code_execution (server tools), mcp_servers, container; each is fetched or run outside the
    agent's egress allowlist and its budget's estimate."""


@feature_group.command("allow")
@click.argument("folder")
@click.argument("feature", type=click.Choice(FEATURES))
@WHY
def feature_allow(folder, feature, why):
    """Let agent FOLDER's model requests use FEATURE (from its next request)."""
    _feature(folder, feature, True, why)


@feature_group.command("deny")
@click.argument("folder")
@click.argument("feature", type=click.Choice(FEATURES))
@WHY
def feature_deny(folder, feature, why):
    """Refuse FEATURE to agent FOLDER's model requests again (from its next request)."""
    _feature(folder, feature, False, why)


def _feature(folder: str, feature: str, allow: bool, why: str | None) -> None:
    require_schema()
    agent = get_agent(folder)
    after = model_features.change(policy_root(settings()), agent.folder, feature, allow, "cli", why)
    click.echo(f"{folder} may use: {', '.join(after) if after else 'no feature beyond answering'}")
