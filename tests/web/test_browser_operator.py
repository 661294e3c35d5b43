"""The page's operator forms in a real browser (headless Chromium through Playwright), on the server
of tests/web/test_browser.py: werkzeug in a thread, the background jobs, the proxy door, real bwrap
sandboxes with the real SDK; only the model and Telegram are faked.

- An agent asks for egress through its real MCP tool (the fake model calls propose_egress in the
  web chat). On a phone-sized screen the owner opens "Modify", types a host the tool's rules refuse
  (the reason shows next to the form, nothing changes), then another host, saves, and approves:
  the group's egress allowlist holds the modified host, not the original, and the agent's next
  turn is told what the owner changed.
- A stranger mentions the bot in a new Telegram group; the owner names a new agent on the page
  (the folder it will get is shown while typing), and the stored message is replayed into the new
  agent's session: its answer reaches the group.
"""
import json
import time

import pytest

from fakes.telegram_api import FakeTelegram
from tests.web.test_browser import OWNER, PASSWORD, WEBHOOK_SECRET, answer, log_in, served  # noqa: F401  (fixture)

ASKED = "I asked the owner for access to data.example.org."


def agent_brain(req):
    from fakes.model_api import Reply
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "fetch the data" in prompt and "approved your proposal" not in prompt:
        if not results:
            return Reply.call("mcp__nanoclaw__propose_egress", host="data.example.org", reason="to fetch the data")
        return Reply.say(ASKED)
    if "approved your proposal" in prompt:
        return Reply.say("Noted what the owner approved.")
    return answer(req)


@pytest.fixture(autouse=True)
def scripted_agent(served):  # noqa: F811
    model = served[2]
    model.script = agent_brain
    yield
    model.script = answer


