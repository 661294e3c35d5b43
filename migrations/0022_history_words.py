"""history.norm holds each message's folded words one space apart (memory/query.indexed), not the folded
text: PostgreSQL's parser kept `0.0`, `example.com` or an address as one token, which a query cut at the
dot never found (SQLite's unicode61 cut both alike). Marks of combining class 0 (U+034F) and invisible
format characters (a zero-width joiner) are dropped too. The rows kept are written again and SQLite's
index is made again from them (PostgreSQL's tsvector is generated from `norm`).
"""
import re
import unicodedata

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def indexed(text: str) -> str:   # as memory/query.indexed (a migration does not import the package it migrates)
    decomposed = unicodedata.normalize("NFKD", text or "")
    kept = "".join(ch for ch in decomposed if not (unicodedata.combining(ch)
                                                   or unicodedata.category(ch) in ("Mn", "Me", "Cf")))
    return " ".join(_TOKEN.findall(kept.casefold()))


def upgrade(db, sql):
    postgres = sql.bool_true == "TRUE"
    p = "%s" if postgres else "?"
    rows = db.execute_sql("SELECT id, text FROM history").fetchall()
    for row_id, text in rows:
        db.execute_sql(f"UPDATE history SET norm = {p} WHERE id = {p}", (indexed(text), row_id))
    if postgres:
        return
    db.execute_sql("DROP TRIGGER history_ad")
    db.execute_sql("DROP TABLE history_fts")
    db.execute_sql("""CREATE VIRTUAL TABLE history_fts USING fts5(norm, content='history', content_rowid='id',
        tokenize='unicode61 remove_diacritics 0')""")
    db.execute_sql("""CREATE TRIGGER history_ad AFTER DELETE ON history WHEN old.id <= (SELECT last_id FROM
        history_fts_state) BEGIN INSERT INTO history_fts(history_fts, rowid, norm) VALUES ('delete', old.id, old.norm);
        END""")
    db.execute_sql("UPDATE history_fts_state SET last_id = 0 WHERE id = 1")  # catch_up indexes every row again
