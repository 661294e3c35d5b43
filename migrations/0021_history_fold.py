"""history.norm (issue 61, item 3): searching ignores case and accents alike on SQLite and PostgreSQL. Each
message is kept as it was said (`text`, what the agent reads) and as the index reads it (`norm`: Unicode
NFKD, combining marks dropped, case folded: memory/query.fold); a query is folded the same way. Text typed
with combining accents (NFD, as macOS keyboards produce) is found by its own words, `İstanbul`, `istanbul`
and `ISTANBUL` find each other, `muller` finds `Müller`. The rows already kept are folded here and the
index is made again from them (SQLite's FTS5 table reads `norm`; PostgreSQL's tsvector is generated from it).
"""
import unicodedata


def fold(text: str) -> str:   # as memory/query.fold (a migration does not import the package it migrates)
    decomposed = unicodedata.normalize("NFKD", text or "")
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def upgrade(db, sql):
    postgres = sql.bool_true == "TRUE"
    db.execute_sql("ALTER TABLE history ADD COLUMN norm TEXT NOT NULL DEFAULT ''")
    p = "%s" if postgres else "?"
    rows = db.execute_sql("SELECT id, text FROM history").fetchall()
    for start in range(0, len(rows), 500):
        for row_id, text in rows[start:start + 500]:
            db.execute_sql(f"UPDATE history SET norm = {p} WHERE id = {p}", (fold(text), row_id))
    if postgres:
        db.execute_sql("ALTER TABLE history DROP COLUMN tsv")  # its index goes with it
        db.execute_sql("ALTER TABLE history ADD COLUMN tsv tsvector GENERATED ALWAYS AS "
                       "(to_tsvector('simple', norm)) STORED")
        db.execute_sql("CREATE INDEX idx_history_tsv ON history USING GIN (tsv)")
        return
    db.execute_sql("DROP TRIGGER history_ad")
    db.execute_sql("DROP TABLE history_fts")
    db.execute_sql("""CREATE VIRTUAL TABLE history_fts USING fts5(norm, content='history', content_rowid='id',
        tokenize='unicode61 remove_diacritics 0')""")
    db.execute_sql("""CREATE TRIGGER history_ad AFTER DELETE ON history WHEN old.id <= (SELECT last_id FROM
        history_fts_state) BEGIN INSERT INTO history_fts(history_fts, rowid, norm) VALUES ('delete', old.id, old.norm);
        END""")
    db.execute_sql("UPDATE history_fts_state SET last_id = 0 WHERE id = 1")  # catch_up indexes every row again
