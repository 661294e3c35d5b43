"""The central tables that routing needs."""

TABLES = [
    """CREATE TABLE agent_groups (
        id {pk},
        name VARCHAR(255) NOT NULL,
        folder VARCHAR(255) NOT NULL UNIQUE,
        instructions TEXT NOT NULL DEFAULT '',
        container_config TEXT NOT NULL DEFAULT '{{}}',
        created_at {ts} NOT NULL)""",
    """CREATE TABLE messaging_groups (
        id {pk},
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        name VARCHAR(255),
        kind VARCHAR(16) NOT NULL DEFAULT 'dm',
        unknown_sender_policy VARCHAR(32) NOT NULL DEFAULT 'request_approval',
        denied_at {ts},
        created_at {ts} NOT NULL,
        UNIQUE (channel_type, platform_id))""",
    """CREATE TABLE messaging_group_agents (
        id {pk},
        messaging_group_id INTEGER NOT NULL REFERENCES messaging_groups (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        engage_mode VARCHAR(32) NOT NULL DEFAULT 'mention',
        engage_pattern VARCHAR(1024),
        sender_scope VARCHAR(16) NOT NULL DEFAULT 'all',
        ignored_message_policy VARCHAR(16) NOT NULL DEFAULT 'drop',
        session_mode VARCHAR(32) NOT NULL DEFAULT 'shared',
        priority INTEGER NOT NULL DEFAULT 0,
        created_at {ts} NOT NULL,
        UNIQUE (messaging_group_id, agent_group_id))""",
    """CREATE TABLE users (
        id VARCHAR(255) PRIMARY KEY,
        name VARCHAR(255),
        created_at {ts} NOT NULL)""",
    """CREATE TABLE user_roles (
        id {pk},
        user_id VARCHAR(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        role VARCHAR(16) NOT NULL,
        agent_group_id INTEGER REFERENCES agent_groups (id) ON DELETE CASCADE,
        created_at {ts} NOT NULL,
        UNIQUE (user_id, role, agent_group_id))""",
    """CREATE TABLE agent_group_members (
        id {pk},
        user_id VARCHAR(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        created_at {ts} NOT NULL,
        UNIQUE (user_id, agent_group_id))""",
    """CREATE TABLE user_dms (
        id {pk},
        user_id VARCHAR(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        created_at {ts} NOT NULL,
        UNIQUE (user_id, channel_type))""",
    """CREATE TABLE sessions (
        id VARCHAR(64) PRIMARY KEY,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        messaging_group_id INTEGER REFERENCES messaging_groups (id) ON DELETE SET NULL,
        thread_id VARCHAR(255) NOT NULL DEFAULT '',
        status VARCHAR(16) NOT NULL DEFAULT 'active',
        created_at {ts} NOT NULL,
        last_active_at {ts} NOT NULL,
        UNIQUE (agent_group_id, messaging_group_id, thread_id))""",
    """CREATE TABLE inbound_events (
        id {pk},
        channel VARCHAR(255) NOT NULL,
        event_id VARCHAR(255) NOT NULL,
        received_at {ts} NOT NULL,
        UNIQUE (channel, event_id))""",
    """CREATE TABLE dropped_messages (
        id {pk},
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        sender_id VARCHAR(255),
        reason VARCHAR(64) NOT NULL,
        content TEXT,
        created_at {ts} NOT NULL)""",
    """CREATE TABLE audit_log (
        id {pk},
        at {ts} NOT NULL,
        actor VARCHAR(255) NOT NULL,
        action VARCHAR(255) NOT NULL,
        target VARCHAR(255),
        detail TEXT)""",
    "CREATE INDEX idx_sessions_status ON sessions (status)",
    "CREATE INDEX idx_dropped_created ON dropped_messages (created_at)",
    "CREATE INDEX idx_audit_at ON audit_log (at)",
]


def upgrade(db, sql):
    for statement in TABLES:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
