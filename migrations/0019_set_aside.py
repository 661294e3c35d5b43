"""set_aside_events (issue 60): an event a listener program stopped offering because a running web
program refused it five times in a row, kept with the reason for NANOCLAW_KEEP_HISTORY_DAYS so the owner
can see what was not answered (the page's "Waiting on you", `doctor`)."""


def upgrade(db, sql):
    db.execute_sql(f"""CREATE TABLE set_aside_events (
        id {sql.pk},
        channel VARCHAR(64) NOT NULL,
        event_key VARCHAR(255) NOT NULL,
        reason TEXT NOT NULL,
        payload TEXT NOT NULL,
        set_aside_at {sql.ts} NOT NULL,
        dismissed_at {sql.ts})""")
    db.execute_sql("CREATE INDEX idx_set_aside_events_at ON set_aside_events (set_aside_at)")
