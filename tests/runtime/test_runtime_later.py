"""No sandbox runtime when the service starts (issue 16): the service stays up, stores what comes
in, and answers it once a runtime works, without a restart.

The web program's own start (`background.start_service`) with bubblewrap not working at first
(its probe says "not installed"), a real Telegram webhook, then bubblewrap working again: the
stored message reaches the agent in a real sandbox and the reply reaches the fake Telegram."""
from __future__ import annotations

import os
import shutil

from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN
from nanoclaw.db import database
from nanoclaw import service
from nanoclaw.lifecycle import background
from nanoclaw.runtime import bwrap
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import SECRET, Service, Telegram, app_with_door, message, texts


def test_a_message_stored_without_a_runtime_is_answered_once_one_works(make_settings, sqlite_url, monkeypatch):
    require(shutil.which("bwrap") is not None and bwrap.probe() is None, "bubblewrap does not work here")
    real_probe = bwrap.probe
    monkeypatch.setattr(bwrap, "probe", lambda *a, **k: "bwrap is not installed")
    monkeypatch.setattr(background, "RUNTIME_RETRY_S", 0.5)
    with FakeModel(script=lambda req: Reply.say("Answered after all.")) as model, Telegram() as tg:
        settings = make_settings(DATABASE_URL=sqlite_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                 TELEGRAM_API_BASE=tg.url, ANTHROPIC_UPSTREAM_URL=model.url,
                                 ANTHROPIC_API_KEY="sk-ant-later-e2e", NANOCLAW_RUNTIME="bwrap",
                                 NANOCLAW_INSTALL_ID=f"later-{os.getpid()}")
        app, door = app_with_door(settings)
        svc = Service(app, tg, model, settings)
        for args in SETUP:
            svc.cli(*args)
        bg = service.start_service(app)
        try:
            assert bg is not None and bg.manager is None  # started without a runtime
            svc.post(message(4242, ANNA, "are you there?"))
            assert texts(tg, 4242) == [] and model.model_calls() == []
            monkeypatch.setattr(bwrap, "probe", real_probe)  # e.g. the owner installed bubblewrap
            svc.wait(lambda: texts(tg, 4242) == ["Answered after all."], what="the stored message's answer")
            assert bg.manager is not None and "are you there?" in model.model_calls()[0].current_prompt()
        finally:
            service.stop_intake(app)
            bg.shutdown()
            door.stop()
            database.close()


def test_what_make_run_does_without_a_runtime():
    from nanoclaw.runtime.select import setup_action
    assert setup_action("auto", bwrap_installed=False, is_root=True, has_apt=True) == "install"
    assert setup_action("bwrap", bwrap_installed=False, is_root=True, has_apt=True) == "install"
    assert setup_action("auto", bwrap_installed=False, is_root=False, has_apt=True) == "tell"
    assert setup_action("auto", bwrap_installed=False, is_root=True, has_apt=False) == "tell"
    assert setup_action("auto", bwrap_installed=True, is_root=True, has_apt=True) == "tell"
    assert setup_action("docker", bwrap_installed=False, is_root=True, has_apt=True) == "tell"


def test_make_run_names_the_command_and_starts_anyway(make_settings, monkeypatch, capsys):
    from nanoclaw import supervise
    monkeypatch.setattr(bwrap, "probe", lambda *a, **k: "bwrap: setting up uid map: Permission denied")
    supervise.ensure_runtime(make_settings(NANOCLAW_RUNTIME="bwrap"))  # installed, but it cannot work here
    err = capsys.readouterr().err
    assert "bubblewrap does not work: bwrap: setting up uid map: Permission denied" in err
    assert supervise.INSTALL_BWRAP in err and "starting anyway" in err
