"""The page in a real browser (headless Chromium through Playwright) against a real server:
werkzeug's server in a thread, the background jobs (wakes + delivery) running, the proxy door
open, a real bwrap sandbox with the real SDK, and only the model and Telegram faked.

- a logged-out visit is redirected to the login page; a POST without a CSRF token is refused;
- a Telegram webhook from a stranger creates a pending approval; the owner logs in, sees it,
  allows it; the card in Telegram is edited to say who decided, and the stranger's stored
  message is replayed: the agent's answer reaches Telegram;
- the web chat: type a message, see the agent's reply appear without a reload.
"""
import html
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN, FakeTelegram

CHROMIUM = "/usr/bin/chromium"
OWNER, PASSWORD = "telegram:42", "correct horse battery"
WEBHOOK_SECRET = "wh-secret_browser-0123456789"
API_KEY = "sk-ant-browser-test-secret-0123"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-dev-shm-usage"]


def answer(req):
    said = re.findall(r">([^<]*)</message>", req.current_prompt())
    return Reply.say(f"Andy here. You said: {html.unescape(said[-1]) if said else '?'}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    require(shutil.which("bwrap") is not None, "bubblewrap is not installed")
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install -r requirements-dev.txt)")
    from werkzeug.serving import make_server

    from nanoclaw.app import create_app
    from nanoclaw.service import start_service
    from nanoclaw.config import Settings
    from nanoclaw.db import database
    from nanoclaw.migrate import apply_pending
    from nanoclaw.models import UserDm
    from nanoclaw.proxy import ProxyServer

    tmp = tmp_path_factory.mktemp("browser")
    with FakeModel(script=answer) as model, FakeTelegram() as tg:
        settings = Settings.load(environ={
            "NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "groups"), "TZ": "UTC",
            "NANOCLAW_MOUNT_ALLOWLIST": str(tmp / "allow.json"), "NANOCLAW_RUNTIME": "bwrap",
            "NANOCLAW_INSTALL_ID": f"browser-{os.getpid()}", "ANTHROPIC_UPSTREAM_URL": model.url,
            "ANTHROPIC_API_KEY": API_KEY, "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET}, dotenv_path=tmp / "none.env")
        app = create_app(settings)
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        cli = app.test_cli_runner()
        for args, stdin in ((["agent", "create", "Andy"], None),
                            (["user", "add", OWNER, "--name", "Olga", "--role", "owner"], None),
                            (["admin", "set-password", OWNER, "--password-stdin"], PASSWORD + "\n"),
                            (["wire", "telegram", "777", "andy"], None)):  # a DM; strangers: ask the owner
            result = cli.invoke(args=["nanoclaw", *args], input=stdin)
            assert result.exit_code == 0, result.output
        UserDm.create(user=OWNER, channel_type="telegram", platform_id="42")  # where approval cards go
        database.close()

        groups = settings.groups_dir  # every agent, also one created on the page while the test runs
        door = ProxyServer(settings, lambda: sorted(p.name for p in groups.iterdir() if p.is_dir()),
                           rescan_interval=0.5).start()
        door.ensure_socket("andy")
        door.wait_ready("andy", timeout=10)
        bg = start_service(app)
        assert bg is not None and bg.manager is not None, "the background jobs did not start"
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            yield base, browser, model, tg, settings
        finally:
            browser.close()
            pw.stop()
            server.shutdown()
            for name in bg.manager.running():
                bg.manager.runtime.stop(name)
            bg.shutdown()
            door.stop()


def log_in(browser, base):
    page = browser.new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/login")
    page.fill("input[name=user_id]", OWNER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(base + "/admin")
    return page


def telegram_update(update_id: int, text: str) -> bytes:
    return json.dumps({"update_id": update_id, "message": {
        "message_id": update_id % 1000, "date": int(time.time()), "text": text,
        "from": {"id": 777, "is_bot": False, "first_name": "Bo"},
        "chat": {"id": 777, "first_name": "Bo", "type": "private"}}}).encode()


def test_logged_out_visit_is_redirected_and_tokenless_post_refused(served):
    base, browser, *_ = served
    page = browser.new_page()
    page.goto(base + "/admin/sessions")
    assert "/login?next=" in page.url and "/admin/sessions" in page.url
    assert page.locator("h1").inner_text() == "Log in"
    page.close()
    page = log_in(browser, base)
    refused = page.request.post(base + "/admin/decide", form={"action_id": "nsa-1:allow"})
    assert refused.status == 400  # logged in, but no CSRF token
    page.close()


def test_approve_a_stranger_from_the_page_and_the_message_is_replayed(served):
    base, browser, model, tg, _ = served
    page = browser.new_page()
    hook = page.request.post(base + "/webhooks/telegram", data=telegram_update(900100001, "Hi, I'm Bo. Lunch?"),
                             headers={"Content-Type": "application/json",
                                      "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET})
    assert hook.status == 200
    card = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage"
                       and str(FakeTelegram.params(r).get("chat_id")) == "42", timeout=10)
    assert "Allow" in json.dumps(FakeTelegram.params(card))  # the chat card, with buttons
    assert model.model_calls() == []  # nothing reached the agent yet
    page.close()

    page = log_in(browser, base)
    item = page.locator("li.item", has_text="wants to talk to Andy")
    assert "Bo (telegram:777)" in item.inner_text() and "Hi, I'm Bo. Lunch?" in item.inner_text()
    item.locator("button", has_text="Allow").click()
    page.wait_for_selector("p.flash.ok")
    assert "Allowed: Bo can talk to Andy now." in page.locator("p.flash.ok").inner_text()
    assert page.locator("li.item", has_text="wants to talk to Andy").count() == 0

    edited = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "editMessageText", timeout=10)
    assert "Allowed by Olga" in FakeTelegram.params(edited)["text"]  # the chat side shows who decided
    reply = tg.wait_for(lambda r: FakeTelegram.method_of(r) == "sendMessage"
                        and str(FakeTelegram.params(r).get("chat_id")) == "777", timeout=120)
    assert FakeTelegram.params(reply)["text"].startswith("Andy here. You said: Hi, I")
    assert "Lunch?" in FakeTelegram.params(reply)["text"]

    page.goto(base + "/admin/audit")
    assert "approval.sender.allow" in page.content()
    page.close()


def test_web_chat_shows_the_agents_reply_without_reload(served):
    base, browser, model, *_ = served
    page = log_in(browser, base)
    page.goto(base + "/chat/andy")
    page.wait_for_selector("#text")
    marker = page.evaluate("() => { window.__same_page = 'yes'; return window.__same_page; }")
    page.fill("#text", "What is on my calendar today?")
    page.keyboard.press("Enter")
    page.wait_for_selector("li.msg.in >> text=What is on my calendar today?")
    reply = page.wait_for_selector("li.msg.out >> text=Andy here. You said: What is on my calendar today?",
                                   timeout=120_000)
    assert reply.is_visible()
    assert page.evaluate("() => window.__same_page") == marker  # no reload happened
    assert page.locator("#text").input_value() == ""
    call = model.model_calls()[-1]
    assert call.headers.get("x-api-key") == API_KEY  # injected by the door, outside the sandbox
    assert "What is on my calendar today?" in call.current_prompt()
    page.close()


def test_a_picture_attached_on_the_page_reaches_the_model_and_shows_in_the_chat(served, tmp_path):
    """The Attach control: pick a photo, the label names it, Send; the chat shows the file as a
    link that downloads it, and the model's request carries the picture as an image block."""
    import base64
    import io

    from PIL import Image
    base, browser, model, *_ = served
    photo = tmp_path / "receipt.png"
    Image.new("RGB", (300, 200), (20, 160, 40)).save(photo)
    page = log_in(browser, base)
    page.goto(base + "/chat/andy")
    page.set_input_files("#file", str(photo))
    assert page.locator("label.attach span").inner_text() == "receipt.png"  # what is attached, said
    page.fill("#text", "Is this receipt green?")
    page.click("button:has-text('Send')")
    link = page.locator("li.msg.in a.file", has_text="receipt.png")
    link.wait_for()
    page.wait_for_selector("li.msg.out >> text=Andy here. You said: Is this receipt green?", timeout=120_000)
    assert page.locator("label.attach span").inner_text() == "Attach"  # cleared for the next message
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_bytes() == photo.read_bytes()
    call = next(c for c in model.model_calls() if "Is this receipt green?" in c.current_prompt())
    [image] = call.blocks("image")
    seen = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
    assert seen.size == (300, 200) and seen.convert("RGB").getpixel((5, 5)) == (20, 160, 40)
    assert "receipt.png (image/png, " in call.current_prompt()
    page.close()


def test_phone_sized_screen_has_no_sideways_scroll(served):
    base, browser, *_ = served
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/login")
    page.fill("input[name=user_id]", OWNER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(base + "/admin")
    for path in ("/admin", "/admin/wirings", "/admin/agents/andy", "/admin/sessions", "/chat/andy"):
        page.goto(base + path)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px on a phone"
    context.close()


def test_the_agents_page_charts_30_days_of_spending_and_sets_a_budget(served):
    """The ledger as the proxy writes it (three days of calls, one model the price table does not
    know): the page draws a bar per day on the server, lists the dearest conversations, flags the
    unknown model; setting a daily budget in the form draws its line."""
    base, browser, _model, _tg, settings = served
    from datetime import timedelta

    from nanoclaw.db import database
    from nanoclaw.usage import ledger
    from nanoclaw.usage.tables import ModelUsage
    today = ledger.today(settings.timezone)
    with database.connection_context():
        for days_ago, session, model, cost in ((0, "s-big", "claude-sonnet-4-5", 2_500_000),
                                               (2, "s-small", "claude-new-9", 400_000),
                                               (9, "s-big", "claude-sonnet-4-5", 1_000_000)):
            ModelUsage.create(day=(today - timedelta(days=days_ago)).isoformat(), agent_folder="andy",
                              session_id=session, model=model, calls=3, input_tokens=1000, output_tokens=100,
                              cost_micro_usd=cost, priced_as=model, unpriced=model == "claude-new-9")
    page = log_in(browser, base)
    page.goto(base + "/admin/agents/andy")
    section = page.locator("#spending")
    assert "last 30 days $3.90" in section.inner_text() and "Today $2.50" in section.inner_text()
    bars = page.locator("#spending svg.chart rect.bar")
    assert bars.count() == 30
    heights = {bars.nth(i).get_attribute("data-day"): float(bars.nth(i).get_attribute("height")) for i in range(30)}
    assert heights[today.isoformat()] > heights[(today - timedelta(days=9)).isoformat()] > \
        heights[(today - timedelta(days=2)).isoformat()] > 0 == heights[(today - timedelta(days=1)).isoformat()]
    assert page.locator("#spending svg.chart line.limit").count() == 0
    assert "s-big" in section.inner_text() and "$3.50" in section.inner_text()
    assert "claude-new-9" in page.locator("#spending .warn").inner_text()

    page.fill("#spending input[name=daily]", "5")
    page.click("#spending button:has-text('Set budget')")
    page.wait_for_selector("p.flash.ok")
    assert "budget: $5.00 a day" in page.locator("#spending").inner_text()
    assert page.locator("#spending svg.chart line.limit").count() == 1
    page.close()


def test_the_agents_page_opens_with_its_model_spend_and_sandboxes_and_names_chats(served):
    """What an owner looks for first is on the first screen of a phone, before any form: the model and
    its fallbacks, today's spend against the budget, whether a sandbox runs; the dearest conversations
    are named by their chat, not by a session id. The model is set in its form."""
    base, browser, _model, _tg, settings = served
    from nanoclaw.db import database
    from nanoclaw.models import AgentGroup, MessagingGroup, Session
    from nanoclaw.sessions import store
    from nanoclaw.sessions.store import Target
    from nanoclaw.usage import ledger
    from nanoclaw.usage.tables import Budget, ModelUsage
    with database.connection_context():
        andy = AgentGroup.get(AgentGroup.folder == "andy")
        MessagingGroup.get_or_create(channel_type="telegram", platform_id="-100777",
                                     defaults={"name": "Family", "kind": "group"})
        Session.create(id="s-family", agent_group=andy)
        store.prepare(store.session_path(settings.sessions_dir, "andy", "s-family"), Target("telegram", "-100777"))
        ModelUsage.create(day=ledger.today(settings.timezone).isoformat(), agent_folder="andy", session_id="s-family",
                          model="claude-sonnet-4-5", calls=2, cost_micro_usd=1_250_000, priced_as="claude-sonnet-4-5")
        Budget.insert(agent_folder="andy", daily_usd=5.0).on_conflict_replace().execute()
        today = ledger.spent("andy", ledger.today(settings.timezone)).day_micro
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(base + "/login")
    page.fill("input[name=user_id]", OWNER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(base + "/admin")
    page.goto(base + "/admin/agents/andy")
    glance = page.locator("#glance")
    box = glance.bounding_box()
    assert box["y"] + box["height"] <= 740, "the summary is not on the first screen"
    assert page.locator("section.card form").first.bounding_box()["y"] > box["y"] + box["height"]  # forms after it
    text = glance.inner_text()
    assert "the Claude CLI's default, on anthropic" in text and f"${today / 1e6:,.2f} of $5.00" in text
    assert "Sandboxes" in text
    assert "Family (chat on Telegram)" in page.locator("#spending").inner_text()
    assert "s-family" not in page.locator("#spending").inner_text()

    page.fill("#model input[name=model]", "claude-sonnet-4-5")
    page.fill("#model input[name=fallbacks]", "claude-haiku-4-5")
    page.select_option("#model select[name=effort]", "low")
    page.click("#model button:has-text('Set model')")
    page.wait_for_selector("p.flash.ok")
    assert "claude-sonnet-4-5 on anthropic → claude-haiku-4-5 on anthropic" in page.locator("#glance").inner_text()
    assert "effort low" in page.locator("#glance").inner_text()
    assert (settings.data_dir / "policy" / "andy" / "model.json").exists()
    context.close()
