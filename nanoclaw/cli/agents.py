"""Agents, users and their roles, and wirings (which chat talks to which agent, and how)."""
from __future__ import annotations

import shutil

import click

from ..db import database
from ..db import announce
from ..inbound.wiring import WiringError, guess_kind, resolve_engage
from ..lifecycle.image_prune import forget_agent
from ..models import (CHAT_KINDS, ENGAGE_MODES, IGNORED_POLICIES, SENDER_SCOPES, UNKNOWN_SENDER_POLICIES, VOICE_MODES,
                      WHILE_BUSY, AgentGroup, AgentGroupMember, MessagingGroup, Session, User, UserRole, Wiring, audit)
from ..security import folder_problem, slugify, write_text_nofollow
from ..sessions import store
from .base import (CHAT_ID_ARGS, Mistake, channel_names, command, get_agent, group, native_id, parse_user_id,
                   print_table, require_schema, settings)


@group("agent")
def agent_group():
    """Create, list and delete agents (each has a folder under groups/)."""


@agent_group.command("create")
@click.argument("name")
@click.option("--folder", help="Folder under groups/ (default: a slug of NAME, e.g. Andy -> andy).")
@click.option("--instructions", default=None, help="Text for the agent's CLAUDE.md.")
def agent_create(name, folder, instructions):
    """Create an agent NAME with its folder and CLAUDE.md."""
    require_schema()
    folder = folder if folder is not None else slugify(name)
    problem = folder_problem(folder)
    if problem:
        raise Mistake(problem + ("" if folder else f" (cannot derive one from {name!r}; pass --folder)"))
    if AgentGroup.get_or_none(AgentGroup.folder == folder):
        raise Mistake(f"an agent with folder {folder!r} already exists")
    instructions = instructions or f"You are {name}, a helpful personal assistant."
    path = settings().groups_dir / folder
    path.mkdir(parents=True, exist_ok=True)
    claude_md = path / "CLAUDE.md"
    if not claude_md.exists() and not claude_md.is_symlink():
        write_text_nofollow(path, "CLAUDE.md", f"# {name}\n\n{instructions}\n")
    with database.atomic():
        AgentGroup.create(name=name, folder=folder, instructions=instructions)
        audit("cli", "agent.create", folder, name=name)
    announce(settings().data_dir, "proxy")  # a running proxy opens its door now
    click.echo(f"created agent {name!r} in {path}")


@agent_group.command("list")
def agent_list():
    """List agents with their wirings count."""
    require_schema()
    agents = list(AgentGroup.select().order_by(AgentGroup.folder))
    if not agents:
        click.echo("no agents yet; create one: flask --app app nanoclaw agent create NAME")
        return
    print_table(["FOLDER", "NAME", "WIRINGS"],
                [[a.folder, a.name, a.wirings.count()] for a in agents])


@agent_group.command("delete")
@click.argument("folder")
@click.option("--purge", is_flag=True, help="Also delete the folder groups/FOLDER from disk.")
def agent_delete(folder, purge):
    """Delete an agent, its wirings and sessions; its sandboxes stop and its own images are removed.
    Its folder stays on disk unless --purge."""
    require_schema()
    agent = get_agent(folder)
    session_ids = [s.id for s in agent.sessions]
    with database.atomic():
        agent.delete_instance(recursive=True)
        audit("cli", "agent.delete", folder, purge=purge)
    stopped, removed = forget_agent(settings(), folder, session_ids)
    if removed:
        audit("cli", "agent.images.remove", folder, images=removed)
    path = settings().groups_dir / folder
    if purge and path.is_dir():
        shutil.rmtree(path)
        click.echo(f"deleted agent {folder!r} and {path}")
    else:
        click.echo(f"deleted agent {folder!r}" + (f" (its folder {path} is kept)" if path.exists() else ""))
    if stopped:
        click.echo(f"stopped {len(stopped)} running sandbox(es)")
    for tag in removed:
        click.echo(f"removed image {tag}")


@group("user")
def user_group():
    """Users and their roles (owner, admin, member)."""


@user_group.command("add")
@click.argument("user_id")
@click.option("--name", help="Display name.")
@click.option("--role", type=click.Choice(["owner", "admin", "member"]), default=None,
              help="owner: everything; admin: of --agent or, without it, of all agents; member: may talk to --agent.")
