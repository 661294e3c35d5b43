"""`flask --app app nanoclaw …`: the operator's command line.

Every mistake prints one line and exits 2; nothing here shows a traceback for
bad input.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click
from flask import current_app
from flask.cli import AppGroup

from . import migrate as migrations
from .db import database
from .models import (CHAT_KINDS, ENGAGE_MODES, IGNORED_POLICIES, SENDER_SCOPES, UNKNOWN_SENDER_POLICIES,
                     AgentGroup, AgentGroupMember, MessagingGroup, User, UserRole, Wiring, audit)
from .security import folder_problem, slugify
from .wiring import WiringError, resolve_engage


class Mistake(click.ClickException):
    """A user error: one line on stderr, exit status 2."""
    exit_code = 2

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


class OneLineUsage(click.UsageError):
    def show(self, file=None):
        hint = f" (see: {self.ctx.command_path} --help)" if self.ctx else ""
        click.echo(f"error: {self.format_message()}{hint}", err=True)


def _one_line(fn):
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except click.UsageError as exc:
            if isinstance(exc, OneLineUsage):
                raise
            raise OneLineUsage(exc.format_message(), exc.ctx) from None
    return wrapper


class Command(click.Command):
    make_context = _one_line(click.Command.make_context)


class Group(AppGroup):
    command_class = Command
    group_class = type  # subgroups are Groups too
    make_context = _one_line(AppGroup.make_context)
    resolve_command = _one_line(AppGroup.resolve_command)

    def group(self, *args, **kwargs):
        kwargs.setdefault("cls", Group)
        return super().group(*args, **kwargs)


def settings():
    return current_app.config["NANOCLAW"]


def require_schema() -> None:
    """Refuse politely when the database has not been migrated yet."""
    try:
        todo = migrations.pending(database.obj)
    except Exception as exc:
        raise Mistake(f"cannot reach the database ({str(exc).splitlines()[0]}); check DATABASE_URL") from None
    if todo:
        raise Mistake(f"{len(todo)} migration(s) pending; run: flask --app app nanoclaw migrate")


def get_agent(folder: str) -> AgentGroup:
    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if agent is None:
        known = ", ".join(a.folder for a in AgentGroup.select().order_by(AgentGroup.folder)) or "none yet"
        raise Mistake(f"no agent with folder {folder!r} (agents: {known})")
    return agent


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(line.format(*headers).rstrip())
    for row in rows:
        click.echo(line.format(*[str(x) for x in row]).rstrip())


@click.group("nanoclaw", cls=Group)
def nanoclaw_group():
    """NanoClaw: agents, users, wirings, migrations and the service's helper programs."""


# --- migrations ------------------------------------------------------------------------------

@nanoclaw_group.command("migrate")
@click.option("--status", is_flag=True, help="List applied and pending migrations; change nothing.")
def migrate_cmd(status):
    """Apply pending database migrations (safe to run again)."""
    db = database.obj
    try:
        db.connect(reuse_if_open=True)
        if status:
            applied = migrations.applied_versions(db)
            for m in migrations.discover():
                state = "applied" if m.version in applied else "pending"
                click.echo(f"{m.version:04d}_{m.name}  {state}")
            return
        done = migrations.apply_pending(db, log=lambda line: click.echo(line))
    except migrations.MigrationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # an unreachable database is an operator problem, not a crash
        raise Mistake(f"cannot reach the database ({str(exc).splitlines()[0]}); check DATABASE_URL") from None
    click.echo(f"schema at version {migrations.current_version(db)}" + ("" if done else " (nothing to do)"))


# --- agents ----------------------------------------------------------------------------------

@nanoclaw_group.group("agent")
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
    if not claude_md.exists():
        claude_md.write_text(f"# {name}\n\n{instructions}\n")
    with database.atomic():
        AgentGroup.create(name=name, folder=folder, instructions=instructions)
        audit("cli", "agent.create", folder, name=name)
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
    from .image_prune import forget_agent
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


# --- users -----------------------------------------------------------------------------------

@nanoclaw_group.group("user")
def user_group():
    """Users and their roles (owner, admin, member)."""


