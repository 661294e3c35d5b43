"""sessions.engaged_at (issue 17): when the session first got a message that engaged its agent.

`mention-sticky` makes a thread sticky only from that moment: a session made just to keep
unmentioned messages as context (`--ignored accumulate`) no longer answers without a mention.
Sessions that exist already count as engaged (what they did before)."""

STATEMENTS = [
    "ALTER TABLE sessions ADD COLUMN engaged_at {ts}",
    "UPDATE sessions SET engaged_at = last_active_at",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(ts=sql.ts))