@click.option("--agent", "agent_folder", help="The agent the role applies to (required for member).")
def user_add(user_id, name, role, agent_folder):
    """Add (or update) a user <channel>:<platform id>, optionally with a role."""
    require_schema()
    parse_user_id(user_id)
    channel, _, native = user_id.partition(":")
    user_id = f"{channel}:{native_id(channel, native)}"
    if role == "member" and not agent_folder:
        raise Mistake("--role member needs --agent FOLDER")
    if role == "owner" and agent_folder:
        raise Mistake("an owner owns every agent; drop --agent")
    if agent_folder and role is None:
        role = "member"
    agent = get_agent(agent_folder) if agent_folder else None
    with database.atomic():
        user, created = User.get_or_create(id=user_id, defaults={"name": name})
        if name and user.name != name:
            user.name = name
            user.save()
        if role == "member":
            AgentGroupMember.get_or_create(user=user, agent_group=agent)
        elif role:
            query = UserRole.select().where(UserRole.user == user, UserRole.role == role,
                                            UserRole.agent_group.is_null() if agent is None
                                            else UserRole.agent_group == agent)
            if not query.exists():
                UserRole.create(user=user, role=role, agent_group=agent)
        audit("cli", "user.add", user_id, role=role, agent=agent_folder)
    scope = f" of {agent_folder}" if agent_folder else (" (all agents)" if role == "admin" else "")
    click.echo(f"{'added' if created else 'updated'} user {user_id}" + (f" as {role}{scope}" if role else ""))


def _kind_default(existing: MessagingGroup | None, kind: str | None, channel: str, chat_id: str) -> str:
    if kind:
        return kind
    return existing.kind if existing else guess_kind(channel, chat_id)


@command("wire", context_settings=CHAT_ID_ARGS)
@click.argument("channel")
@click.argument("chat_id")
@click.argument("agent_folder")
@click.option("--kind", type=click.Choice(CHAT_KINDS),
              help="Chat kind (default: the chat's known kind; else what the platform tells from the id, and "
                   "dm when it cannot).")
@click.option("--engage", type=click.Choice(ENGAGE_MODES),
              help="When the agent answers. Defaults: dm -> pattern '.', group -> mention, thread -> mention-sticky.")
@click.option("--pattern", help="Regular expression for --engage pattern ('.' = every message).")
@click.option("--sender-scope", type=click.Choice(SENDER_SCOPES), default="all", show_default=True,
              help="all: anyone admitted to the chat; known: only members, admins and owners.")
@click.option("--ignored", type=click.Choice(IGNORED_POLICIES), default="drop", show_default=True,
              help="What happens to messages that do not engage: drop, or keep as context (accumulate).")
@click.option("--unknown-senders", type=click.Choice(UNKNOWN_SENDER_POLICIES),
              help="Chat policy for strangers (default for a new chat: request_approval).")
@click.option("--name", help="A readable name for the chat.")
@click.option("--progress", type=click.Choice(("on", "off")),
              help="Whether a long turn shows a status message in the chat, edited as it goes (default on).")
@click.option("--stream", type=click.Choice(("on", "off")),
              help="Whether the answer is shown in the chat as it is written, in one message edited in place "
                   "(a draft where the platform has them); the finished answer still comes as a new message "
                   "(default on).")
@click.option("--while-busy", "while_busy", type=click.Choice(WHILE_BUSY),
              help="A message sent while the agent works: queue (the next turn; default), steer (taken into "
                   "the running turn, marked 👀), or interrupt (the turn stops and a new one answers both).")
@click.option("--voice", type=click.Choice(VOICE_MODES),
              help="Answers as voice notes too, when NANOCLAW_TTS_URL is set: auto (default) answers a voice "
                   "note with one, always, or never.")