def parse_user_id(user_id: str) -> str:
    channel, sep, native = user_id.partition(":")
    if not sep or not channel or not native or not channel.isidentifier():
        raise Mistake(f"user id {user_id!r} must look like <channel>:<platform user id>, e.g. telegram:42")
    return user_id


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


# --- wirings ---------------------------------------------------------------------------------

def _kind_default(existing: MessagingGroup | None, kind: str | None) -> str:
    if kind:
        return kind
    return existing.kind if existing else "dm"


# Telegram group ids are negative numbers: let "-100123" be an argument, not an option.
CHAT_ID_ARGS = {"ignore_unknown_options": True}


@nanoclaw_group.command("wire", context_settings=CHAT_ID_ARGS)
@click.argument("channel")
@click.argument("chat_id")
@click.argument("agent_folder")
@click.option("--kind", type=click.Choice(CHAT_KINDS), help="Chat kind (default: the chat's known kind, else dm).")
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
def wire(channel, chat_id, agent_folder, kind, engage, pattern, sender_scope, ignored, unknown_senders, name):
    """Wire the chat (CHANNEL, CHAT_ID) to an agent, or update an existing wiring.

    \b
    Defaults by kind: dm -> pattern '.', group -> mention, thread -> mention-sticky.
    Example: flask --app app nanoclaw wire telegram 42 andy
    """
    require_schema()
    if not channel.isidentifier():
        raise Mistake(f"channel {channel!r} is not a channel name (e.g. telegram, slack, web, cli)")
    agent = get_agent(agent_folder)
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    chat_kind = _kind_default(mg, kind)
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
        if wiring is None:
            Wiring.create(messaging_group=mg, agent_group=agent, **values)
            verb = "wired"
        else:
            Wiring.update(**values).where(Wiring.id == wiring.id).execute()
            verb = "updated"
        audit("cli", f"wiring.{'create' if verb == 'wired' else 'update'}", f"{channel}:{chat_id}",
              agent=agent_folder, kind=chat_kind, **values)
    how = engage_settings.engage_mode + (f" {engage_settings.engage_pattern!r}" if engage_settings.engage_pattern else "")
    click.echo(f"{verb} {channel}:{chat_id} ({chat_kind}) -> {agent_folder}: engage {how}, "
               f"senders {engage_settings.sender_scope}, ignored {engage_settings.ignored_message_policy}")


@nanoclaw_group.command("unwire", context_settings=CHAT_ID_ARGS)
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


@nanoclaw_group.command("wirings")
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


# --- extra mounts ----------------------------------------------------------------------------

@nanoclaw_group.group("mount")
def mount_group():
    """Extra host folders an agent may see at /workspace/extra/<name> (read-only by default).

    Every mount must lie under a root of the allowlist file (NANOCLAW_MOUNT_ALLOWLIST,
    default ~/.config/nanoclaw/mount-allowlist.json), which lives outside the project.
    """


def declared_mounts(agent: AgentGroup) -> list[dict]:
    return list((agent.container_config or {}).get("mounts", []))


def save_mounts(agent: AgentGroup, mounts: list[dict]) -> None:
    config = dict(agent.container_config or {})
    config["mounts"] = mounts
    AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()


@mount_group.command("add")
@click.argument("folder")
@click.argument("host_path")
@click.option("--name", default="", help="Name under /workspace/extra/ (default: the folder's own name).")
@click.option("--rw", is_flag=True, help="Let the agent change files there (the allowlist root must allow it).")
def mount_add(folder, host_path, name, rw):
    """Let agent FOLDER see HOST_PATH (validated against the allowlist now and at every start)."""
    from .mounts import MountRefused, MountRequest, current_allowlist, validate_mount
    require_schema()
    agent = get_agent(folder)
    try:
        approved = validate_mount(MountRequest(host_path, name, rw), current_allowlist(settings().mount_allowlist))
    except MountRefused as exc:
        raise Mistake(str(exc)) from None
    mounts = [m for m in declared_mounts(agent) if m["name"] != approved.name]
    mounts.append({"host_path": host_path, "name": approved.name, "readwrite": rw})
    with database.atomic():
        save_mounts(agent, mounts)
        audit("cli", "mount.add", folder, host_path=str(approved.host_path), name=approved.name, readwrite=rw)
    mode = "read-write" if rw else "read-only"
    click.echo(f"{folder} will see {approved.host_path} at /workspace/extra/{approved.name} ({mode}) "
               "from its next sandbox start")
    if rw:
        click.echo(f"warning: read-write: the agent can create, change and delete any file under "
                   f"{approved.host_path}; remove with: flask --app app nanoclaw mount remove {folder} {approved.name}",
                   err=True)


