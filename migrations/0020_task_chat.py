"""scheduled_tasks.messaging_group_id (issue 60, item 3): tasks belong to the chat they were scheduled in,
not only to the agent. The agent's task ops see and change only its own chat's tasks; the CLI and the page
see all. Each existing task's chat is read from its session; a task whose session is gone keeps none and is
seen only by the CLI and the page."""


def upgrade(db, sql):
    db.execute_sql("ALTER TABLE scheduled_tasks ADD COLUMN messaging_group_id INTEGER")
    db.execute_sql("UPDATE scheduled_tasks SET messaging_group_id = (SELECT s.messaging_group_id FROM sessions s "
                   "WHERE s.id = scheduled_tasks.session_id)")
    db.execute_sql("CREATE INDEX idx_scheduled_tasks_chat ON scheduled_tasks (agent_group_id, messaging_group_id)")
