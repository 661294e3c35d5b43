"""card_choices (issue 32): the options of a card sent where a platform has no buttons (Matrix), kept
by the card's message, so a person's reply ("2") or reaction (2️⃣) is read against the host's own
record of that card, never against the card's text."""

STATEMENT = """CREATE TABLE card_choices (
    id {pk},
    channel VARCHAR(64) NOT NULL,
    chat_id VARCHAR(255) NOT NULL,
    message_id VARCHAR(255) NOT NULL,
    buttons TEXT NOT NULL,
    created_at {ts} NOT NULL,
    UNIQUE (channel, message_id))"""


def upgrade(db, sql):
    db.execute_sql(STATEMENT.format(pk=sql.pk, ts=sql.ts))
