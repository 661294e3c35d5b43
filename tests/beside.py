"""The slowest end-to-end files run in three more pytest processes beside the main one, so the suite's
wall time is about the longest of them rather than their sum (while one process waits on a sandbox,
the others run). Started when the suite is collected (conftest.py) with the node ids
the run selected from these files; tests/test_beside.py, moved to the end of the run, waits for it
and fails with its output if anything in it failed. Running these files alone runs them here.

They hold no state the main process shares: each test has its own data folder, database (a fresh
PostgreSQL database by name), install id (the pid), ports and sandboxes, and none builds or
prunes an image."""
from __future__ import annotations

from side_run import SideRun

# Three processes beside the main one (the suite mostly waits on sandboxes and services), each a
# group of about equal length (per-file times: `-o console_output_style=times`, docs/testing.md).
GROUPS = (
    ("tests/lifecycle/test_lifecycle_e2e.py", "tests/platforms/test_matrix_e2e.py",
     "tests/platforms/test_telegram_poll_e2e.py", "tests/platforms/test_slack_socket_e2e.py",
     "tests/outbound/test_progress_e2e.py", "tests/inbound/test_commands_e2e.py", "tests/lifecycle/test_retention.py",
     "tests/memory/test_memory_e2e.py", "tests/operator/test_capabilities_page.py", "tests/operator/test_packages.py",
     "tests/internet/test_web_read_e2e.py", "tests/lifecycle/test_stream_faults_e2e.py"),
    ("tests/lifecycle/test_faults_e2e.py", "tests/remote/test_remote_engine_e2e.py",
     "tests/platforms/test_signal_owner_e2e.py",
     "tests/remote/test_gate.py", "tests/platforms/test_slack_socket.py", "tests/approvals/test_questions.py",
     "tests/inbound/test_intake.py", "tests/remote/test_network_session_e2e.py", "tests/remote/test_faults.py",
     "tests/platforms/test_matrix.py", "tests/operator/test_expiry.py", "tests/upstreams/test_litellm_e2e.py",
     "tests/internet/test_browser_e2e.py", "tests/internet/test_browser_worker.py"),
    ("tests/usage/test_budget_e2e.py", "tests/test_service_e2e.py", "tests/web/test_admin.py",
     "tests/platforms/test_discord_gateway_intake.py", "tests/operator/test_operator_e2e.py",
     "tests/agent/test_runner.py", "tests/tasks/test_task_changes.py", "tests/web/test_chat_e2e.py",
     "tests/inbound/test_media_e2e.py", "tests/web/test_browser.py", "tests/agent/test_media.py",
     "tests/outbound/test_nudges.py", "tests/web/test_browser_operator.py", "tests/platforms/test_telegram_poll.py",
     "tests/cli/test_cli.py", "tests/remote/test_inbound_changes.py", "tests/internet/test_web_search_e2e.py"),
)
FILES = tuple(f for group in GROUPS for f in group)
CHILD = "NANOCLAW_TESTS_BESIDE"  # set in the processes beside: each runs what it was given
_runs = [SideRun(f"beside{n}") for n in range(len(GROUPS))]


def start(node_ids: list[str], env: dict[str, str]) -> None:
    for run, group in zip(_runs, GROUPS):
        mine = [node for node in node_ids if node.split("::")[0] in group]
        if mine:
            run.start(mine, {**env, CHILD: "1"})


def result(timeout: float = 3600) -> tuple[int, str]:
    """The worst exit code of the processes beside, and their output together."""
    if not any(run.started for run in _runs):
        start(list(FILES), {})
    outcomes = [run.result(timeout) for run in _runs if run.started]
    return max(code for code, _ in outcomes), "\n".join(output for _, output in outcomes)


def abandon() -> None:
    for run in _runs:
        run.abandon()


def summary() -> str | None:
    """Each process's last line ("N passed in …"), once they were waited for."""
    lines = [run.summary for run in _runs if run.summary]
    return "; ".join(lines) or None
