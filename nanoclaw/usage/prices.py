"""What a model call costs: the dated price table in the repo (prices.json), overridden entry by entry
by the owner's own file. A model the table does not know is priced at the dearest known rate and
flagged (logged once, shown on the page): never counted as free."""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("nanoclaw.usage")

TABLE = Path(__file__).with_name("prices.json")
PARTS = ("input", "output", "cache_write", "cache_read")
USES = ("web_search", "web_fetch")  # server tools the provider ran (once the owner allowed them), priced a use
ALL = PARTS + USES


@dataclass(frozen=True)
class Tokens:
    input: int = 0
    output: int = 0
    cache_write: int = 0
    cache_read: int = 0
    web_search: int = 0  # uses, not tokens
    web_fetch: int = 0

    def __add__(self, other: "Tokens") -> "Tokens":
        return Tokens(*(getattr(self, p) + getattr(other, p) for p in ALL))


@dataclass(frozen=True)
class Price:
    name: str                 # the table's entry it was priced as
    rates: dict[str, float]   # USD per million tokens, by part
    known: bool               # False: the dearest known rate stood in for an unknown model


def load(override: Path | None = None) -> dict[str, dict[str, float]]:
    data = json.loads(TABLE.read_text())
    table, tools = data["models"], data["server_tool_use"]
    if override is not None and override.is_file():
        try:
            own = json.loads(override.read_text())
            table, tools = {**table, **own.get("models", {})}, {**tools, **own.get("server_tool_use", {})}
        except (ValueError, AttributeError, TypeError) as exc:
            log.error("the price file %s does not parse (%s); the repo's table is used", override, exc)
    return with_server_tools(table, tools)


@functools.cache
def default_server_tools() -> dict[str, float]:
    """The repo table's server-tool rates (read once: an upstream's own table is priced per call)."""
    return json.loads(TABLE.read_text())["server_tool_use"]


def with_server_tools(table: dict, tools: dict) -> dict[str, dict[str, float]]:
    """Each model's rates with the server tools' (the table's `server_tool_use`, USD per 1,000 uses, kept
    as USD per million like the tokens' so one sum prices a call); a model's own entry wins (pure)."""
    per_million = {use: float(tools.get(f"{use}_requests", 0.0)) * 1000 for use in USES}
    return {name: {**per_million, **rates} for name, rates in table.items()}


_flagged: set[str] = set()


def price_of(model: str, table: dict[str, dict[str, float]]) -> Price:
    """The price of a model id ('claude-sonnet-4-5-20250929' is 'claude-sonnet-4-5'), pure but for
    one log line the first time an unknown model is priced."""
    name = max((n for n in table if (model or "").startswith(n)), key=len, default=None)
    if name is not None:
        return Price(name, table[name], True)
    price = dearest(table)
    if model not in _flagged:
        _flagged.add(model)
        log.warning("model %r is not in the price table: priced as %s (the dearest) until the table knows it",
                    model, price.name)
    return price


def price_for(asked: str, answered: str, table: dict[str, dict[str, float]]) -> Price:
    """A call's price on an upstream's table: by the model asked for, else by the model that answered,
    else the dearest rate (flagged); an empty table (a free upstream) costs nothing."""
    if not table:
        return Price("free", {}, True)
    for model in (asked, answered):
        if model and any(model.startswith(n) for n in table):
            return price_of(model, table)
    return price_of(answered or asked or "", table)


def dearest(table: dict[str, dict[str, float]]) -> Price:
    """The table's dearest entry (by output, then input rate), standing in for what is not known; an
    empty table is free."""
    if not table:
        return Price("free", {}, False)
    name = max(table, key=lambda n: (table[n].get("output", 0.0), table[n].get("input", 0.0)))
    return Price(name, table[name], False)


def micro_usd(tokens: Tokens, price: Price) -> int:
    """The cost in millionths of a dollar (exact integers: sums never drift)."""
    return round(sum(getattr(tokens, part) * price.rates.get(part, 0.0) for part in ALL))