@mount_group.command("list")
@click.argument("folder", required=False)
def mount_list(folder):
    """Show declared extra mounts (of one agent, or of all)."""
    require_schema()
    agents = [get_agent(folder)] if folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = [[a.folder, m["name"], "rw" if m.get("readwrite") else "ro", m["host_path"]]
            for a in agents for m in declared_mounts(a)]
    if not rows:
        click.echo("no extra mounts; add one: flask --app app nanoclaw mount add FOLDER HOST_PATH")
        return
    print_table(["AGENT", "NAME", "MODE", "HOST PATH"], rows)


@mount_group.command("remove")
@click.argument("folder")
@click.argument("name")
def mount_remove(folder, name):
    """Remove the extra mount NAME from agent FOLDER (from its next sandbox start)."""
    require_schema()
    agent = get_agent(folder)
    mounts = declared_mounts(agent)
    if not any(m["name"] == name for m in mounts):
        raise Mistake(f"{folder} has no extra mount named {name!r}")
    with database.atomic():
        save_mounts(agent, [m for m in mounts if m["name"] != name])
        audit("cli", "mount.remove", folder, name=name)
    click.echo(f"removed mount {name!r} from {folder}")


# --- the service's helper programs -----------------------------------------------------------

@nanoclaw_group.command("proxy")
def proxy_cmd():
    """Run the sandbox door: one unix socket per agent group (supervisord's `proxy` program).

    SIGHUP rescans agent groups and re-reads every policy file at once; SIGTERM stops and removes the sockets.
    """
    from .db import database as db
    from .proxy import serve_forever
    from .proxy.policy_files import audit_change

    def list_folders():
        with db.connection_context():
            return [a.folder for a in AgentGroup.select(AgentGroup.folder)]
    serve_forever(settings(), list_folders, on_policy_change=audit_change)


@nanoclaw_group.command("discord-gateway")
def discord_gateway_cmd():
    """Run the Discord Gateway client (supervisord's optional `discord-gateway` program): ordinary
    Discord messages arrive only over the Gateway; this feeds them into the same router."""
    from .channels.discord_gateway import run_gateway
    if not settings().platform.get("DISCORD_BOT_TOKEN"):
        raise Mistake("DISCORD_BOT_TOKEN is not set; the Discord Gateway needs the bot token")
    run_gateway(settings())


@nanoclaw_group.command("chat")
@click.argument("agent_folder")
@click.argument("message")
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for the reply.")
def chat_cmd(agent_folder, message, timeout):
    """Send MESSAGE to an agent as the owner (the local `cli` channel) and print the reply.

    Works with the service running or not: without it, this command opens the
    agent's door to the model itself and stops the sandbox when done.
    """
    from .chat import ChatError, chat
    require_schema()
    if not message.strip():
        raise Mistake("the message is empty")
    errors = []

    def show(reply):
        (errors.append(reply) if reply.error else None)
        click.echo(reply.text, err=reply.error)
    try:
        chat(settings(), agent_folder, message, timeout=timeout, echo=show)
    except ChatError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if errors:
        sys.exit(1)


@nanoclaw_group.group("image")
def image_group():
    """The Docker image agents run in."""


@image_group.command("build")
@click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Extra CA certificates (PEM) to trust during the build, e.g. behind a TLS-inspecting proxy.")
def image_build(ca_bundle):
    """Build the agent image from container/Dockerfile (a local Debian base is made with debootstrap
    when no registry is reachable)."""
    from .runtime.image import ImageBuildError, build_image
    try:
        timings = build_image(settings(), ca_bundle=ca_bundle, progress=lambda line: click.echo(line))
    except ImageBuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # no engine: say how to get one
        raise Mistake(f"cannot build the image: {str(exc).splitlines()[0]} "
                      "(is a Docker engine running? scripts/docker-engine.sh start)") from None
    click.echo("built " + settings().agent_image + " (" +
               ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()) + ")")


