"""Usage and budgets (issue 31): what each agent's model calls cost, per day in the owner's time zone,
and what it may spend.

model_usage: one row per day, agent, session and model, summed by the proxy after every call
(cost in millionths of a dollar, so sums are exact; `priced_as` names the price table's entry, and
`unpriced` marks a model the table did not know, priced at the dearest rate). budgets: an agent's
daily and monthly limits, and the owner's ceilings a scoped admin cannot raise them past.
budget_events: an agent's spending crossing 80 % (warn) or its limit (block) in a period, kept so
the chat and the owner are told once, with the card the owner decides on.
"""

STATEMENTS = [
    """CREATE TABLE model_usage (
        id {pk},
        day VARCHAR(10) NOT NULL,
        agent_folder VARCHAR(255) NOT NULL,
        session_id VARCHAR(64) NOT NULL DEFAULT '',
        model VARCHAR(255) NOT NULL,
        calls INTEGER NOT NULL DEFAULT 0,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0,
        cache_read_tokens BIGINT NOT NULL DEFAULT 0,
        cost_micro_usd BIGINT NOT NULL DEFAULT 0,
        priced_as VARCHAR(255),
        unpriced BOOLEAN NOT NULL DEFAULT {false},
        UNIQUE (day, agent_folder, session_id, model))""",
    "CREATE INDEX idx_model_usage_agent_day ON model_usage (agent_folder, day)",
    """CREATE TABLE budgets (
        agent_folder VARCHAR(255) PRIMARY KEY,
        daily_usd REAL,
        monthly_usd REAL,
        ceiling_daily_usd REAL,
        ceiling_monthly_usd REAL,
        updated_by VARCHAR(255),
        updated_at {ts})""",
    """CREATE TABLE budget_events (
        id {pk},
        token VARCHAR(32) NOT NULL UNIQUE,
        agent_folder VARCHAR(255) NOT NULL,
        period VARCHAR(16) NOT NULL,
        kind VARCHAR(8) NOT NULL,
        session_id VARCHAR(64) NOT NULL DEFAULT '',
        spent_micro_usd BIGINT NOT NULL DEFAULT 0,
        limit_micro_usd BIGINT NOT NULL DEFAULT 0,
        created_at {ts} NOT NULL,
        told_at {ts},
        approver_user_id VARCHAR(255),
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        decided_by VARCHAR(255),
        UNIQUE (agent_folder, period, kind, session_id))""",
]


def upgrade(db, sql):
    false = "FALSE" if sql.bool_true == "TRUE" else "0"
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts, false=false))
