"""Nudges: a commit on one side of the session folder wakes the other side at once; a lost nudge
delays a message by the safety net's second and never loses it (issue 19).

The nudge tests set both safety nets to an hour, so an answer can only come from a nudge; the
drop tests throw every nudge away, so an answer can only come from the safety net."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from nanoclaw.sandboxes import manager as sandboxes
from nanoclaw.outbound import watcher as delivery_watcher
from nanoclaw.sessions import session_schema as schema  # noqa: F401  (puts container/ on sys.path)
from nanoclaw.sessions import store
from tests.fakes.model_api import Reply
from tests.tg_flow import message, person, sandbox_service, texts

from agent_runner import nudge  # noqa: E402
from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target  # noqa: E402

HOUR = "3600"
OWNER = person(111, "Olivia")


# --- the watcher --------------------------------------------------------------------------------

def test_a_write_to_a_watched_name_is_seen_and_other_names_are_not(tmp_path):
    w = nudge.Watcher(("inbound.db",))
    try:
        assert w.watch(tmp_path) and w.drain() == set()
        (tmp_path / "notes.txt").write_text("x")
        assert w.drain() == set()
        (tmp_path / "inbound.db-journal").write_bytes(b"")
        assert w.drain() == {tmp_path}
        assert w.drain() == set()  # drained
        w.unwatch(tmp_path)
        (tmp_path / "inbound.db").write_text("y")
        assert w.drain() == set()
    finally:
        w.close()


def test_a_touch_is_a_nudge_and_a_removed_directory_can_be_watched_again(tmp_path):
    agent = tmp_path / "agent"
    agent.mkdir()
    w = nudge.Watcher((nudge.NUDGE,))
    try:
        assert not w.watch(tmp_path / "missing")
        assert w.watch(agent)
        nudge.touch(agent)           # creates it
        assert w.drain() == {agent}
        nudge.touch(agent)           # utime only: IN_ATTRIB
        assert w.drain() == {agent}
        (agent / nudge.NUDGE).unlink()
        agent.rmdir()
        w.drain()
        assert agent not in w.watched  # forgotten when the kernel dropped the watch
        agent.mkdir()
        assert w.watch(agent)
        nudge.touch(agent)
        assert w.drain() == {agent}
    finally:
        w.close()


def test_every_commit_of_the_runner_nudges(tmp_path):
    folder = tmp_path / "s1"
    store.prepare(folder, Target("cli", "c"))
    runner = SessionStore.of_session(folder)
    w = nudge.Watcher((nudge.NUDGE,))
    try:
        w.watch(store.agent_part(folder))
        runner.write_out({"op": "text", "text": "hi"}, Target("cli", "c"))
        assert w.drain() == {store.agent_part(folder)}
        runner.claim(["m1"])
        assert w.drain() == {store.agent_part(folder)}
        runner.set_tool("Bash")  # not a delivery: no nudge
        assert w.drain() == set()
    finally:
        w.close()
        runner.close()


# --- which sessions the delivery thread delivers (pure) -------------------------------------------

def test_to_deliver():
    a, b, c = Path("/s/a"), Path("/s/b"), Path("/s/c")
    live = {a: ("old",), b: ("same",), c: ("same",)}
    sig = {a: ("new",), b: ("same",), c: ("same",)}.get
    assert delivery_watcher.to_deliver(live, {b}, False, set(), sig) == [(b, ("same",))]  # a nudge: at once
    assert delivery_watcher.to_deliver(live, set(), False, {c}, sig) == []  # between full passes: nothing else
    # a full pass: what changed without a nudge (the safety net) and what needs the clock
    assert delivery_watcher.to_deliver(live, set(), True, {c}, sig) == [(a, ("new",)), (c, ("same",))]


# --- the host's delivery thread ------------------------------------------------------------------

class Loop:
    def __init__(self, settings, folder: Path):
        self.delivered = threading.Event()
        self.stop = threading.Event()
        self.loop = delivery_watcher.DeliveryLoop(settings, {folder: ()}, lambda: None, self.stop,
                                                  deliver=lambda path: self.delivered.set())
        self.thread = threading.Thread(target=self.loop.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        assert self.delivered.wait(5)  # the first full pass
        self.delivered.clear()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.loop.interrupt()
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A session folder for a delivery loop that makes no timed pass: only nudges wake it."""
    monkeypatch.setattr(delivery_watcher, "FULL_PASS_S", 3600.0)
    monkeypatch.setattr(delivery_watcher, "LIVE_REFRESH_S", 3600.0)
    path = tmp_path / "s1"
    store.prepare(path, Target("cli", "c"))
    return path


