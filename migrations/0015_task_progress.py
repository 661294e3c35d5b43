"""scheduled_tasks.progress (issue 31): a scheduled run shows a long turn's status message only when
the task asked for it (schedule_task's `progress`); off for every task that exists."""


def upgrade(db, sql):
    db.execute_sql(f"ALTER TABLE scheduled_tasks ADD COLUMN progress BOOLEAN NOT NULL DEFAULT {sql.bool_false}")
