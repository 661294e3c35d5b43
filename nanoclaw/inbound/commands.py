"""Slash commands in chat: which may reach the agent, and from whom (pure decisions).

- /clear and /compact act on the agent's conversation: only an owner or an admin of the agent
  may send them; the router passes them on with content["command"] set.
- /stop is the host's own (HOST): it stops the chat's running turn (inbound/stopping.py) and never
  reaches the agent nor is stored. The owner, an admin of the agent and the person whose message
  started the turn may send it; a stranger's /stop is a stranger's message (a card), and
  `/stop@otherbot` in a group is another bot's and ignored.
- Claude Code's own terminal commands (/login, /logout, /config, /remote-control, …) manage the
  CLI inside the sandbox, which the host owns: they never reach the agent.
Anything else that starts with "/" (/start, /help, /weather …) is an ordinary message.
A refused command gets a short reply and is never stored in a session, not even as context.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ADMIN_ONLY = frozenset({"clear", "compact"})
HOST = frozenset({"stop"})
NEVER = frozenset({
    "login", "logout", "config", "settings", "remote-control", "model", "permissions", "mcp", "hooks",
    "agents", "doctor", "status", "cost", "usage", "upgrade", "install-github-app", "terminal-setup",
    "ide", "vim", "exit", "quit", "resume", "rewind", "add-dir", "memory", "privacy-settings",
    "output-style", "statusline", "export", "bug", "feedback", "release-notes", "migrate-installer",
    "sandbox", "plugin", "plugins", "allowed-tools", "bashes", "init",
})

# "/clear", "/clear@andy_bot", "/compact keep the todo list" — the command word, lower-cased.
_COMMAND_RE = re.compile(r"^\s*/([A-Za-z][A-Za-z0-9_-]{0,63})(?:@([A-Za-z0-9_]+))?(?=\s|$)")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reply: str | None = None  # the short answer to a refused command


def parse(text: str | None) -> str | None:
    """The command a message starts with ('clear' for '/clear@bot now'), else None."""
    m = _COMMAND_RE.match(text or "")
    return m.group(1).lower() if m else None


def for_another_bot(text: str | None, mentioned: bool) -> bool:
    """'/stop@otherbot' in a group: a command addressed to a bot by name that the platform did not
    count as a mention of ours (Telegram marks '/cmd@<our name>' as one)."""
    m = _COMMAND_RE.match(text or "")
    return bool(m and m.group(2)) and not mentioned


def may_stop(is_admin: bool, started_it: bool) -> bool:
    """/stop: the owner or an admin of the agent, or the person whose message started the turn."""
    return is_admin or started_it


def verdict(command: str | None, is_admin: bool) -> Verdict:
    """May this command reach the agent, sent by someone who is (or is not) an admin of it?"""
    if command is None:
        return Verdict(True)
    if command in NEVER:
        return Verdict(False, f"/{command} is not available in chat: the host manages the agent's "
                              "login and settings.")
    if command in ADMIN_ONLY and not is_admin:
        return Verdict(False, f"Only an admin can use /{command} here.")
    return Verdict(True)
