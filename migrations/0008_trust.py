"""The trust boundary (issue 15): card actions that cannot be guessed or forged.

- Every pending row a host card decides (sender and chat approvals, agent questions, help requests,
  proposals) gets `token`: 128 random bits, the public part of its action ids (`nsa-<token>:allow`),
  page keys and audit targets. Sequential ids are never shown again. Rows already pending get a
  token now; the buttons of cards sent before this migration stop working (the page lists them).
- pending_questions.asked_user_id: the person the agent asked (the sender of the message it was
  answering); only they, or an admin of the agent, may answer.
- agent_cards: a card an agent sent with buttons. Its buttons carry `nac-<token>:<n>`, never what the
  agent wrote; a click comes back to that agent as a message from the person who clicked.
"""
import secrets

CARD_TABLES = ("pending_sender_approvals", "pending_channel_approvals", "pending_questions", "help_requests",
               "pending_proposals")

STATEMENTS = [
    """CREATE TABLE agent_cards (
        id {pk},
        token VARCHAR(32) NOT NULL UNIQUE,
        session_id VARCHAR(64) NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        message_out_id VARCHAR(64) NOT NULL,
        channel_type VARCHAR(255) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        thread_id VARCHAR(255),
        title TEXT NOT NULL,
        buttons TEXT NOT NULL,
        card_message_id VARCHAR(255),
        created_at {ts} NOT NULL,
        UNIQUE (session_id, message_out_id))""",
    "ALTER TABLE pending_questions ADD COLUMN asked_user_id VARCHAR(255)",
]


def upgrade(db, sql):
    for table in CARD_TABLES:
        db.execute_sql(f"ALTER TABLE {table} ADD COLUMN token VARCHAR(32)")
        p = db.param
        for (row_id,) in db.execute_sql(f"SELECT id FROM {table}").fetchall():
            db.execute_sql(f"UPDATE {table} SET token = {p} WHERE id = {p}", (secrets.token_urlsafe(16), row_id))
        db.execute_sql(f"CREATE UNIQUE INDEX idx_{table}_token ON {table} (token)")
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
