"""The slowest end-to-end files run in a second pytest process beside the main one, so the suite's
wall time is about the longer of the two rather than their sum (two cores: while one process waits
on a sandbox, the other runs). Started when the suite is collected (conftest.py) with the node ids
the run selected from these files; tests/test_beside.py, moved to the end of the run, waits for it
and fails with its output if anything in it failed. Running these files alone runs them here.

They hold no state the main process shares: each test has its own data folder, database (a fresh
PostgreSQL database by name), install id (the pid), ports and sandboxes, and none builds or
prunes an image."""
from __future__ import annotations

from side_run import SideRun

FILES = ("tests/lifecycle/test_faults_e2e.py", "tests/lifecycle/test_lifecycle_e2e.py", "tests/platforms/test_slack_socket_e2e.py",
         "tests/platforms/test_telegram_poll_e2e.py", "tests/platforms/test_matrix_e2e.py",
         "tests/outbound/test_progress_e2e.py", "tests/inbound/test_commands_e2e.py",
         "tests/remote/test_remote_engine_e2e.py", "tests/usage/test_budget_e2e.py", "tests/lifecycle/test_retention.py",
         "tests/tasks/test_task_changes.py", "tests/web/test_chat_e2e.py", "tests/inbound/test_media_e2e.py",
         "tests/memory/test_memory_e2e.py")
CHILD = "NANOCLAW_TESTS_BESIDE"  # set in the second process: it runs what it was given
_run = SideRun("beside")


def start(node_ids: list[str], env: dict[str, str]) -> None:
    _run.start(node_ids, {**env, CHILD: "1"})


def result(timeout: float = 3600) -> tuple[int, str]:
    if not _run.started:
        start(list(FILES), {})
    return _run.result(timeout)


def summary() -> str | None:
    """The second process's last line ("N passed in …"), once it was waited for."""
    return _run.summary