from .channels.telegram import telegram_cli  # noqa: E402  (a platform module owns its own commands)
nanoclaw_group.add_command(telegram_cli)


# --- the web page ----------------------------------------------------------------------------

@nanoclaw_group.group("admin")
def admin_group():
    """Access to the web page for owners and admins."""


@admin_group.command("set-password")
@click.argument("user_id")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin (scripts).")
def admin_set_password(user_id, password_stdin):
    """Set USER_ID's password for the web page (prompted twice; ends their open logins)."""
    from .web.auth import AuthError, require_operator, set_password
    require_schema()
    try:
        require_operator(parse_user_id(user_id))
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = click.prompt("New password", hide_input=True, confirmation_prompt=True)
        set_password(user_id, password)
    except AuthError as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"password set for {user_id}; log in at {page_base()}/login")


def page_base() -> str:
    return settings().public_url or f"http://127.0.0.1:{settings().port}"


@admin_group.command("login-link")
@click.argument("user_id")
@click.option("--minutes", default=15, show_default=True, type=click.IntRange(1, 24 * 60),
              help="How long the link stays valid.")
@click.option("--base-url", default=None,
              help="Where the page is reached (default: NANOCLAW_PUBLIC_URL, else http://127.0.0.1:NANOCLAW_PORT).")
def admin_login_link(user_id, minutes, base_url):
    """Print a one-time login link for USER_ID (works once, for --minutes)."""
    from .web.auth import AuthError, issue_login_link
    require_schema()
    try:
        token = issue_login_link(parse_user_id(user_id), minutes=minutes)
    except AuthError as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"{(base_url or page_base()).rstrip('/')}/login/link/{token}")
    click.echo(f"(valid once, for {minutes} minutes)", err=True)


# --- scheduled tasks -------------------------------------------------------------------------

@nanoclaw_group.group("tasks")
def tasks_group():
    """Tasks the agents scheduled: list, pause, resume, cancel (times shown in TZ)."""


@tasks_group.command("list")
@click.option("--agent", "agent_folder", help="Only this agent's tasks.")
def tasks_list(agent_folder):
    """Show open (active and paused) tasks with their next run in local time."""
    from .scheduling import local_text, open_tasks, schedule_text
    require_schema()
    tasks = open_tasks(get_agent(agent_folder) if agent_folder else None)
    if not tasks:
        click.echo("no scheduled tasks" + (f" for {agent_folder}" if agent_folder else ""))
        return
    tz = settings().timezone
    print_table(["ID", "AGENT", "STATUS", "SCHEDULE", "NEXT RUN", "CONTEXT", "PROMPT"],
                [[t.id, t.agent_group.folder, t.status, schedule_text(t),
                  local_text(t.next_run_at, tz) if t.status == "active" else "-", t.context_mode,
                  (" ".join(t.prompt.split()))[:50]] for t in tasks])


def _task_action(task_id: str, action: str) -> None:
    from .scheduling import TaskError, local_text, set_state
    require_schema()
    try:
        task = set_state(None, task_id, action, tz=settings().timezone)
    except TaskError as exc:
        raise Mistake(str(exc)) from None
    audit("cli", f"task.{action}", task.id)
    done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
    click.echo(f"task {task.id} {done}" + (f"; next run {local_text(task.next_run_at, settings().timezone)}"
                                           if action == "resume" else ""))


@tasks_group.command("pause")
@click.argument("task_id")
def tasks_pause(task_id):
    """Pause TASK_ID (it keeps its schedule)."""
    _task_action(task_id, "pause")


@tasks_group.command("resume")
@click.argument("task_id")
def tasks_resume(task_id):
    """Resume TASK_ID; runs missed while paused are skipped."""
    _task_action(task_id, "resume")


@tasks_group.command("cancel")
@click.argument("task_id")
def tasks_cancel(task_id):
    """Cancel TASK_ID for good."""
    _task_action(task_id, "cancel")
