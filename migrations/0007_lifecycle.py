"""Lifecycle housekeeping (nanoclaw/housekeeping.py and the task timer).

- pending_questions.expired_at: when the card was marked expired (once, at its timeout);
- the open questions, by deadline, for the job that marks them;
- scheduled_tasks by updated_at: the timer follows changes other processes make every second.
"""

STATEMENTS = [
    "ALTER TABLE pending_questions ADD COLUMN expired_at {ts}",
    "CREATE INDEX idx_pending_questions_open ON pending_questions (expires_at) "
    "WHERE answered_at IS NULL AND expired_at IS NULL",
    "CREATE INDEX idx_scheduled_tasks_updated ON scheduled_tasks (updated_at)",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(ts=sql.ts))
