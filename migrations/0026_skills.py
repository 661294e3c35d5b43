"""agent_skills (issue 66): the skills the owner approved for each agent, pinned by content hash; the
bytes are the host's copy under data/skills/<agent>/<hash>/<name>/ (nanoclaw/operator/skill_store.py)."""


def upgrade(db, sql):
    db.execute_sql(f"""CREATE TABLE agent_skills (
        id {sql.pk},
        agent_group_id INTEGER NOT NULL REFERENCES agent_groups (id) ON DELETE CASCADE,
        name VARCHAR(64) NOT NULL,
        description TEXT NOT NULL,
        hash VARCHAR(64) NOT NULL,
        source TEXT NOT NULL,
        added_by VARCHAR(255) NOT NULL,
        added_at {sql.ts} NOT NULL,
        changed_told BOOLEAN NOT NULL DEFAULT {sql.bool_false})""")
    db.execute_sql("CREATE UNIQUE INDEX idx_agent_skills_name ON agent_skills (agent_group_id, name)")
