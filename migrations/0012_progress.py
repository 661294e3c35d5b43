"""messaging_group_agents.progress (issue 31): whether a long turn shows a status message in the
chat (`wire … --progress on|off`); on for every wiring that exists."""


def upgrade(db, sql):
    db.execute_sql(f"ALTER TABLE messaging_group_agents ADD COLUMN progress BOOLEAN NOT NULL DEFAULT {sql.bool_true}")
