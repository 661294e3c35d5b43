"""webhooks and webhook_deliveries (issue 65, item 5): the hooks the owner registered, and the
deliveries seen (7 days), so a redelivery is acknowledged and ignored (nanoclaw/hooks/tables.py)."""


def upgrade(db, sql):
    db.execute_sql(f"""CREATE TABLE webhooks (
        id {sql.pk},
        name VARCHAR(64) NOT NULL UNIQUE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        messaging_group_id INTEGER NOT NULL REFERENCES messaging_groups (id) ON DELETE CASCADE,
        template TEXT NOT NULL,
        scheme VARCHAR(16) NOT NULL,
        secret_env VARCHAR(255) NOT NULL,
        events TEXT NOT NULL,
        enabled BOOLEAN NOT NULL DEFAULT {sql.bool_true},
        created_by VARCHAR(255) NOT NULL,
        created_at {sql.ts} NOT NULL)""")
    db.execute_sql(f"""CREATE TABLE webhook_deliveries (
        id {sql.pk},
        hook_id INTEGER NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
        delivery_id VARCHAR(255) NOT NULL,
        outcome VARCHAR(16) NOT NULL,
        seen_at {sql.ts} NOT NULL)""")
    db.execute_sql("CREATE UNIQUE INDEX idx_webhook_deliveries ON webhook_deliveries (hook_id, delivery_id)")
    db.execute_sql("CREATE INDEX idx_webhook_deliveries_seen ON webhook_deliveries (seen_at)")
