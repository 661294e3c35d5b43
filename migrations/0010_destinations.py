"""Destinations (issue 17): named places an agent may send to besides the chat it answers.

Every chat an agent is wired to is one of its destinations without a row here (named after the
chat); these rows are the operator's own additions (`destination add`). The host copies the
agent's list into each of its sessions' inbound.db, where the runner reads it and delivery checks
every row against it.
"""

STATEMENTS = [
    """CREATE TABLE agent_destinations (
        id {pk},
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        name VARCHAR(64) NOT NULL,
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        thread_id VARCHAR(255),
        created_by VARCHAR(255) NOT NULL,
        created_at {ts} NOT NULL,
        UNIQUE (agent_group_id, name))""",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
