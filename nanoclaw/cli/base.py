"""What every command shares: one-line errors (exit 2, never a traceback), the settings, the
checks that come first (the schema is migrated, the agent exists), and a plain table printer."""
from __future__ import annotations

import click
from flask import current_app
from flask.cli import AppGroup, with_appcontext

from .. import migrate as migrations
from .. import platforms
from ..db import database
from ..models import AgentGroup


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


WHY = click.option("--why", help="Why (kept in the audit log with the change).")


def policy_edit(change: str, folder: str, *args):
    """Apply one of operator.policy_edits' changes to agent FOLDER as the CLI; a refused edit is a
    one-line mistake."""
    from ..operator import policy_edits as edits
    require_schema()
    agent = get_agent(folder)
    try:
        return getattr(edits, change)(settings(), "cli", agent, *args)
    except edits.EditRefused as exc:
        raise Mistake(str(exc)) from None


def print_table(headers: list[str], rows: list[list[str]], empty: str | None = None) -> None:
    """Rows under their headers in aligned columns; `empty` instead when there are no rows."""
    if not rows and empty is not None:
        click.echo(empty)
        return
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    click.echo(line.format(*headers).rstrip())
    for row in rows:
        click.echo(line.format(*[str(x) for x in row]).rstrip())


def command(name: str, **kwargs):
    """A top-level command whose usage errors are one line (exit 2), run inside the app context
    (as AppGroup.command would)."""
    def decorate(fn):
        return click.command(name, cls=Command, **kwargs)(with_appcontext(fn))
    return decorate


def group(name: str, **kwargs):
    """A command group whose commands and subgroups all answer usage errors in one line."""
    return click.group(name, cls=Group, **kwargs)


def channel_names() -> tuple[str, ...]:
    """Every channel a chat or a user id can be on: the platforms', the web chat, the local CLI."""
    return (*platforms.names(), "web", "cli")


def parse_user_id(user_id: str) -> str:
    channel, sep, native = user_id.partition(":")
    if not sep or not channel or not native or not channel.isidentifier():
        raise Mistake(f"user id {user_id!r} must look like <channel>:<platform user id>, the channel one of: "
                      f"{', '.join(channel_names())}")
    if channel not in channel_names():  # a typo would make a user nobody ever is
        raise Mistake(f"{channel!r} (in user id {user_id!r}) is not a channel name (one of: {', '.join(channel_names())})")
    return user_id


def native_id(channel: str, value: str) -> str:
    """The id a platform keeps for a person or a DM, from what a person may type: a platform that
    knows people by something other than their phone number (Signal: the ACI uuid) turns a `+number`
    into it through its own service, and says so."""
    platform = platforms.get(channel)
    if platform is None or platform.resolve_id is None or not value.startswith("+"):
        return value
    from ..channels.base import DeliveryError
    try:
        found = platform.part(platform.resolve_id)(settings(), value)
    except DeliveryError as exc:
        raise Mistake(f"cannot tell who {value} is on {platform.label}: {exc}") from None
    click.echo(f"{value} is {channel}:{found} on {platform.label}")
    return found


# Telegram group ids are negative numbers: let "-100123" be an argument, not an option.
CHAT_ID_ARGS = {"ignore_unknown_options": True}
