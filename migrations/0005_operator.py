"""Help requests and proposals from agents (issue 7): what an agent asked the operator for.

Both are keyed by (session, ref): `ref` is the id the agent's tool made up and showed the agent,
so a system row applied twice (after a host restart) finds its request instead of making a second
one. States: help open|answered; proposal pending|approved|rejected|failed (applying it failed).
"""

TABLES = [
    """CREATE TABLE help_requests (
        id {pk},
        session_id VARCHAR(64) NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        ref VARCHAR(32) NOT NULL,
        text TEXT NOT NULL,
        state VARCHAR(16) NOT NULL DEFAULT 'open',
        approver_user_id VARCHAR(255),
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        answer TEXT,
        answered_by VARCHAR(255),
        answered_at {ts},
        created_at {ts} NOT NULL,
        UNIQUE (session_id, ref))""",
    """CREATE TABLE pending_proposals (
        id {pk},
        session_id VARCHAR(64) NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        ref VARCHAR(32) NOT NULL,
        kind VARCHAR(32) NOT NULL,
        payload TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        state VARCHAR(16) NOT NULL DEFAULT 'pending',
        approver_user_id VARCHAR(255),
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        decided_by VARCHAR(255),
        decided_at {ts},
        note TEXT,
        created_at {ts} NOT NULL,
        UNIQUE (session_id, ref))""",
    "CREATE INDEX idx_help_requests_state ON help_requests (state)",
    "CREATE INDEX idx_pending_proposals_state ON pending_proposals (state)",
]


def upgrade(db, sql):
    for statement in TABLES:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
