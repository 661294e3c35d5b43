"""The ledger the proxy writes after every model call, and the sums budgets and pages read.

One row per day (the owner's time zone), agent, session and model, summed in place with one
statement (INSERT … ON CONFLICT DO UPDATE: both SQLite and PostgreSQL), so a call costs one write.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

from ..db import database, hot_write
from .prices import Price, Tokens, micro_usd


def now() -> datetime:
    """The clock budgets go by (Spending and SpendGate take another in its place: tests move time)."""
    return datetime.now(timezone.utc)


def today(tz: str, at: datetime | None = None) -> date:
    """The owner's date at `at` (now by default)."""
    return (at or now()).astimezone(ZoneInfo(tz)).date()


def record(agent_folder: str, session_id: str, model: str, tokens: Tokens, price: Price, day: date, *,
           upstream: str = "anthropic", asked_model: str = "", switched: bool = False) -> int:
    """Add one call; its cost in millionths of a dollar. `model` answered, on `upstream`, a call that
    asked for `asked_model` (`switched`: a fallback of the agent's chain answered it)."""
    cost = micro_usd(tokens, price)
    p = database.param
    with hot_write():
        database.execute_sql(
            "INSERT INTO model_usage (day, agent_folder, session_id, upstream, asked_model, model, calls, switched, "
            "input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_micro_usd, priced_as, unpriced) "
            f"VALUES ({', '.join([p] * 15)}) ON CONFLICT (day, agent_folder, session_id, upstream, asked_model, model) "
            "DO UPDATE SET calls = model_usage.calls + 1, switched = model_usage.switched + excluded.switched, "
            "input_tokens = model_usage.input_tokens + excluded.input_tokens, "
            "output_tokens = model_usage.output_tokens + excluded.output_tokens, "
            "cache_write_tokens = model_usage.cache_write_tokens + excluded.cache_write_tokens, "
            "cache_read_tokens = model_usage.cache_read_tokens + excluded.cache_read_tokens, "
            "cost_micro_usd = model_usage.cost_micro_usd + excluded.cost_micro_usd, "
            "priced_as = excluded.priced_as, unpriced = excluded.unpriced",
            (day.isoformat(), agent_folder, session_id or "", upstream or "anthropic", asked_model or "",
             model or "unknown", 1, int(switched), tokens.input, tokens.output, tokens.cache_write,
             tokens.cache_read, cost, price.name, not price.known))
    return cost


def record_speech(agent_folder: str, session_id: str, model: str, chars: int, usd_per_1k_chars: float,
                  day: date) -> int:
    """Add what a voice answer cost (spoken on the host, outside the door): a call on upstream `speech`, its
    characters counted as output tokens at the set price (USD per 1,000 characters = 1,000× per million)."""
    return record(agent_folder, session_id, model, Tokens(output=chars),
                  Price("speech", {"output": usd_per_1k_chars * 1000}, True), day, upstream="speech",
                  asked_model=model)


def record_search(agent_folder: str, session_id: str, provider: str, usd_per_search: float, day: date) -> int:
    """Add one web search the host made for an agent (outside the door): a use on upstream `search`."""
    return record(agent_folder, session_id, provider, Tokens(web_search=1),
                  Price("search", {"web_search": usd_per_search * 1_000_000}, True), day, upstream="search",
                  asked_model=provider)


@dataclass(frozen=True)
class Spent:
    day_micro: int
    month_micro: int


def spent(agent_folder: str, day: date) -> Spent:
    """What the agent spent on `day` and in its month so far (millionths of a dollar)."""
    p = database.param
    first = day.replace(day=1).isoformat()
    row = database.execute_sql(
        f"SELECT COALESCE(SUM(CASE WHEN day = {p} THEN cost_micro_usd ELSE 0 END), 0), "
        f"COALESCE(SUM(cost_micro_usd), 0) FROM model_usage WHERE agent_folder = {p} AND day >= {p} AND day <= {p}",
        (day.isoformat(), agent_folder, first, day.isoformat())).fetchone()
    return Spent(int(row[0]), int(row[1]))
