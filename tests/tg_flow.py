"""Telegram as a person uses it, for flow tests: updates built like the Bot API sends them, posted
to the real webhook (app.test_client()), and what the bot sent read back from the fake Bot API."""
from __future__ import annotations

import itertools
import json
import time
from contextlib import contextmanager

import pytest

from nanoclaw.app import create_app
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from tests.fakes.telegram_api import TOKEN, USERNAME, FakeTelegram
from tests.fakes.model_api import SENTINEL, SENTINEL_ANSWER

SECRET = "wh-secret_flow-0123456789"
# The usual household: agent Andy, owner Olivia (telegram:111), her DM wired to Andy
OLIVIA_AND_ANDY = (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
                   ("wire", "telegram", "111", "andy"))
MENTION = f"@{USERNAME}"
_update_ids = itertools.count(700000000)
_message_ids = itertools.count(10)


def person(uid: int, first_name: str) -> dict:
    return {"id": uid, "is_bot": False, "first_name": first_name}


def message(chat_id: int, sender: dict, text: str, *, title: str | None = None, mention: bool = False,
            topic: int | None = None, date: int | None = None, command: bool = False) -> dict:
    """An update carrying one message; in a group when `title` is given, else a private chat.
    mention: "@bot " is put before the text; command: the first word is a bot_command entity."""
    if mention:
        text = f"{MENTION} {text}"
    chat = {"id": chat_id, "type": "supergroup", "title": title} if title else \
        {"id": chat_id, "type": "private", "first_name": sender["first_name"]}
    msg = {"message_id": next(_message_ids), "from": sender, "chat": chat, "date": date or int(time.time()),
           "text": text}
    if mention:
        msg["entities"] = [{"offset": 0, "length": len(MENTION), "type": "mention"}]
    if command:
        msg["entities"] = [{"offset": 0, "length": len(text.split()[0]), "type": "bot_command"}]
    if topic is not None:
        chat["is_forum"] = True
        msg.update(message_thread_id=topic, is_topic_message=True)
    return {"update_id": next(_update_ids), "message": msg}


def click(data: str, clicker: dict, card: dict) -> dict:
    """A callback_query: `clicker` pressed the button with callback_data `data` on `card`
    (a sendMessage call recorded by the fake)."""
    chat_id = int(card["chat_id"])
    return {"update_id": next(_update_ids), "callback_query": {
        "id": f"cb{next(_update_ids)}", "from": clicker, "chat_instance": "-1", "data": data,
        "message": {"message_id": card["_message_id"], "from": {"id": 7000001, "is_bot": True, "first_name": "Andy"},
                    "chat": {"id": chat_id, "type": "private"}, "date": int(time.time()), "text": card["text"]}}}


def post(app, update: dict):
    resp = app.test_client().post("/webhooks/telegram", data=json.dumps(update).encode(),
                                  headers={"Content-Type": "application/json",
                                           "X-Telegram-Bot-Api-Secret-Token": SECRET})
    assert resp.status_code == 200, resp.data
    return resp


class Telegram(FakeTelegram):
    """The fake Bot API, also keeping each sent message with the id it was given (cards are
    clicked and edited by that id)."""

    def __init__(self):
        super().__init__()
        self.messages: list[dict] = []

    def _sendMessage(self, p, req):
        result = super()._sendMessage(p, req)
        if isinstance(result, dict):
            with self._cond:
                self.messages.append({**p, "_message_id": result["message_id"]})
        return result


def sent(tg: FakeTelegram, method: str = "sendMessage") -> list[dict]:
    """Accepted calls of `method` (sendMessage ones with `_message_id`)."""
    if method == "sendMessage":
        with tg._cond:
            return list(tg.messages)
    return tg.calls(method)


def cards(tg: FakeTelegram) -> list[dict]:
    return [c for c in sent(tg) if c.get("reply_markup")]


def buttons(card: dict) -> dict[str, str]:
    """label -> callback_data."""
    return {b["text"]: b["callback_data"] for row in card["reply_markup"]["inline_keyboard"] for b in row}


def toasts(tg: FakeTelegram) -> list[str]:
    return [c.get("text") for c in sent(tg, "answerCallbackQuery")]


def edits(tg: FakeTelegram) -> list[dict]:
    return sent(tg, "editMessageText")


def texts(tg: FakeTelegram, chat_id) -> list[str]:
    """Plain messages (no buttons) the bot wrote into one chat."""
    return [c["text"] for c in sent(tg) if str(c.get("chat_id")) == str(chat_id) and not c.get("reply_markup")]


def shown(card: dict) -> str:
    """A card's text as the person sees it (Telegram renders the HTML)."""
    import html
    import re
    return html.unescape(re.sub(r"</?b>", "", card["text"]))


