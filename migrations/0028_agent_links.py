"""agent_links and agent_asks (issue 65): which agent may ask which (a link the owner makes), and each
ask under way with its chain (nanoclaw/delegation/tables.py)."""


def upgrade(db, sql):
    db.execute_sql(f"""CREATE TABLE agent_links (
        id {sql.pk},
        from_agent_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        to_agent_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        mode VARCHAR(16) NOT NULL,
        created_by VARCHAR(255) NOT NULL,
        created_at {sql.ts} NOT NULL)""")
    db.execute_sql("CREATE UNIQUE INDEX idx_agent_links ON agent_links (from_agent_id, to_agent_id)")
    db.execute_sql(f"""CREATE TABLE agent_asks (
        id {sql.pk},
        token VARCHAR(32) NOT NULL UNIQUE,
        card_message_id VARCHAR(255),
        created_at {sql.ts} NOT NULL,
        approver_user_id VARCHAR(255),
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        from_folder VARCHAR(255) NOT NULL,
        from_session VARCHAR(64) NOT NULL,
        to_folder VARCHAR(255) NOT NULL,
        to_session VARCHAR(64),
        request_id VARCHAR(64) NOT NULL,
        chain TEXT NOT NULL,
        wait_s INTEGER NOT NULL DEFAULT 0,
        text TEXT NOT NULL,
        state VARCHAR(16) NOT NULL,
        decided_by VARCHAR(255),
        asked_at {sql.ts} NOT NULL,
        answered_at {sql.ts})""")
    db.execute_sql("CREATE INDEX idx_agent_asks_open ON agent_asks (from_folder, to_folder, state)")
