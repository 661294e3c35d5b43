"""Memory and recall: `memory` (what you keep for next time) and `search_history` (what was said before).

Both are requests to the host, which keeps memory and the history index and decides from its own
records whose memory this conversation writes and what history it may search: a person's own memory
in their own conversations, the chat's memory in a chat; its own chat's history, or everything for
the owner. The agent's arguments never choose a scope.
"""
from __future__ import annotations

from .context import ToolContext, ToolError
from .scheduling import request


def memory(ctx: ToolContext, action: str, text: str | None = None, old_text: str | None = None) -> str:
    if action not in ("add", "replace", "remove"):
        raise ToolError("action must be add, replace or remove")
    if action in ("add", "replace") and not str(text or "").strip():
        raise ToolError("say the entry in `text`")
    if action in ("replace", "remove") and not str(old_text or "").strip():
        raise ToolError("name the entry in `old_text` (its words, as your memory shows them)")
    return request(ctx, "memory", action=action, text=text, old_text=old_text,
                   late="Your memory will show whether it was saved in the next conversation.")


def search_history(ctx: ToolContext, query: str, limit: int = 10, before: str | None = None,
                   after: str | None = None) -> str:
    if not str(query or "").strip():
        raise ToolError("say what to look for")
    return request(ctx, "search_history", query=str(query)[:500], limit=max(1, min(int(limit or 10), 50)),
                   before=before, after=after, late="Try the search again in a moment.")


memory.blocking = True          # waits for the host: off the SDK's event loop
search_history.blocking = True

SPECS = [
    (memory, "memory",
     "Your lasting memory, kept by the host across conversations (you see it at the start of each one). One "
     "entry per line, at most 4,000 characters: add what is worth keeping (a person's preferences, facts they "
     "tell you to remember, decisions), replace or remove what changed. Never store keys, passwords or tokens. A "
     "change shows from the next conversation.",
     {"type": "object", "properties": {
         "action": {"type": "string", "enum": ["add", "replace", "remove"]},
         "text": {"type": "string", "description": "The entry to add, or the new text of the one you replace."},
         "old_text": {"type": "string", "description": "replace/remove: the entry as your memory shows it (or a "
                                                       "part of exactly one entry)."}},
      "required": ["action"]}),
    (search_history, "search_history",
     "Search what was said in earlier conversations (people's messages and your answers), newest first. Plain "
     "words: each matches the start of a word, all must match; \"quoted words\" match as a phrase.",
     {"type": "object", "properties": {
         "query": {"type": "string"},
         "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many (10)."},
         "before": {"type": "string", "description": "Only before this local date or time (2026-03-29 or "
                                                     "2026-03-29 14:00)."},
         "after": {"type": "string", "description": "Only from this local date or time on."}},
      "required": ["query"]}),
]
