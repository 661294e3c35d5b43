"""Webhook intake (issue 4): the acknowledged event is kept until it is routed.

A webhook is acknowledged once its event is in inbound_events (the dedup row now carries the
event as JSON); routing runs after the acknowledgement and stamps routed_at (and drops the
payload). A row with a payload and no routed_at was accepted by a process that died before
routing it: the recovery pass routes it. Rows from before this migration were routed
synchronously, so they are marked routed.
"""

STATEMENTS = [
    "ALTER TABLE inbound_events ADD COLUMN payload TEXT",
    "ALTER TABLE inbound_events ADD COLUMN routed_at {ts}",
    "UPDATE inbound_events SET routed_at = received_at",
    "CREATE INDEX idx_inbound_events_unrouted ON inbound_events (received_at) WHERE routed_at IS NULL",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(ts=sql.ts))
