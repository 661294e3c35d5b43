"""messaging_group_agents.voice (issue 42): whether the agent's answers in this chat are also voice
notes (`wire … --voice auto|always|never`; auto: a voice note is answered with one)."""


def upgrade(db, sql):
    db.execute_sql("ALTER TABLE messaging_group_agents ADD COLUMN voice VARCHAR(8) NOT NULL DEFAULT 'auto'")
