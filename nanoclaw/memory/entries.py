"""A memory's text and the changes the agent's `memory` tool asks for (pure).

A memory is plain text, one entry per line, at most MAX_CHARS in all. `add` appends a line;
`replace` and `remove` name an entry by `old_text`, which must match exactly one of them (the whole
entry, or a part of exactly one). A line that holds a host secret's value or something shaped like a
credential is refused: memory is shown to the model in every conversation of its scope, and a
prompt injection that got a key written there would have it repeated for good.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHARS = 4000
ACTIONS = ("add", "replace", "remove")
CREDENTIAL = re.compile(
    r"(sk-[A-Za-z0-9_-]{8,}|xox[abp]-[A-Za-z0-9-]{8,}|ghp_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|AKIA[0-9A-Z]{12,}|-----BEGIN|(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/=_-]{32,}(?![A-Za-z0-9+/=_-]))")
MIN_SECRET = 8  # a host secret shorter than this is not looked for (it would match ordinary words)


class Refused(ValueError):
    """The change is not made; the message says why (the agent reads it)."""


@dataclass(frozen=True)
class Change:
    action: str
    text: str = ""
    old_text: str = ""


def entries(text: str) -> list[str]:
    return [line for line in (text or "").splitlines() if line.strip()]


def _clean(raw) -> str:
    text = " ".join(str(raw or "").split())  # one line: an entry is a line
    if not text:
        raise Refused("the entry is empty")
    return text


def check_line(line: str, secrets: tuple[str, ...]) -> None:
    if any(s and len(s) >= MIN_SECRET and s in line for s in secrets):
        raise Refused("that would store one of the host's secrets; memory never holds keys or tokens")
    if CREDENTIAL.search(line):
        raise Refused("that looks like a key, a token or a credential; memory never holds those (personal "
                      "facts are fine)")


def _one(current: list[str], old: str) -> int:
    old = " ".join(str(old or "").split())
    if not old:
        raise Refused("old_text is empty: say which entry")
    exact = [i for i, e in enumerate(current) if e == old]
    found = exact or [i for i, e in enumerate(current) if old in e]
    if not found:
        raise Refused(f"no entry matches {old[:80]!r}")
    if len(found) > 1:
        raise Refused(f"{len(found)} entries match {old[:80]!r}: quote more of the one you mean")
    return found[0]


def apply(text: str, change: Change, secrets: tuple[str, ...] = ()) -> str:
    """The memory after the change, or Refused (nothing changes)."""
    current = entries(text)
    if change.action not in ACTIONS:
        raise Refused(f"action must be one of {', '.join(ACTIONS)}")
    if change.action == "add":
        line = _clean(change.text)
        check_line(line, secrets)
        if line in current:
            return "\n".join(current)
        new = current + [line]
    elif change.action == "replace":
        i = _one(current, change.old_text)
        line = _clean(change.text)
        check_line(line, secrets)
        new = current[:i] + [line] + current[i + 1:]
    else:
        i = _one(current, change.old_text)
        new = current[:i] + current[i + 1:]
    joined = "\n".join(new)
    if len(joined) > MAX_CHARS:
        raise Refused(f"full: consolidate first (the memory holds at most {MAX_CHARS} characters; it has "
                      f"{len(text or '')}: replace or remove entries to make room)")
    return joined


def check_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """A whole memory as a person writes it (the CLI, the page): the same rules, line by line."""
    lines = [" ".join(line.split()) for line in (text or "").splitlines() if line.strip()]
    for line in lines:
        check_line(line, secrets)
    joined = "\n".join(lines)
    if len(joined) > MAX_CHARS:
        raise Refused(f"a memory holds at most {MAX_CHARS} characters ({len(joined)} given)")
    return joined
