"""The web page: password logins, one-time login links, server-side login sessions, and the
local web chat's transcript (the `web` channel delivers into it; the /chat page reads it).

Secrets are stored hashed: passwords with werkzeug's salted hash, link and session tokens
with SHA-256 (they are long random strings, so a fast hash suffices)."""

TABLES = [
    """CREATE TABLE web_passwords (
        user_id VARCHAR(255) PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
        password_hash VARCHAR(512) NOT NULL,
        updated_at {ts} NOT NULL)""",
    """CREATE TABLE web_login_tokens (
        id {pk},
        token_hash VARCHAR(64) NOT NULL UNIQUE,
        user_id VARCHAR(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        created_at {ts} NOT NULL,
        expires_at {ts} NOT NULL,
        used_at {ts})""",
    """CREATE TABLE web_sessions (
        id {pk},
        token_hash VARCHAR(64) NOT NULL UNIQUE,
        user_id VARCHAR(255) NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        created_at {ts} NOT NULL,
        last_seen_at {ts} NOT NULL,
        expires_at {ts} NOT NULL)""",
    """CREATE TABLE web_messages (
        id {pk},
        chat_id VARCHAR(255) NOT NULL,
        direction VARCHAR(8) NOT NULL,
        sender VARCHAR(255),
        text TEXT NOT NULL DEFAULT '',
        card TEXT,
        file_name VARCHAR(255),
        file_path VARCHAR(1024),
        reactions TEXT,
        created_at {ts} NOT NULL,
        updated_at {ts} NOT NULL)""",
    "CREATE INDEX idx_web_messages_chat ON web_messages (chat_id, id)",
    "CREATE INDEX idx_web_messages_updated ON web_messages (chat_id, updated_at)",
    "CREATE INDEX idx_web_sessions_user ON web_sessions (user_id)",
]


def upgrade(db, sql):
    for statement in TABLES:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
