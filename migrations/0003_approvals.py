"""Pending approvals (unknown senders, unknown chats) and agent questions (issue 5).

One pending sender approval per (chat, sender) and one pending channel approval per chat:
the UNIQUE constraints are the in-flight dedup, so a stranger who writes ten times while the
owner has not answered yet produces one card, not ten.
"""

TABLES = [
    """CREATE TABLE pending_sender_approvals (
        id {pk},
        messaging_group_id INTEGER NOT NULL REFERENCES messaging_groups (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        sender_id VARCHAR(255) NOT NULL,
        sender_name VARCHAR(255),
        original_message TEXT NOT NULL,
        approver_user_id VARCHAR(255) NOT NULL,
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        created_at {ts} NOT NULL,
        UNIQUE (messaging_group_id, sender_id))""",
    """CREATE TABLE pending_channel_approvals (
        id {pk},
        messaging_group_id INTEGER NOT NULL UNIQUE REFERENCES messaging_groups (id) ON DELETE CASCADE,
        sender_id VARCHAR(255),
        sender_name VARCHAR(255),
        original_message TEXT NOT NULL,
        approver_user_id VARCHAR(255) NOT NULL,
        state VARCHAR(16) NOT NULL DEFAULT 'card',
        card_channel VARCHAR(255),
        card_chat_id VARCHAR(255),
        card_message_id VARCHAR(255),
        created_at {ts} NOT NULL,
        updated_at {ts} NOT NULL)""",
    """CREATE TABLE pending_questions (
        id {pk},
        session_id VARCHAR(64) NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        question_id VARCHAR(64) NOT NULL,
        title VARCHAR(255) NOT NULL DEFAULT '',
        question TEXT NOT NULL,
        options TEXT NOT NULL,
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        thread_id VARCHAR(255),
        card_message_id VARCHAR(255),
        expires_at {ts} NOT NULL,
        answered_at {ts},
        answered_by VARCHAR(255),
        answer_index INTEGER,
        created_at {ts} NOT NULL,
        UNIQUE (session_id, question_id))""",
    "CREATE INDEX idx_pending_channel_state ON pending_channel_approvals (state)",
]


def upgrade(db, sql):
    for statement in TABLES:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