def wire(channel, chat_id, agent_folder, kind, engage, pattern, sender_scope, ignored, unknown_senders, name,
         progress, stream, while_busy, voice):
    """Wire the chat (CHANNEL, CHAT_ID) to an agent, or update an existing wiring.

    \b
    Defaults by kind: dm -> pattern '.', group -> mention, thread -> mention-sticky.
    Example: flask --app app nanoclaw wire telegram 42 andy
    """
    require_schema()
    if channel not in channel_names():  # a typo would wire a chat no listener ever delivers from
        raise Mistake(f"channel {channel!r} is not a channel name (one of: {', '.join(channel_names())})")
    agent = get_agent(agent_folder)
    chat_id = native_id(channel, chat_id)
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    chat_kind = _kind_default(mg, kind, channel, chat_id)
    try:
        engage_settings = resolve_engage(chat_kind, engage, pattern, sender_scope, ignored)
    except WiringError as exc:
        raise Mistake(str(exc)) from None
    with database.atomic():
        if mg is None:
            mg = MessagingGroup.create(channel_type=channel, platform_id=chat_id, kind=chat_kind, name=name,
                                       unknown_sender_policy=unknown_senders or "request_approval")
        else:
            mg.kind = chat_kind
            mg.name = name or mg.name
            mg.unknown_sender_policy = unknown_senders or mg.unknown_sender_policy
            mg.denied_at = None
            mg.save()
        wiring = Wiring.get_or_none(Wiring.messaging_group == mg, Wiring.agent_group == agent)
        values = dict(engage_settings.__dict__)
        if progress is not None:
            values["progress"] = progress == "on"
        if stream is not None:
            values["stream"] = stream == "on"
        if while_busy is not None:
            values["while_busy"] = while_busy
        if voice is not None:
            values["voice"] = voice
        if wiring is None:
            Wiring.create(messaging_group=mg, agent_group=agent, **values)
            verb = "wired"
        else:
            Wiring.update(**values).where(Wiring.id == wiring.id).execute()
            verb = "updated"
        audit("cli", f"wiring.{'create' if verb == 'wired' else 'update'}", f"{channel}:{chat_id}",
              agent=agent_folder, kind=chat_kind, **values)
    how = engage_settings.engage_mode + (f" {engage_settings.engage_pattern!r}" if engage_settings.engage_pattern else "")
    changed = {k: v for k, v in (("progress", progress), ("stream", stream), ("while_busy", while_busy),
                                 ("voice", voice)) if v is not None}
    if changed:  # the chat's sessions follow at once (their sandboxes read it at start too)
        for session in Session.select().where(Session.agent_group == agent, Session.messaging_group == mg):
            for key, value in changed.items():
                store.set_option(store.session_path(settings().sessions_dir, agent.folder, session.id), key, value)
    click.echo(f"{verb} {channel}:{chat_id} ({chat_kind}) -> {agent_folder}: engage {how}, "
               f"senders {engage_settings.sender_scope}, ignored {engage_settings.ignored_message_policy}"
               + (f", progress {progress}" if progress else "") + (f", stream {stream}" if stream else "")
               + (f", while busy {while_busy}" if while_busy else "")
               + (f", voice {voice}" if voice else ""))


@command("unwire", context_settings=CHAT_ID_ARGS)
@click.argument("channel")
@click.argument("chat_id")
@click.argument("agent_folder")
def unwire(channel, chat_id, agent_folder):
    """Remove the wiring between a chat and an agent."""
    require_schema()
    agent = get_agent(agent_folder)
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    wiring = mg and Wiring.get_or_none(Wiring.messaging_group == mg, Wiring.agent_group == agent)
    if not wiring:
        raise Mistake(f"{channel}:{chat_id} is not wired to {agent_folder}")
    with database.atomic():
        wiring.delete_instance()
        audit("cli", "wiring.delete", f"{channel}:{chat_id}", agent=agent_folder)
    click.echo(f"unwired {channel}:{chat_id} from {agent_folder}")


@command("wirings")
def wirings():
    """Show every wiring as a table."""
    require_schema()
    rows = (Wiring.select(Wiring, MessagingGroup, AgentGroup).join(MessagingGroup)
            .switch(Wiring).join(AgentGroup)
            .order_by(MessagingGroup.channel_type, MessagingGroup.platform_id, AgentGroup.folder))
    table = [[f"{w.messaging_group.channel_type}:{w.messaging_group.platform_id}", w.messaging_group.kind,
              w.agent_group.folder,
              w.engage_mode + (f" {w.engage_pattern}" if w.engage_pattern else ""),
              w.sender_scope, w.ignored_message_policy, w.messaging_group.unknown_sender_policy]
             for w in rows]
    if not table:
        click.echo("no wirings yet; wire a chat: flask --app app nanoclaw wire CHANNEL CHAT_ID AGENT_FOLDER")
        return
    print_table(["CHAT", "KIND", "AGENT", "ENGAGE", "SENDERS", "IGNORED", "STRANGERS"], table)
