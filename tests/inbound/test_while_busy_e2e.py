"""A message sent while the agent works, end to end (real sandbox, real SDK and CLI, the scripted
model): with `--while-busy steer` it is taken into the running turn (marked 👀) and answered within
that turn's one answer, never twice; with `interrupt` the running turn ends and one new turn answers
both. (`queue`, the default, is how every other test runs.)"""
from __future__ import annotations

import json

import pytest

from tests.fakes.model_api import Reply
from tests.inbound.test_stop_e2e import inbound_statuses
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import message, sandbox_service, texts

FIRST, SECOND = "summarise the report", "and add a title please"
STEPS = 6


def brain(req) -> Reply:
    said = json.dumps(req.messages)
    if FIRST not in said:
        return Reply.say("Hi.")
    if SECOND in said:  # the second message reached the model: this answer covers both
        return Reply.say("Here is the summary, with a title.")
    if len(req.turn_tool_results()) < STEPS:
        return Reply.call("Bash", command="sleep 1", description="reading the report")
    return Reply.say("Here is the summary.")


@pytest.mark.parametrize("mode", ["steer", "interrupt"])
def test_a_message_sent_mid_turn_is_answered_in_one_answer(make_settings, sqlite_url, mode):
    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        for args in SETUP:
            svc.cli(*args)
        svc.cli("wire", "telegram", "4242", "andy", "--while-busy", mode)
        svc.post(message(4242, ANNA, FIRST))
        svc.wait(lambda: any(len(r.turn_tool_results()) >= 2 for r in svc.model.model_calls()), timeout=120,
                 what="the turn two steps in")
        svc.post(message(4242, ANNA, SECOND))
        svc.wait(lambda: any("with a title" in t for t in texts(svc.tg, 4242)), timeout=120, what="the answer")
        svc.wait(lambda: set(inbound_statuses(svc.settings).values()) == {"completed"}, timeout=60,
                 what="both messages answered")
        answers = [t for t in texts(svc.tg, 4242) if not t.startswith("⏳")]
        assert answers == ["Here is the summary, with a title."], answers  # one answer, never two
        calls = svc.model.model_calls()
        if mode == "steer":
            reactions = [c for c in svc.tg.calls("setMessageReaction") if c["reaction"][0]["emoji"] == "👀"]
            assert len(reactions) == 1  # the person sees it was taken
        else:
            # the interrupted turn's stream ended before the new turn's first call, which carries both
            both = [i for i, r in enumerate(calls) if SECOND in r.current_prompt() and FIRST in r.current_prompt()]
            assert both and all(SECOND not in json.dumps(r.messages) for r in calls[:both[0]])
