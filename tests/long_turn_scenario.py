"""The scenario behind tests/lifecycle/test_long_turn.py (not collected on its own: run by that test in a
process of its own, beside the rest of the suite, because it takes over ten minutes).

A Telegram DM asks for long work; the scripted model works through four Bash calls of 160 s each
(640 s in all, past the 600 s the runner used to allow a turn) and then answers. The turn is
answered once, with that answer, and no "will be retried" notice ever reaches the chat."""
from __future__ import annotations

import os
import time

from fakes.model_api import Reply
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import message, sandbox_service, texts

STEPS, STEP_S = 4, int(os.environ.get("NANOCLAW_LONG_TURN_STEP_S", "160"))  # a smaller step: a quick check


RESULTS: list = []


def script(req) -> Reply:
    results = req.turn_tool_results()
    RESULTS[:] = results
    done = len(results)
    if done < STEPS:
        return Reply.call("Bash", command=f"python3 -c 'import time; time.sleep({STEP_S}); print(1)'", timeout=(STEP_S + 60) * 1000,
                          description=f"step {done + 1} of the long job")
    return Reply.say(f"Done after {STEPS} long steps.")


def test_a_turn_longer_than_ten_minutes_is_answered_once(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, script) as service:
        for args in SETUP:
            service.cli(*args)
        started = time.monotonic()
        service.post(message(4242, ANNA, "please run the long job"))
        answer = f"Done after {STEPS} long steps."
        service.wait(lambda: answer in texts(service.tg, 4242), timeout=STEPS * STEP_S + 300, what="the answer")
        took = time.monotonic() - started
        assert [r.is_error for r in RESULTS] == [False] * STEPS, RESULTS  # each step really ran
        assert took >= STEPS * STEP_S, took
        # the turn is over once the answer is there; nothing more is written to this chat: a long
        # turn's status (issue 31) rides in drafts in a private chat, never a message (issue 63)
        said = texts(service.tg, 4242)
        assert said == [answer], said
        drafts = [d["text"] for d in service.tg.calls("sendMessageDraft")]
        assert drafts and all(t.startswith("⏳ Working…") for t in drafts), drafts[:3]
        assert not any("retried" in t for t in said)
        assert len([r for r in service.model.model_calls() if "please run the long job" in r.current_prompt()]) \
            == STEPS + 1
