"""agent_internet and web_fetches (issue 62): what each agent may reach of the web, and the owner's
record of every fetch (never the body), kept NANOCLAW_KEEP_HISTORY_DAYS. Agents that exist now keep
what they could reach before: reading only the hosts on their egress allowlist, no search, no
browser; an agent without a row (created afterwards) gets the defaults of `reading/settings.py`."""


def upgrade(db, sql):
    db.execute_sql(f"""CREATE TABLE agent_internet (
        id {sql.pk},
        agent_group_id INTEGER NOT NULL UNIQUE REFERENCES agent_groups (id) ON DELETE CASCADE,
        read VARCHAR(8) NOT NULL,
        search VARCHAR(8) NOT NULL,
        browser VARCHAR(8) NOT NULL,
        updated_at {sql.ts} NOT NULL)""")
    db.execute_sql("INSERT INTO agent_internet (agent_group_id, read, search, browser, updated_at) "
                   "SELECT id, 'listed', 'off', 'off', CURRENT_TIMESTAMP FROM agent_groups")
    db.execute_sql(f"""CREATE TABLE web_fetches (
        id {sql.pk},
        agent_folder VARCHAR(255) NOT NULL,
        session_id VARCHAR(64) NOT NULL,
        tool VARCHAR(16) NOT NULL,
        url TEXT NOT NULL,
        status INTEGER,
        bytes INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        fetched_at {sql.ts} NOT NULL)""")
    db.execute_sql("CREATE INDEX idx_web_fetches_at ON web_fetches (fetched_at)")
    db.execute_sql("CREATE INDEX idx_web_fetches_agent ON web_fetches (agent_folder, fetched_at)")