def test_a_runner_commit_wakes_delivery_at_once(make_settings, folder):
    runner = SessionStore.of_session(folder)
    with Loop(make_settings(), folder) as loop:
        runner.write_out({"op": "text", "text": "hi"}, Target("cli", "c"))
        assert loop.delivered.wait(10), "a committed reply waited for the hourly pass"
    runner.close()


def test_a_dropped_nudge_is_made_up_by_the_full_pass(make_settings, tmp_path, monkeypatch):
    monkeypatch.setattr(delivery_watcher, "FULL_PASS_S", 0.5)
    real_drain = nudge.Watcher.drain
    monkeypatch.setattr(nudge.Watcher, "drain", lambda self: real_drain(self) and set())
    folder = tmp_path / "s1"
    store.prepare(folder, Target("cli", "c"))
    runner = SessionStore.of_session(folder)
    with Loop(make_settings(), folder) as loop:
        runner.write_out({"op": "text", "text": "hi"}, Target("cli", "c"))
        assert loop.delivered.wait(10)
    runner.close()


def test_wake_budget_lets_a_burst_through_and_holds_a_churning_folder_to_the_rate():
    budget, waits = delivery_watcher.WAKE_BURST, []
    for _ in range(int(delivery_watcher.WAKE_BURST)):  # back to back: a commit's WAL write, then its nudge
        budget, wait = delivery_watcher.wake_budget(budget, 0.0)
        waits.append(wait)
    assert waits == [0.0] * int(delivery_watcher.WAKE_BURST)
    budget, wait = delivery_watcher.wake_budget(budget, 0.0)  # the burst spent: one wake per 1/rate
    assert wait == pytest.approx(1 / delivery_watcher.WAKE_RATE)
    budget, wait = delivery_watcher.wake_budget(budget, 1.0)  # quiet for a second: the whole burst again
    assert wait == 0.0 and budget == delivery_watcher.WAKE_BURST - 1


def test_a_nudge_right_behind_another_write_in_the_folder_is_not_held_back(make_settings, folder, monkeypatch):
    """The runner's commit writes outbound.db-wal (a wake that is no nudge), then touches the nudge a
    moment later; the loop must not pause in between (it used to sleep 2 ms after every wake)."""
    agent = store.agent_part(folder)
    pauses = []
    real_sleep = time.sleep
    # room for any number of wakes: a pause here can only be a gap after each wake, not the rate limit
    # (tested below), which a slow machine reached with the ~20 wakes of these five commits
    monkeypatch.setattr(delivery_watcher, "WAKE_BURST", 10_000.0)
    monkeypatch.setattr(delivery_watcher.time, "sleep", lambda s: (pauses.append(s), real_sleep(s)))
    with Loop(make_settings(), folder) as loop:
        for i in range(5):
            (agent / "outbound.db-wal").write_bytes(b"x" * (i + 1))
            nudge.touch(agent)
            assert loop.delivered.wait(10)
            loop.delivered.clear()
    assert pauses == []


def test_a_folder_touched_in_a_loop_costs_at_most_the_wake_rate(make_settings, folder):
    agent = store.agent_part(folder)
    passes = []
    with Loop(make_settings(), folder) as loop:
        loop.loop.deliver = lambda path: passes.append(time.monotonic())
        started = time.monotonic()
        while time.monotonic() - started < 0.5:
            nudge.touch(agent)
        spent = time.monotonic() - started
    allowed = delivery_watcher.WAKE_BURST + delivery_watcher.WAKE_RATE * (spent + 0.05)
    assert 0 < len(passes) <= allowed, f"{len(passes)} passes in {spent:.2f} s"


# --- end to end: a real service, the real SDK in a real sandbox -----------------------------------

