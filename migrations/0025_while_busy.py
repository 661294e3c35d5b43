"""messaging_group_agents.while_busy (issue 63): what a message sent while the agent works does
(`wire … --while-busy queue|steer|interrupt`, the page's wiring form); 'queue', today's behaviour,
for every wiring that exists (docs/decisions/2026-12-07-steering.md says why it stays the default)."""


def upgrade(db, sql):
    db.execute_sql("ALTER TABLE messaging_group_agents ADD COLUMN while_busy VARCHAR(10) NOT NULL DEFAULT 'queue'")
