"""A search as the agent words it, turned into each backend's query (pure).

Plain words, no operators passed through: each word matches as a prefix, ignoring case and accents,
every word must match, a "quoted phrase" matches those words in that order. Words are cut into tokens
the way both indexes cut text (letters and digits; everything else separates), so both answer alike.
The index reads each message folded (`fold`: NFKD, combining marks dropped, case folded) and a query is
folded the same way, so a word copied from a message always finds it, however it was typed.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_QUERY = 500
MAX_TERMS = 12
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_PART = re.compile(r'"([^"]*)"|(\S+)')


class BadQuery(ValueError):
    """Nothing to search for; the message says so."""


@dataclass(frozen=True)
class Term:
    tokens: tuple[str, ...]
    phrase: bool  # a quoted phrase: exact tokens; else the last token is a prefix


def fold(text: str) -> str:
    """Text as the index reads it and a query is matched (pure): compatibility-decomposed (NFKD), every
    combining mark and format character dropped (é, an NFD e + ́, the dot of İ), case folded (ß -> ss)."""
    decomposed = unicodedata.normalize("NFKD", text or "")
    return "".join(ch for ch in decomposed if not _dropped(ch)).casefold()


def indexed(text: str) -> str:
    """What the index keeps of a message (pure): its folded tokens, one space apart. Both indexes then
    see the same words: PostgreSQL's parser would keep `0.0`, `a.b` or an address as one token where a
    query's words are cut at the dot."""
    return " ".join(_TOKEN.findall(fold(text)))


def _dropped(ch: str) -> bool:
    """A mark or an invisible format character (U+034F, a zero-width joiner): some have combining class
    0, and PostgreSQL's parser splits a word at them where SQLite's does not."""
    return bool(unicodedata.combining(ch)) or unicodedata.category(ch) in ("Mn", "Me", "Cf")


def parse(raw: str) -> list[Term]:
    text = str(raw or "")[:MAX_QUERY]
    terms: list[Term] = []
    for quoted, word in _PART.findall(text):
        tokens = tuple(_TOKEN.findall(fold(quoted if quoted else word)))
        if tokens:
            terms.append(Term(tokens, phrase=bool(quoted)))
    if not terms:
        raise BadQuery("say what to look for: words, or a \"quoted phrase\"")
    return terms[:MAX_TERMS]


def fts5(terms: list[Term]) -> str:
    """SQLite FTS5 MATCH syntax: each term a quoted phrase (the tokens cannot carry operators), prefix
    terms with `*`, all joined by AND."""
    out = []
    for t in terms:
        phrase = '"' + " ".join(t.tokens) + '"'
        out.append(phrase if t.phrase else phrase + "*")
    return " AND ".join(out)


def tsquery(terms: list[Term]) -> str:
    """PostgreSQL to_tsquery('simple', …): tokens quoted as lexemes, <-> within a term, :* on a prefix."""
    def lexeme(token: str, prefix: bool) -> str:
        return "'" + token.replace("'", "''").replace("\\", "") + "'" + (":*" if prefix else "")
    out = []
    for t in terms:
        parts = [lexeme(tok, not t.phrase and i == len(t.tokens) - 1) for i, tok in enumerate(t.tokens)]
        out.append("(" + " <-> ".join(parts) + ")")
    return " & ".join(out)


def excerpt(text: str, terms: list[Term], width: int = 160) -> str:
    """The text around the first hit (pure): what the agent reads of a long message."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    low = flat.lower()
    at = min((i for i in (low.find(t.tokens[0]) for t in terms) if i >= 0), default=0)
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")
