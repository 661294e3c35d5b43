"""Memory and recall (issue 40): what an agent remembers, per scope (a person's private memory, one per
other chat), every change of it (who, which conversation, when), and the host's index of what was
said, searchable by the agent within the scope the host decides.

history: one row per agent and message it saw (a person's message the router wrote into one of its
sessions, or a reply the host delivered for it), searched with SQLite's FTS5 or PostgreSQL's full
text (a generated tsvector, the `simple` configuration). The FTS5 index is an external-content one
brought up to date before each search (and every minute): a routed message costs its row only, not
an FTS5 segment per commit; history_fts_state says how far it is.
"""

STATEMENTS = [
    """CREATE TABLE memories (
        id {pk},
        agent_folder VARCHAR(255) NOT NULL,
        scope VARCHAR(600) NOT NULL,
        text TEXT NOT NULL DEFAULT '',
        updated_at {ts} NOT NULL,
        UNIQUE (agent_folder, scope))""",
    """CREATE TABLE memory_changes (
        id {pk},
        agent_folder VARCHAR(255) NOT NULL,
        scope VARCHAR(600) NOT NULL,
        request_key VARCHAR(200),
        actor VARCHAR(255) NOT NULL,
        session_id VARCHAR(64) NOT NULL DEFAULT '',
        action VARCHAR(16) NOT NULL,
        before_text TEXT,
        after_text TEXT,
        outcome TEXT NOT NULL DEFAULT '',
        created_at {ts} NOT NULL,
        UNIQUE (request_key))""",
    "CREATE INDEX idx_memory_changes_agent ON memory_changes (agent_folder, created_at)",
    """CREATE TABLE history (
        id {pk},
        agent_folder VARCHAR(255) NOT NULL,
        channel_type VARCHAR(64) NOT NULL,
        platform_id VARCHAR(255) NOT NULL,
        thread_id VARCHAR(255),
        session_id VARCHAR(64) NOT NULL DEFAULT '',
        message_key VARCHAR(300) NOT NULL,
        sender_id VARCHAR(255) NOT NULL DEFAULT '',
        sender_name VARCHAR(255) NOT NULL DEFAULT '',
        said_at VARCHAR(32) NOT NULL,
        text TEXT NOT NULL,
        UNIQUE (agent_folder, message_key))""",
]

SQLITE = [
    """CREATE VIRTUAL TABLE history_fts USING fts5(text, content='history', content_rowid='id',
        tokenize='unicode61 remove_diacritics 0')""",
    "CREATE TABLE history_fts_state (id INTEGER PRIMARY KEY CHECK (id = 1), last_id INTEGER NOT NULL)",
    "INSERT INTO history_fts_state (id, last_id) VALUES (1, 0)",
    """CREATE TRIGGER history_ad AFTER DELETE ON history WHEN old.id <= (SELECT last_id FROM history_fts_state) BEGIN
        INSERT INTO history_fts(history_fts, rowid, text) VALUES ('delete', old.id, old.text); END""",
]

POSTGRES = [
    "ALTER TABLE history ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
    "CREATE INDEX idx_history_tsv ON history USING GIN (tsv)",
]


def upgrade(db, sql):
    for statement in STATEMENTS:
        db.execute_sql(statement.format(pk=sql.pk, ts=sql.ts))
    for statement in (POSTGRES if sql.bool_true == "TRUE" else SQLITE):
        db.execute_sql(statement)
