"""What agents remember (`memory`) and what they can look up (`history`), as the owner sees and
changes it. Every change is recorded (who, when) and listed by `memory show`."""
from __future__ import annotations

import click

from ..memory import entries, history, notes, query
from ..memory.ops import local_to_utc, render
from ..memory.scopes import Reach, Scope
from ..memory.tables import MemoryChange
from .base import WHY, Mistake, channel_names, get_agent, group, parse_user_id, require_schema, settings


def _scope(chat, user) -> Scope | None:
    if chat and user:
        raise Mistake("give --chat or --user, not both")
    if chat:
        channel, chat_id = chat
        if channel not in channel_names():
            raise Mistake(f"--chat: the channel must be one of {', '.join(channel_names())}")
        return Scope("chat", f"{channel}:{chat_id}")
    if user:
        return Scope("private", parse_user_id(user))
    return None


SCOPE_OPTIONS = [click.option("--chat", nargs=2, metavar="CHANNEL CHAT_ID", help="A chat's memory (telegram -100123)."),
                 click.option("--user", metavar="USER_ID", help="A person's private memory (telegram:123).")]


def scoped(fn):
    for option in reversed(SCOPE_OPTIONS):
        fn = option(fn)
    return fn


@group("memory")
def memory_group():
    """What an agent remembers: a person's private memory (their own conversations) and one per chat."""


@memory_group.command("show")
@click.argument("folder")
@scoped
def memory_show(folder, chat, user):
    """Agent FOLDER's memories (or one scope's) and their recent changes."""
    require_schema()
    agent, scope = get_agent(folder), _scope(chat, user)
    names = [scope.name] if scope else notes.visible_scopes(agent.folder)
    if not names:
        click.echo(f"{folder} remembers nothing yet")
        return
    for name in names:
        text = notes.text_of(agent.folder, Scope.parse(name))
        click.echo(f"== {name} ({len(text)}/{entries.MAX_CHARS} characters)")
        click.echo(text or "(empty)")
    changes = (MemoryChange.select().where(MemoryChange.agent_folder == agent.folder)
               .order_by(MemoryChange.id.desc()).limit(10))
    if scope:
        changes = changes.where(MemoryChange.scope == scope.name)
    rows = list(changes)
    if rows:
        click.echo("== recent changes")
        for c in rows:
            where = f" in session {c.session_id}" if c.session_id else ""
            click.echo(f"{c.created_at:%Y-%m-%d %H:%M} UTC {c.actor} {c.action} {c.scope}{where}")


@memory_group.command("edit")
@click.argument("folder")
@scoped
@click.option("--text", required=True, help="The whole memory, one entry per line.")
@WHY
def memory_edit(folder, chat, user, text, why):
    """Replace a scope's whole memory of agent FOLDER (the same rules as the agent's: no secrets, 4,000 characters)."""
    require_schema()
    agent, scope = get_agent(folder), _scope(chat, user)
    if scope is None:
        raise Mistake("say whose memory: --chat CHANNEL CHAT_ID or --user USER_ID")
    try:
        _before, after = notes.person_change(settings(), "cli", agent.folder, scope, text.replace("\\n", "\n"), why=why)
    except entries.Refused as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"{scope.name}: {len(entries.entries(after))} entr(ies); the agent sees it from its next conversation")


@memory_group.command("clear")
@click.argument("folder")
@scoped
@WHY
def memory_clear(folder, chat, user, why):
    """Empty a scope's memory of agent FOLDER (or every scope's, with neither option)."""
    require_schema()
    agent, scope = get_agent(folder), _scope(chat, user)
    names = [scope.name] if scope else notes.visible_scopes(agent.folder)
    for name in names:
        notes.person_change(settings(), "cli", agent.folder, Scope.parse(name), "", action="clear", why=why)
    click.echo(f"cleared {len(names)} memor{'y' if len(names) == 1 else 'ies'} of {folder}")


@group("history")
def history_group():
    """What an agent saw and said, as its search_history tool finds it."""


@history_group.command("search")
@click.argument("folder")
@click.argument("words")
@click.option("--limit", type=click.IntRange(1, 50), default=10, show_default=True)
def history_search(folder, words, limit):
    """Search everything agent FOLDER saw for WORDS (each a word's start; "a phrase" in quotes)."""
    require_schema()
    agent = get_agent(folder)
    try:
        terms, hits = history.search(agent.folder, Reach(Scope("private", "cli"), True, "", ""), words, limit=limit)
    except query.BadQuery as exc:
        raise Mistake(str(exc)) from None
    click.echo(render(hits, terms, settings().timezone, True))


@history_group.command("forget")
@click.argument("folder")
@click.option("--chat", nargs=2, metavar="CHANNEL CHAT_ID", help="Forget one chat's history.")
@click.option("--before", metavar="DATE", help="Forget what was said before this local date (2026-01-01).")
@WHY
def history_forget(folder, chat, before, why):
    """Remove agent FOLDER's history of a chat, or before a date, from the index (and the answers of its
    searches kept in its sessions). Transcripts and backups are not edited: say so to whoever asked."""
    from ..memory.forget import scrub_answers
    from ..models import audit
    require_schema()
    agent = get_agent(folder)
    if not chat and not before:
        raise Mistake("say what to forget: --chat CHANNEL CHAT_ID and/or --before DATE")
    try:
        cutoff = local_to_utc(before, settings().timezone) if before else None
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    removed = history.forget(agent.folder, channel=chat[0] if chat else None, chat_id=chat[1] if chat else None,
                             before=cutoff)
    scrubbed = scrub_answers(settings(), agent.folder)
    audit("cli", "history.forget", agent.folder, chat=":".join(chat) if chat else None, before=before,
          removed=removed, **({"why": why} if why else {}))
    click.echo(f"forgot {removed} message(s) of {folder}; emptied {scrubbed} search answer(s) kept in its sessions. "
               "The agent's transcripts and your backups still hold what was said: they are not edited.")
