"""Which pending inbound rows make the next turn: pure functions, no I/O.

Rules (docs/architecture.md): a row is a candidate when it is `pending`, due, and not acknowledged
in our processing_ack. The turn shows the newest `max_n` candidates, oldest first, and only runs
when a candidate has trigger = 1 (trigger = 0 rows wait as context for the next triggering one).

Released rows: when a turn fails we release its rows (delete our claim) so the host can retry
them, and remember each row's `tries`. A released row stops counting as a trigger until the host
bumps its `tries` (the host's retry/backoff decides when to try again) — so a model outage can
never make one runner spin on the same rows. It still rides along as context when a new message
triggers a turn, so nothing the user said is hidden from the agent.

Rows older than the newest `max_n`: context-only ones (trigger = 0) are superseded — the cap chose
the newest context — and are completed with the turn, so they never resurface out of order later;
a triggering one stays pending and gets its own turn next. Except rows *owed*: shown to this CLI in
a turn that failed. The CLI keeps that prompt in its conversation, unanswered, and sends it with the
next one (two user messages in a row become one), so the next answer covers them whether we show
them or not; they ride along beyond the cap, and are completed with that answer rather than being
answered again in a turn of their own (the fault test saw exactly that double).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from .targets import Target


@dataclass(frozen=True)
class InboundRow:
    id: str
    seq: int
    kind: str
    timestamp: str
    trigger: bool
    tries: int
    channel_type: str | None = None
    platform_id: str | None = None
    thread_id: str | None = None
    content: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_db(cls, row: Mapping[str, Any]) -> "InboundRow":
        try:
            content = json.loads(row["content"] or "{}")
        except ValueError:
            content = {"text": str(row["content"])}
        if not isinstance(content, dict):
            content = {"text": str(content)}
        return cls(id=row["id"], seq=int(row["seq"]), kind=row["kind"] or "chat", timestamp=row["timestamp"],
                   trigger=bool(row["trigger"]), tries=int(row["tries"] or 0),
                   channel_type=row["channel_type"], platform_id=row["platform_id"],
                   thread_id=row["thread_id"], content=content)

    @property
    def target(self) -> Target | None:
        if self.channel_type and self.platform_id:
            return Target(self.channel_type, self.platform_id, self.thread_id)
        return None


def is_due(process_after: str | None, now_iso: str) -> bool:
    """Both are UTC ISO strings of one format, so they compare as text."""
    return not process_after or process_after <= now_iso


def _counts_as_trigger(row: InboundRow, released: Mapping[str, int]) -> bool:
    return row.trigger and released.get(row.id) != row.tries


@dataclass(frozen=True)
class TurnPlan:
    batch: list[InboundRow]  # shown to the agent, oldest first
    superseded: list[InboundRow]  # older context-only rows beyond the cap, completed with the turn


def plan_turn(candidates: Iterable[InboundRow], acked: set[str], released: Mapping[str, int],
              max_n: int, owed: AbstractSet[str] = frozenset()) -> TurnPlan | None:
    """The next turn, or None when no turn should run.

    `candidates` are the pending, due rows (any order); `acked` the ids we hold in processing_ack;
    `owed` the ids shown in a failed turn of this CLI (they ride along beyond the cap).
    """
    open_rows = sorted((r for r in candidates if r.id not in acked), key=lambda r: r.seq, reverse=True)
    if not any(_counts_as_trigger(r, released) for r in open_rows):
        return None
    window = open_rows[:max(1, max_n)]
    older = open_rows[max(1, max_n):]
    window += [r for r in older if r.id in owed]
    return TurnPlan(sorted(window, key=lambda r: r.seq),
                    sorted((r for r in older if not r.trigger and r.id not in owed), key=lambda r: r.seq))


def choose_batch(candidates: Iterable[InboundRow], acked: set[str], released: Mapping[str, int],
                 max_n: int) -> list[InboundRow]:
    """Just the rows shown in the next turn, oldest first; [] when no turn should run."""
    plan = plan_turn(candidates, acked, released, max_n)
    return plan.batch if plan else []


def reply_target(batch: list[InboundRow], routing: Target | None) -> Target | None:
    """The chat the turn answers: that of its newest triggering row, else the session's routing."""
    for row in sorted(batch, key=lambda r: r.seq, reverse=True):
        if row.trigger and row.target:
            return row.target
    return routing


def forget_bumped(released: dict[str, int], rows: Iterable[InboundRow]) -> None:
    """Drop released entries the host has retried (tries changed) or that are no longer pending."""
    current = {r.id: r.tries for r in rows}
    for rid in list(released):
        if current.get(rid) != released[rid]:
            del released[rid]
