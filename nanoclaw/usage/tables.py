"""The usage and budget tables (migration 0013_usage), as peewee models on the central database."""
from __future__ import annotations

import peewee as pw

from ..models import ApproverCard, Base, utcnow


class ModelUsage(Base):
    day = pw.CharField(max_length=10)                # in the owner's time zone
    agent_folder = pw.CharField()
    session_id = pw.CharField(default="")            # '' when the call did not say which (or lied)
    upstream = pw.CharField(default="anthropic")     # the model upstream that answered
    asked_model = pw.CharField(default="")           # the model the agent's call asked for
    model = pw.CharField()                           # the model that answered
    calls = pw.IntegerField(default=0)
    switched = pw.IntegerField(default=0)            # calls a fallback answered (failover at the door)
    input_tokens = pw.BigIntegerField(default=0)
    output_tokens = pw.BigIntegerField(default=0)
    cache_write_tokens = pw.BigIntegerField(default=0)
    cache_read_tokens = pw.BigIntegerField(default=0)
    cost_micro_usd = pw.BigIntegerField(default=0)
    priced_as = pw.CharField(null=True)
    unpriced = pw.BooleanField(default=False)

    class Meta:
        table_name = "model_usage"
        indexes = ((("day", "agent_folder", "session_id", "upstream", "asked_model", "model"), True),)


class Budget(Base):
    agent_folder = pw.CharField(primary_key=True)
    daily_usd = pw.FloatField(null=True)
    monthly_usd = pw.FloatField(null=True)
    ceiling_daily_usd = pw.FloatField(null=True)     # the owner's: a scoped admin sets up to it
    ceiling_monthly_usd = pw.FloatField(null=True)
    updated_by = pw.CharField(null=True)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "budgets"


class BudgetEvent(ApproverCard):
    """An agent's spending crossed 80 % (warn) or its limit (block) in a period: told once."""
    agent_folder = pw.CharField()
    period = pw.CharField(max_length=16)             # day:2026-11-26 | month:2026-11
    kind = pw.CharField(max_length=8)                # warn | block
    session_id = pw.CharField(default="")            # block: the session whose call was refused
    spent_micro_usd = pw.BigIntegerField(default=0)
    limit_micro_usd = pw.BigIntegerField(default=0)
    told_at = pw.DateTimeField(null=True)
    decided_by = pw.CharField(null=True)

    class Meta:
        table_name = "budget_events"
        indexes = ((("agent_folder", "period", "kind", "session_id"), True),)


class ModelOutage(ApproverCard):
    """Every model of an agent's chain failed for a call: its owner is told once per outage, which
    ends (ended_at) at the agent's next answered call."""
    agent_folder = pw.CharField()
    upstream = pw.CharField()                        # the primary's
    status = pw.IntegerField(default=0)              # the primary's answer (0: unreachable)
    detail = pw.CharField(max_length=500, default="")
    ended_at = pw.DateTimeField(null=True)
    told_at = pw.DateTimeField(null=True)
    decided_by = pw.CharField(null=True)

    class Meta:
        table_name = "model_outages"