class Service:
    """The web program's pieces in this process: the app (webhooks through app.test_client()), the
    background delivery and waker, a real sandbox runtime, and the proxy door to a fake model."""

    def __init__(self, app, tg, model, settings):
        self.app, self.tg, self.model, self.settings = app, tg, model, settings

    def cli(self, *args):
        result = self.app.test_cli_runner().invoke(args=["nanoclaw", *args])
        assert result.exit_code == 0, result.output
        return result

    def post(self, update):
        """Post a webhook and wait until the intake thread routed it (the ack comes first)."""
        response = post(self.app, update)
        intake = self.app.extensions.get("nanoclaw.intake")
        if intake is not None:
            assert intake.wait_idle(30), "the intake thread did not route the update within 30 s"
        return response

    def settled(self, chat_id: int, sender: dict, **kw):
        """Send the fake model's sentinel into a chat and wait for its answer: whatever an earlier
        action would have started has then had its turn. Returns the sentinel's model request
        (its prompt shows what was batched with it)."""
        self.post(message(chat_id, sender, SENTINEL, **kw))
        self.wait(lambda: SENTINEL_ANSWER in texts(self.tg, chat_id), what="the sentinel's answer")
        return next(r for r in self.model.model_calls() if SENTINEL in r.current_prompt())

    def wait(self, predicate, timeout: float = 90.0, what: str = "it"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")


def app_with_door(settings):
    """A migrated app on `settings` and the proxy's door to the model for its agents' sandboxes
    (the caller stops the door and closes the database)."""
    from nanoclaw.proxy import ProxyServer
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    groups = settings.groups_dir
    door = ProxyServer(settings, lambda: [p.name for p in groups.iterdir() if p.is_dir()] if groups.is_dir()
                       else [], rescan_interval=0.2).start()
    return app, door


def sandbox_service(make_settings, sqlite_url, script, runtime: str = "bwrap", **env):
    """A context manager yielding a Service on SQLite; needs bubblewrap, and Docker with the agent
    image for runtime="docker" (a CI run fails without them). `env`: more settings (another
    platform's, pointing at a fake the test runs)."""
    import contextlib
    import os
    import shutil

    from conftest import require
    from nanoclaw import service
    from nanoclaw.db import database
    from nanoclaw.reading import browser_ops
    from nanoclaw.reading import ops as reading_ops
    from nanoclaw.runtime.select import select_runtime
    from nanoclaw.sandboxes.manager import SandboxManager, mounts_for
    from nanoclaw.operator.skill_offer import offer as skills_offered
    from tests.fakes.model_api import FakeModel
    from tests.fakes.telegram_api import TOKEN

    @contextlib.contextmanager
    def run():
        require(shutil.which("bwrap") is not None, "bubblewrap is not installed")
        with FakeModel(script=script) as model, Telegram() as tg:
            settings = make_settings(DATABASE_URL=sqlite_url, TELEGRAM_BOT_TOKEN=TOKEN,
                                     TELEGRAM_WEBHOOK_SECRET=SECRET, TELEGRAM_API_BASE=tg.url,
                                     ANTHROPIC_UPSTREAM_URL=model.url, ANTHROPIC_API_KEY="sk-ant-flow-e2e",
                                     NANOCLAW_RUNTIME=runtime, NANOCLAW_INSTALL_ID=f"flow-{os.getpid()}", **env)
            if runtime == "docker":
                from tests.web.test_chat_e2e import runtime_available
                require(*runtime_available("docker", settings))
            app, door = app_with_door(settings)
            sandbox_runtime = select_runtime(settings, lambda _line: None)
            manager = SandboxManager(settings, sandbox_runtime, mounts_for=mounts_for(settings),
                                     skills_for=skills_offered(settings))
            service.start_intake(app)  # webhooks are routed after the acknowledgement, as in the service
            bg = service.start(app, manager)
            try:
                svc = Service(app, tg, model, settings)
                svc.runtime, svc.proxy = sandbox_runtime, door
                yield svc
            finally:
                service.stop_intake(app)
                bg.shutdown()
                reading_ops.stop()  # as the program's exit does (service.stop_service): the reading worker goes
                browser_ops.stop()  # and the browser worker with its browsers
                for name in sandbox_runtime.list_sandboxes(settings.install_id):
                    sandbox_runtime.stop(name)
                door.stop()
                database.close()
    return run()


@pytest.fixture
def tg():
    """A fake Telegram Bot API (import this fixture into a test module to use it)."""
    with Telegram() as server:
        yield server


@contextmanager
def telegram_app(make_settings, db_url, tg, *setup: tuple[str, ...], **env):
    """A migrated app whose Telegram talks to `tg`; wakes are recorded in app.woken instead of
    starting sandboxes. `setup`: CLI argument tuples run first (each must succeed)."""
    app = create_app(make_settings(DATABASE_URL=db_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                   TELEGRAM_API_BASE=tg.url, **env))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    app.woken = []
    app.extensions["nanoclaw.wake"].connect(lambda folder, session_id: app.woken.append(folder))
    runner = app.test_cli_runner()
    for args in setup:
        result = runner.invoke(args=["nanoclaw", *args])
        assert result.exit_code == 0, (args, result.output)
    try:
        yield app
    finally:
        database.close()