def phone_page(browser, base):
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/login")
    page.fill("input[name=user_id]", OWNER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(base + "/admin")
    return context, page


def no_sideways_scroll(page) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


def test_modify_an_agents_egress_proposal_on_a_phone_then_approve_it(served):  # noqa: F811
    base, browser, model, tg, settings = served
    chat = log_in(browser, base)
    chat.goto(base + "/chat/andy")
    chat.wait_for_selector("#text")
    chat.fill("#text", "Please fetch the data for me")
    chat.keyboard.press("Enter")
    chat.wait_for_selector(f"li.msg.out >> text={ASKED}", timeout=120_000)
    tool_result = [r.text for c in model.model_calls() for r in c.tool_results()]
    assert any("id=" in t for t in tool_result), tool_result  # the tool queued it

    context, page = phone_page(browser, base)
    item = page.locator("li.item", has_text="allow HTTPS to data.example.org")
    item.wait_for()
    assert "+ data.example.org" in item.inner_text() and "to fetch the data" in item.inner_text()
    item.locator("summary", has_text="Modify").click()
    assert item.locator("input[name=host]").input_value() == "data.example.org"  # prefilled
    assert no_sideways_scroll(page) <= 0, "the open modify form scrolls sideways on a phone"

    item.locator("input[name=host]").fill("https://api.example.org/v1")
    item.locator("button", has_text="Save changes").click()
    error = page.locator("li.item .form-error")
    error.wait_for()
    assert "give a host name like api.example.com" in error.inner_text()
    item = page.locator("li.item", has_text="allow HTTPS to data.example.org")  # unchanged
    assert item.locator("input[name=host]").input_value() == "https://api.example.org/v1"  # kept to correct it
    assert no_sideways_scroll(page) <= 0

    item.locator("input[name=host]").fill("api.example.org")
    item.locator("textarea[name=why]").fill("only the API host")
    item.locator("button", has_text="Save changes").click()
    page.wait_for_selector("p.flash.ok")
    assert "Changed (host: data.example.org → api.example.org)" in page.locator("p.flash.ok").inner_text()
    item = page.locator("li.item", has_text="allow HTTPS to api.example.org")
    assert "+ api.example.org" in item.inner_text() and "+ data.example.org" not in item.inner_text()
    item.locator("button", has_text="Approve").click()
    page.wait_for_selector("p.flash.ok")
    assert "Approved: allow HTTPS to api.example.org." in page.locator("p.flash.ok").inner_text()
    context.close()

    allow = json.loads((settings.data_dir / "policy" / "andy" / "egress.json").read_text())["allow"]
    assert allow == ["api.example.org"]
    told = model.wait_for(lambda r: "approved your proposal" in r.current_prompt(), timeout=120)
    assert "after changing it: host: data.example.org → api.example.org (why: only the API host)" in \
        told.current_prompt()
    chat.wait_for_selector("li.msg.out >> text=Noted what the owner approved.", timeout=120_000)
    chat.goto(base + "/admin/audit?q=proposal.modify")
    assert "proposal.modify" in chat.content() and "only the API host" in chat.content()
    chat.close()


def group_mention(update_id: int, chat_id: int, text: str) -> bytes:
    mention = "@andy_test_bot"
    return json.dumps({"update_id": update_id, "message": {
        "message_id": update_id % 1000, "date": int(time.time()), "text": f"{mention} {text}",
        "entities": [{"offset": 0, "length": len(mention), "type": "mention"}],
        "from": {"id": 888, "is_bot": False, "first_name": "Cy"},
        "chat": {"id": chat_id, "type": "supergroup", "title": "Lab"}}}).encode()


def test_create_an_agent_for_an_unknown_chat_on_the_page_and_the_message_is_replayed(served):  # noqa: F811
    base, browser, model, tg, _ = served
    page = browser.new_page()
    hook = page.request.post(base + "/webhooks/telegram", data=group_mention(900200001, -100555, "help with research"),
                             headers={"Content-Type": "application/json",
                                      "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET})
    assert hook.status == 200
    tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage"
                and "Lab" in json.dumps(FakeTelegram.params(r)), timeout=10)  # the chat card, to the owner
    page.close()

    page = log_in(browser, base)
    item = page.locator("li.item", has_text="no agent answers there")
    assert "help with research" in item.inner_text()
    assert item.locator("button", has_text="Create new").count() == 0  # named here, not through a DM
    item.locator("summary", has_text="Create a new agent").click()
    item.locator("input[name=name]").fill("Lab Helper")
    page.wait_for_function("() => document.querySelector('output[data-folder]').textContent === 'lab-helper'")
    item.locator("input[name=folder]").fill("Andy")
    page.wait_for_function("() => document.querySelector('output[data-folder]').textContent === 'andy-2'")
    item.locator("input[name=folder]").fill("")
    item.locator("button", has_text="Create and connect").click()
    page.wait_for_selector("p.flash.ok")
    assert "Created the agent Lab Helper (folder lab-helper); it now answers in the Telegram group 'Lab'." in \
        page.locator("p.flash.ok").inner_text()
    assert page.locator("li.item", has_text="no agent answers there").count() == 0

    reply = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage"
                        and str(FakeTelegram.params(r).get("chat_id")) == "-100555", timeout=120)
    assert "You said:" in FakeTelegram.params(reply)["text"] and "help with research" in \
        FakeTelegram.params(reply)["text"]
    edited = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "editMessageText"
                         and "Lab Helper now answers" in FakeTelegram.params(r)["text"], timeout=10)
    assert FakeTelegram.params(edited)["text"].startswith("➕ Created by Olga")
    page.goto(base + "/admin/audit?q=approval.channel.create")
    assert "approval.channel.create" in page.content()
    page.close()


def test_allow_and_revoke_a_host_on_the_agents_page_on_a_phone(served):  # noqa: F811
    """The agent's page, "What it may reach", in a real browser on a phone-sized screen: allow a
    host with a why, see it listed, revoke it; the proxy's file follows each click."""
    from nanoclaw.proxy.policy_files import EGRESS_FILE, group_file, policy_root, read_policy_file
    base, browser, _model, _tg, settings = served
    egress = group_file(policy_root(settings), "andy", EGRESS_FILE)
    before = read_policy_file(egress).as_list()  # the module's other tests may have allowed hosts already
    context, page = phone_page(browser, base)
    try:
        page.goto(base + "/admin/agents/andy#reach")
        reach = page.locator("#reach")
        allow = reach.locator("form", has=page.locator("button:has-text('Allow host')"))
        allow.locator("input[name=host]").fill("reports.example.org")
        allow.locator("input[name=why]").fill("weekly report")
        allow.locator("button:has-text('Allow host')").click()
        page.wait_for_url(base + "/admin/agents/andy#reach")
        assert "andy may reach reports.example.org from its next request." in page.content()
        assert reach.locator("code", has_text="reports.example.org").count() == 1
        assert read_policy_file(egress).as_list() == before + ["reports.example.org"]
        assert no_sideways_scroll(page) <= 0

        row = reach.locator("li", has_text="reports.example.org")
        row.locator("input[name=why]").fill("not needed any more")
        row.locator("button:has-text('Revoke')").click()
        page.wait_for_url(base + "/admin/agents/andy#reach")
        assert "andy may no longer reach reports.example.org." in page.content()
        assert read_policy_file(egress).as_list() == before
    finally:
        context.close()
