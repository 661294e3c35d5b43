"""Scheduled tasks (issue 6), and an index so the sweep reads only recently used sessions.

A task belongs to its agent group. `session_id` is the chat it was scheduled from: a `group`
task runs in that session (continuing its conversation), an `isolated` one in a fresh session
per run that answers in the same chat. Times are UTC; `runs` counts fired runs and doubles as
the optimistic lock that keeps a run from being fired twice.
"""

TABLES = [
    """CREATE TABLE scheduled_tasks (
        id VARCHAR(32) PRIMARY KEY,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        session_id VARCHAR(64) REFERENCES sessions (id) ON DELETE SET NULL,
        prompt TEXT NOT NULL,
        schedule_kind VARCHAR(8) NOT NULL,
        schedule_value VARCHAR(255) NOT NULL,
        context_mode VARCHAR(16) NOT NULL DEFAULT 'group',
        status VARCHAR(16) NOT NULL DEFAULT 'active',
        next_run_at {ts},
        last_run_at {ts},
        runs INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        created_at {ts} NOT NULL,
        updated_at {ts} NOT NULL)""",
    "CREATE INDEX idx_scheduled_tasks_due ON scheduled_tasks (status, next_run_at)",
    "CREATE INDEX idx_scheduled_tasks_group ON scheduled_tasks (agent_group_id)",
    "CREATE INDEX idx_sessions_last_active ON sessions (last_active_at)",
]


def upgrade(db, sql):
    for statement in TABLES:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
