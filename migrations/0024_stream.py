"""messaging_group_agents.stream (issue 63): whether the answer is shown in the chat as the model
writes it (`wire … --stream on|off`, the page's wiring form); on for every wiring that exists."""


def upgrade(db, sql):
    db.execute_sql(f"ALTER TABLE messaging_group_agents ADD COLUMN stream BOOLEAN NOT NULL DEFAULT {sql.bool_true}")
