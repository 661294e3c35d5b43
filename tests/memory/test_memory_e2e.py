"""Memory and recall end to end (issue 40): the real SDK and its CLI in a real sandbox (both runtimes),
the fake model steering the agent's tools as a person's words would. In the owner's DM a fact is
kept with `memory`; after /clear it is in the model's request (the new conversation's snapshot), and
`search_history` finds the original message. In a group chat wired to the same agent, a member's
search for the same word finds nothing of the DM, and no request of the group ever holds it."""
from __future__ import annotations

import json

import pytest

from conftest import require
from nanoclaw.memory.tables import Memory, MemoryChange
from tests.fakes.model_api import Reply, ToolCall
from tests.tg_flow import message, person, sandbox_service, texts

OWNER = person(111, "Olivia")
MEMBER = person(222, "Max")
GROUP = -100300


def brain(req):
    prompt, done = req.current_prompt(), req.turn_tool_results()
    if "my locker code is 4711" in prompt:
        if not done:
            return Reply.call("mcp__nanoclaw__memory", action="add", text="Olivia's locker code is 4711")
        return Reply.say("Noted: " + done[-1].text)
    if "search for locker" in prompt:
        if not done:
            return Reply.call("mcp__nanoclaw__search_history", query="locker")
        return Reply.say("Search: " + done[-1].text)
    if "what is my locker code" in prompt:
        return Reply.say("asked")
    return Reply.say("ok")


def sent_to_model(model, words: str) -> list:
    return [c for c in model.model_calls() if words in c.current_prompt()]


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_a_fact_from_the_dm_lives_on_after_clear_and_never_reaches_the_group(make_settings, sqlite_url, runtime):
    if runtime == "docker":
        from tests.web.test_chat_e2e import runtime_available
        require(*runtime_available("docker", make_settings()))
    with sandbox_service(make_settings, sqlite_url, brain, runtime=runtime) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                     ("user", "add", "telegram:222", "--role", "member", "--agent", "andy"),
                     ("wire", "telegram", "111", "andy"), ("wire", "telegram", str(GROUP), "andy", "--kind", "group")):
            svc.cli(*args)
        svc.post(message(111, OWNER, "remember: my locker code is 4711"))
        said = svc.wait(lambda: next((t for t in texts(svc.tg, 111) if t.startswith("Noted")), None),
                        what="the memory saved")
        assert "next conversation" in said
        [row] = list(Memory.select())
        assert row.scope == "private:telegram:111" and "4711" in row.text
        assert MemoryChange.get().session_id  # who changed it, in which conversation

        svc.post(message(111, OWNER, "/clear", command=True))
        svc.wait(lambda: any("cleared" in t.lower() for t in texts(svc.tg, 111)), what="the clear")
        svc.post(message(111, OWNER, "what is my locker code?"))
        svc.wait(lambda: sent_to_model(svc.model, "what is my locker code"), what="the question sent")
        asked = sent_to_model(svc.model, "what is my locker code")[-1]
        assert "my locker code is 4711" not in json.dumps(asked.messages)  # a new conversation...
        assert "Olivia's locker code is 4711" in asked.system_text()      # ...that starts with the memory

        svc.post(message(111, OWNER, "please search for locker"))
        found = svc.wait(lambda: next((t for t in texts(svc.tg, 111) if t.startswith("Search:")), None),
                         what="the DM's search")
        assert "my locker code is 4711" in found and "Olivia" in found

        svc.post(message(GROUP, MEMBER, "please search for locker", title="Team", mention=True))
        group_found = svc.wait(lambda: next((t for t in texts(svc.tg, GROUP) if t.startswith("Search:")), None),
                               what="the group's search")
        assert "4711" not in group_found and "Olivia" not in group_found  # only the group's own history
        assert "Max: @andy_test_bot please search for locker" in group_found
        group_calls = [c for c in svc.model.model_calls() if "Max" in c.current_prompt()]  # the group's session
        assert group_calls and not any("4711" in c.all_text() for c in group_calls)


SAVE = "save what matters for later conversations"


def long_brain(req):
    prompt, done = req.current_prompt(), req.turn_tool_results()
    if SAVE in prompt:  # the silent turn: keep something, try to talk (refused), say something (not sent)
        if not done:
            return Reply(tool_calls=[ToolCall("mcp__nanoclaw__memory", {"action": "add",
                                                                        "text": "project deadline is Friday"}),
                                     ToolCall("mcp__nanoclaw__send_message", {"text": "LEAK from the save turn"})])
        return Reply.say("SILENT TEXT that must not be sent")
    if "first" in prompt:
        return Reply.say("first answer", input_tokens=170_000)  # the context is now past 80 % of 200k
    if "second" in prompt:
        return Reply.say("second answer")
    return Reply.say("ok")


def test_before_the_context_fills_up_the_agent_saves_its_memory_silently(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, long_brain) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                     ("wire", "telegram", "111", "andy")):
            svc.cli(*args)
        svc.post(message(111, OWNER, "the first question"))
        svc.wait(lambda: "first answer" in texts(svc.tg, 111), what="the first answer")
        svc.post(message(111, OWNER, "the second question"))
        svc.wait(lambda: "second answer" in texts(svc.tg, 111), what="the second answer")
        saves = [c for c in svc.model.model_calls() if SAVE in c.current_prompt()]
        second = [c for c in svc.model.model_calls() if "second question" in c.current_prompt()]
        assert saves and second and saves[0].received_at < second[0].received_at  # the save came first
        results = " ".join(r.text for r in saves[-1].turn_tool_results())
        assert "not now" in results  # the chat tools refused during the save
        assert texts(svc.tg, 111) == ["first answer", "second answer"]  # nothing of the save turn was sent
        assert "project deadline is Friday" in Memory.get().text
        assert len(saves) <= 2  # one save (a tool call and its answer), not one before every turn

        svc.post(message(111, OWNER, "/compact", command=True))  # a manual compaction saves first too
        svc.wait(lambda: any("compact" in t.lower() for t in texts(svc.tg, 111)), what="the compaction")
        assert len([c for c in svc.model.model_calls() if SAVE in c.current_prompt()]) > len(saves)
