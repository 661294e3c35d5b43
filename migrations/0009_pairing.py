"""Pairing (issue 16): one-time codes that let a person claim the bot from a DM.

`flask --app app nanoclaw pair` makes a code; only its SHA-256 is stored. The first person who sends
it in a DM gets the role (NULL: owner when the install has none yet, else member) for the agent, and
their DM is wired to it. Failed tries are audit entries (pair.failed), counted per sender.
"""

STATEMENTS = [
    """CREATE TABLE pairing_codes (
        id {pk},
        code_hash VARCHAR(64) NOT NULL UNIQUE,
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        role VARCHAR(16),
        created_by VARCHAR(255) NOT NULL,
        created_at {ts} NOT NULL,
        expires_at {ts} NOT NULL,
        used_at {ts},
        used_by VARCHAR(255))""",
    "CREATE INDEX idx_pairing_codes_created ON pairing_codes (created_at)",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
