"""The capacity queue: at most MAX_CONCURRENT_CONTAINERS sandboxes, later wakes wait; within an agent
group a due task goes before chat messages; start-up holds wakes; shutdown refuses them.
(The runtime here is an in-memory stand-in: this is about the manager's bookkeeping; both real
runtimes are exercised by test_runtime.py and the end-to-end tests.)"""
from __future__ import annotations

import pytest

from conftest import _build_app
from nanoclaw.db import database
from nanoclaw.sandboxes.manager import QueuedWake, SandboxManager, pick_next


class MemoryRuntime:
    name = "memory"

    def __init__(self):
        self.running: list[str] = []
        self.started: list[str] = []

    def start(self, spec):
        if spec.name not in self.running:
            self.running.append(spec.name)
            self.started.append(spec.name)

    def is_running(self, name):
        return name in self.running

    def stop(self, name, timeout=5):
        if name in self.running:
            self.running.remove(name)

    def list_sandboxes(self, install_id):
        return [n for n in self.running if n.startswith(f"nanoclaw-{install_id}-")]

    def logs(self, name):
        return ""


@pytest.fixture
def manager(make_settings, sqlite_url):
    # a migrated database of its own (a start reads the agent's record): the file runs alone too
    app = _build_app(make_settings(DATABASE_URL=sqlite_url, MAX_CONCURRENT_CONTAINERS=2, NANOCLAW_INSTALL_ID="q"))
    settings = app.config["NANOCLAW"]
    for folder in ("alice", "bob"):
        sock = settings.proxy_dir / folder / "proxy.sock"
        sock.parent.mkdir(parents=True, exist_ok=True)
        sock.touch()
    yield SandboxManager(settings, MemoryRuntime())
    database.close()


def started_sessions(manager):
    return [name.rsplit("-", 1)[-1] for name in manager.runtime.started]


def test_pick_next_is_fifo_but_a_groups_task_goes_before_its_chat():
    q = [QueuedWake("alice", "a1"), QueuedWake("bob", "b1", task=True), QueuedWake("alice", "a2", task=True)]
    assert q[pick_next(q)].session_id == "a2"
    q = [QueuedWake("bob", "b1"), QueuedWake("alice", "a2", task=True)]
    assert q[pick_next(q)].session_id == "b1"  # other groups keep their turn


def test_capacity_queue_and_task_priority(manager):
    assert manager.wake("alice", "a0") and manager.wake("bob", "b0")
    assert not manager.wake("alice", "a1")                 # full: queued
    assert not manager.wake("bob", "b1")
    assert not manager.wake("alice", "a2", task=True)
    assert not manager.wake("alice", "a1")                 # queued once, not twice
    assert [(q.session_id, q.task) for q in manager.queue] == [("a1", False), ("b1", False), ("a2", True)]
    assert manager.drain() == 0                            # still full
    manager.stop("alice", "a0")
    assert manager.drain() == 1 and started_sessions(manager)[-1] == "a2"  # alice's task first
    manager.stop("bob", "b0")
    manager.stop("alice", "a2")
    assert manager.drain() == 2 and started_sessions(manager)[-2:] == ["a1", "b1"]
    assert manager.queue == []


def test_wakes_wait_during_start_up_and_are_refused_when_closing(manager):
    manager.held = True
    assert not manager.wake("alice", "a1")
    assert manager.runtime.started == [] and len(manager.queue) == 1
    manager.held = False
    assert manager.drain() == 1
    manager.closing = True
    assert not manager.wake("bob", "b1") and manager.queue == []
    assert manager.stop_all() == [manager.name_of("alice", "a1")] and manager.runtime.running == []


def test_a_wake_during_start_up_waits_for_the_previous_runs_sandbox_to_go(manager):
    # the previous process's sandbox still runs while this one starts; a message for it arrives
    orphan = manager.name_of("alice", "a1")
    manager.runtime.running.append(orphan)
    manager.held = True
    assert not manager.wake("alice", "a1")  # queued, not taken for running
    assert manager.stop_all() == [orphan]  # start-up removes it
    manager.held = False
    assert manager.drain() == 1 and manager.runtime.running == [orphan]  # and a new one answers
