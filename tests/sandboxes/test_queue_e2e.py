"""The capacity queue end to end: with room for one sandbox, a second chat's message waits while
the first chat's sandbox runs and is answered once that sandbox is gone (stopped under the host, as
a runner that exits or dies is), without waiting for the sweep; at rest the queue's job sleeps."""
from __future__ import annotations

from tests.remote.flow import HeldTurn
from tests.tg_flow import message, person, sandbox_service, texts

OLIVIA, BEA = person(111, "Olivia"), person(222, "Bea")


def test_a_queued_wake_starts_when_the_running_sandbox_goes(make_settings, sqlite_url):
    held = HeldTurn("slow one")
    with sandbox_service(make_settings, sqlite_url, held, MAX_CONCURRENT_CONTAINERS="1") as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("user", "add", "telegram:222", "--role", "member", "--agent", "andy", "--name", "Bea")
        for uid in (111, 222):
            svc.cli("wire", "telegram", str(uid), "andy")
        bg = svc.app.extensions["nanoclaw.background"]
        assert bg.ready.wait(30), "the start-up did not finish"
        drain = bg.scheduler.get_job("drain")
        svc.wait(lambda: bg.scheduler.get_job("drain").next_run_time is None, what="the queue's job asleep at rest")

        svc.post(message(111, OLIVIA, "slow one"))
        assert held.held.wait(60), "the first turn never reached the model"
        svc.post(message(222, BEA, "quick one"))
        svc.wait(lambda: bg.manager.queue, what="the second chat's wake queued")
        assert bg.scheduler.get_job(drain.id).next_run_time is not None  # awake while a wake waits
        (first,) = svc.runtime.list_sandboxes(svc.settings.install_id)
        held.release()
        svc.runtime.stop(first)  # gone under the host, as a runner that exits: room for the queued wake
        svc.wait(lambda: "answer to quick one" in texts(svc.tg, 222), timeout=60, what="the queued chat answered")
        svc.wait(lambda: bg.scheduler.get_job("drain").next_run_time is None, what="the queue's job asleep again")
