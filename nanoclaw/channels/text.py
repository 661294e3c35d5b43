"""Splitting long replies to fit a platform's message length limit.

Readers notice where a message was cut: prefer a paragraph break, then a line
break, then a space, and cut inside a word only when a single word is longer
than the limit.
"""
from __future__ import annotations

_BOUNDARIES = ("\n\n", "\n", " ")


def _cut_point(window: str) -> tuple[int, int]:
    """(end of this chunk, start of the next) for a window that is one char longer than allowed.

    The window includes the character just past the limit, so a boundary sitting exactly
    at the limit is found too."""
    for sep in _BOUNDARIES:
        at = window.rfind(sep)
        if at > 0:
            return at, at + len(sep)
    end = len(window) - 1
    return end, end


def split_text(text: str, limit: int) -> list[str]:
    """Chunks of at most `limit` characters; [] for empty or blank text (nothing to send)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if not text or not text.strip():
        return []
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        end, start = _cut_point(rest[:limit + 1])
        chunk = rest[:end].rstrip()
        if chunk:
            chunks.append(chunk)
        rest = rest[start:].lstrip("\n")
    if rest.strip():
        chunks.append(rest)
    return chunks
