"""What a model call may cost before its answer says so (pure).

Two uses, one rule: the budget holds this much for each call in flight (so calls started together
cannot each see room that only one of them has), and a successful answer that reports no usage (an
encoding the meter cannot read, a body cut short) is charged this much, never $0. The rule is
deliberately on the dear side: input = request body bytes ÷ 3 tokens, output = the request's
`max_tokens`, both at the dearest rate of the upstream's price table.
"""
from __future__ import annotations

import msgspec

from .prices import Tokens, dearest, micro_usd

BYTES_PER_TOKEN = 3
DEFAULT_MAX_TOKENS = 32_000  # a body without a readable max_tokens: what the CLI asks for at most today


class Head(msgspec.Struct):
    """The top-level fields of a Messages API request the door reads (the rest is skipped unparsed)."""
    model: str | None = None
    max_tokens: int | None = None
    stream: bool | None = None


_decoder = msgspec.json.Decoder(Head)


def head_of(body: bytes) -> Head:
    """The request's model, max_tokens and stream, or an empty Head when the body is not such JSON."""
    try:
        return _decoder.decode(body) if body else Head()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Head()


def tokens(body_bytes: int, max_tokens: int | None) -> Tokens:
    output = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else DEFAULT_MAX_TOKENS
    return Tokens(input=-(-max(body_bytes, 0) // BYTES_PER_TOKEN), output=output)


def cost(body_bytes: int, max_tokens: int | None, table: dict[str, dict[str, float]]) -> int:
    """The estimate in millionths of a dollar."""
    return micro_usd(tokens(body_bytes, max_tokens), dearest(table))
