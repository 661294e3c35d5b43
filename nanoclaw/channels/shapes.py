"""The shapes platform payloads must have before a parser reads them, checked at the edge (msgspec).

Each platform declares what its parser reads as `Shape` structs: only the fields it uses (unknown
keys are ignored, as platforms add them freely), a name a Python keyword or a dotted key takes
given with `field(name=...)`. `read` turns a decoded JSON value into one, leniently where platforms
are (a string of digits for a number), and raises `ShapeError` otherwise; `first_problem` says what
and where, short. A field declared `Str` takes a number as its text too (Discord's snowflakes,
Slack's `ts`, WhatsApp's ids come as either). msgspec rather than pydantic: the web program reads
every webhook through these, and pydantic cost it 8.8 MiB (`docs/benchmarks-history.md`, footprint).
"""
from __future__ import annotations

import msgspec

ShapeError = msgspec.ValidationError
field = msgspec.field
as_dict = msgspec.structs.asdict


class _ByName(msgspec.StructMeta):
    """Every shape's fields are given by name (so a required field may follow optional ones, as
    documentation lists them); msgspec takes kw_only per class, this makes it every class's."""

    def __new__(mcls, name, bases, namespace, **config):
        config.setdefault("kw_only", True)
        return super().__new__(mcls, name, bases, namespace, **config)


class Shape(msgspec.Struct, metaclass=_ByName, frozen=True):
    """A payload's shape: read-only once read."""


class Str(str):
    """A string a platform may also send as a number: read as the number's text (never a bool)."""


def _lenient(kind, value):
    if kind is Str:
        if isinstance(value, str):
            return Str(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Str(value)
        raise TypeError(f"Expected `str`, got `{type(value).__name__}`")
    raise NotImplementedError(kind)


def read(shape, value):
    """`value` (decoded JSON) as `shape`, or ShapeError."""
    return msgspec.convert(value, shape, strict=False, dec_hook=_lenient)


def first_problem(exc: ShapeError) -> str:
    """'message.chat: Expected `object`, got `str`' from msgspec's 'Expected … - at `$.message.chat`'."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    what, marker, where = text.partition(" - at `$")
    if not marker:
        return text
    where = where.rstrip("`").replace("[", ".").replace("]", "").lstrip(".")
    return f"{where}: {what}" if where else what