def _two_answers(svc) -> None:
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")
    svc.post(message(111, OWNER, "first"))
    svc.wait(lambda: len(texts(svc.tg, 111)) >= 1, timeout=60, what="the first answer")
    svc.post(message(111, OWNER, "second"))  # the runner is warm and asleep now
    svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=60, what="the second answer")
    assert texts(svc.tg, 111) == ["answer to first", "answer to second"]


def _script(req):
    said = re.findall(r">([^<]*)</message>", req.current_prompt())
    return Reply.say(f"answer to {said[-1].strip()}")


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_nudges_wake_the_runner_and_delivery(make_settings, sqlite_url, monkeypatch, runtime):
    """Both safety nets at an hour: each answer needs the host's nudge to the runner and the
    runner's nudge back, across the sandbox's bind mounts."""
    monkeypatch.setattr(delivery_watcher, "FULL_PASS_S", 3600.0)
    monkeypatch.setattr(delivery_watcher, "LIVE_REFRESH_S", 3600.0)
    monkeypatch.setitem(sandboxes.SDK_ENV, "NANOCLAW_POLL_INTERVAL_S", HOUR)
    with sandbox_service(make_settings, sqlite_url, _script, runtime=runtime) as svc:
        _two_answers(svc)


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_every_nudge_dropped_and_each_message_is_still_answered(make_settings, sqlite_url, monkeypatch, runtime):
    real_drain = nudge.Watcher.drain
    monkeypatch.setattr(nudge.Watcher, "drain", lambda self: real_drain(self) and set())  # the host drops
    monkeypatch.setitem(sandboxes.SDK_ENV, "NANOCLAW_NUDGES", "0")                     # the runner drops
    with sandbox_service(make_settings, sqlite_url, _script, runtime=runtime) as svc:
        _two_answers(svc)


# --- one session's slow work never holds another's (issue 39, item 3) ------------------------------

def test_a_slow_session_holds_a_worker_of_its_own_and_the_others_are_delivered_meanwhile(make_settings, tmp_path):
    """The real loop and pool: session A's delivery blocks (a platform call that hangs) until the test
    lets it go; B and C, committed after it, are delivered while A still hangs, and A asked again
    meanwhile runs once more after, never twice at once."""
    paths = {name: tmp_path / name for name in "abc"}
    for path in paths.values():
        store.prepare(path, Target("cli", "c"))
    release, running_a = threading.Event(), threading.Event()
    delivered: list[str] = []
    at_once, most = [0], [0]
    guard = threading.Lock()

    def deliver(path: Path) -> None:
        with guard:
            at_once[0] += 1
            most[0] = max(most[0], at_once[0])
        try:
            if path == paths["a"] and not release.is_set():
                running_a.set()
                release.wait(30)
            delivered.append(path.name)
        finally:
            with guard:
                at_once[0] -= 1

    stop = threading.Event()
    live = {p: () for p in paths.values()}
    loop = delivery_watcher.DeliveryLoop(make_settings(), live, lambda: None, stop, deliver=deliver)
    loop.pool.submit(paths["a"])
    assert running_a.wait(10)
    loop.pool.submit(paths["a"])  # a nudge while it hangs: queued behind itself, not beside
    loop.pool.submit(paths["b"])
    loop.pool.submit(paths["c"])
    deadline = time.monotonic() + 10
    while not {"b", "c"} <= set(delivered):
        assert time.monotonic() < deadline, f"b and c waited for a: {delivered}"
        time.sleep(0.01)
    assert "a" not in delivered
    release.set()
    assert loop.pool.wait_idle(10)
    assert delivered.count("a") == 2 and most[0] <= 3
    stop.set()
    loop.close()


def test_close_does_not_wait_for_ever_on_a_hung_delivery(make_settings, tmp_path, monkeypatch):
    monkeypatch.setattr(delivery_watcher, "CLOSE_WAIT_S", 0.5)
    path = tmp_path / "s"
    store.prepare(path, Target("cli", "c"))
    hung, release = threading.Event(), threading.Event()
    loop = delivery_watcher.DeliveryLoop(make_settings(), {path: ()}, lambda: None, threading.Event(),
                                         deliver=lambda p: (hung.set(), release.wait(30)))
    loop.pool.submit(path)
    assert hung.wait(10)
    started = time.monotonic()
    loop.close()
    assert time.monotonic() - started < 5
    release.set()
