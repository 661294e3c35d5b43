"""Models per agent and upstreams (issue 41): the ledger records which upstream answered, the model the
call asked for and the one that answered, and how many calls a fallback answered; an outage of an
agent's whole chain is kept so its owner is told once (model_outages).

model_usage is made anew with the new key (SQLite cannot change a table's UNIQUE constraint in
place); its rows are kept, as calls to the default upstream asking for the model that answered.
"""

STATEMENTS = [
    """CREATE TABLE model_usage_new (
        id {pk},
        day VARCHAR(10) NOT NULL,
        agent_folder VARCHAR(255) NOT NULL,
        session_id VARCHAR(64) NOT NULL DEFAULT '',
        upstream VARCHAR(64) NOT NULL DEFAULT 'anthropic',
        asked_model VARCHAR(255) NOT NULL DEFAULT '',
        model VARCHAR(255) NOT NULL,
        calls INTEGER NOT NULL DEFAULT 0,
        switched INTEGER NOT NULL DEFAULT 0,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        cache_write_tokens BIGINT NOT NULL DEFAULT 0,
        cache_read_tokens BIGINT NOT NULL DEFAULT 0,
        cost_micro_usd BIGINT NOT NULL DEFAULT 0,
        priced_as VARCHAR(255),
        unpriced BOOLEAN NOT NULL DEFAULT {false},
        UNIQUE (day, agent_folder, session_id, upstream, asked_model, model))""",
    """INSERT INTO model_usage_new (day, agent_folder, session_id, upstream, asked_model, model, calls, input_tokens,
        output_tokens, cache_write_tokens, cache_read_tokens, cost_micro_usd, priced_as, unpriced)
        SELECT day, agent_folder, session_id, 'anthropic', model, model, calls, input_tokens, output_tokens,
        cache_write_tokens, cache_read_tokens, cost_micro_usd, priced_as, unpriced FROM model_usage""",
    "DROP TABLE model_usage",
    "ALTER TABLE model_usage_new RENAME TO model_usage",
    "CREATE INDEX idx_model_usage_agent_day ON model_usage (agent_folder, day)",
    """CREATE TABLE model_outages (
        id {pk},
        token VARCHAR(32) NOT NULL UNIQUE,
        agent_folder VARCHAR(255) NOT NULL,
        upstream VARCHAR(64) NOT NULL,
        status INTEGER NOT NULL DEFAULT 0,
        detail VARCHAR(500) NOT NULL DEFAULT '',
        created_at {ts} NOT NULL,
        ended_at {ts},
        told_at {ts},
        approver_user_id VARCHAR(255),
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        decided_by VARCHAR(255))""",
    "CREATE INDEX idx_model_outages_agent ON model_outages (agent_folder, ended_at)",
]


def upgrade(db, sql):
    false = "FALSE" if sql.bool_true == "TRUE" else "0"
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts, false=false))
