"""A Docker engine without the agent image (issue 16): the service answers with bubblewrap at once,
builds the image in the background, and then starts new sandboxes in Docker; a sandbox already
running stays where it is.

The web program's own start (`background.start_service`) with NANOCLAW_RUNTIME=auto, a real Docker
engine (the image gets a tag of its own, removed afterwards), real bubblewrap, a fake Telegram and
a scripted fake model."""
from __future__ import annotations

import os
import shutil

from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN
from nanoclaw.app import create_app
from nanoclaw.db import database
from nanoclaw import service
from nanoclaw.lifecycle import background
from nanoclaw.sandboxes import setup as runtime_setup
from nanoclaw.models import Session
from nanoclaw.runtime import bwrap
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.runtime.switching import SwitchingRuntime
from nanoclaw.sandboxes.manager import sandbox_name
from tests.tg_flow import SECRET, Service, Telegram, app_with_door, message, person, texts

ANNA, BOB = person(4242, "Anna"), person(5151, "Bob")


def test_bubblewrap_serves_while_the_image_is_built_then_new_sandboxes_use_docker(make_settings, sqlite_url):
    require(shutil.which("bwrap") is not None and bwrap.probe() is None, "bubblewrap does not work here")
    client, where = docker_rt.connect()
    require(client is not None, f"no Docker engine answers ({where})")
    image = f"nanoclaw-agent-later-{os.getpid()}:latest"
    with FakeModel(script=lambda req: Reply.say("here")) as model, Telegram() as tg:
        settings = make_settings(DATABASE_URL=sqlite_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                 TELEGRAM_API_BASE=tg.url, ANTHROPIC_UPSTREAM_URL=model.url,
                                 ANTHROPIC_API_KEY="sk-ant-image-later", NANOCLAW_RUNTIME="auto",
                                 NANOCLAW_AGENT_IMAGE=image, NANOCLAW_INSTALL_ID=f"imglater-{os.getpid()}")
        app, door = app_with_door(settings)
        svc = Service(app, tg, model, settings)
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:4242", "--role", "owner"),
                     ("user", "add", "telegram:5151", "--role", "member", "--agent", "andy"),
                     ("wire", "telegram", "4242", "andy"), ("wire", "telegram", "5151", "andy")):
            svc.cli(*args)
        bg = service.start_service(app)
        try:
            runtime = bg.manager.runtime
            assert isinstance(runtime, SwitchingRuntime) and runtime.name == "bwrap"
            svc.post(message(4242, ANNA, "first, before the image exists"))
            svc.wait(lambda: texts(tg, 4242) == ["here"], what="the answer from bubblewrap")
            first = sandbox_name(settings.install_id, "andy", Session.get().id)

            svc.wait(lambda: runtime_setup.BUILD.state in ("built", "failed"), timeout=600, what="the image build")
            assert runtime_setup.BUILD.state == "built", runtime_setup.BUILD.error
            assert runtime.name == "docker"
            assert client.images.get(image).labels.get("nanoclaw.source")
            assert runtime.is_running(first)  # the bubblewrap sandbox keeps running where it started
            svc.post(message(5151, BOB, "after the build"))
            svc.wait(lambda: texts(tg, 5151) == ["here"], what="the answer from Docker")
            second = [s for s in Session.select() if sandbox_name(settings.install_id, "andy", s.id) != first][0]
            name = sandbox_name(settings.install_id, "andy", second.id)
            assert runtime.current.is_running(name)  # the new sandbox runs in Docker
            assert client.containers.get(name).attrs["Config"]["Image"] == image
        finally:
            service.stop_intake(app)
            bg.shutdown()
            door.stop()
            database.close()
            try:
                client.images.remove(image, force=True)
            except Exception:
                pass


def test_the_sessions_page_shows_the_build(make_settings, sqlite_url, monkeypatch):
    from nanoclaw.migrate import apply_pending as migrate
    from tests.web.test_admin import PASSWORD, login
    app = create_app(make_settings(DATABASE_URL=sqlite_url))
    database.connect(reuse_if_open=True)
    migrate(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "user", "add", "telegram:1", "--role", "owner"]).exit_code == 0
    assert runner.invoke(args=["nanoclaw", "admin", "set-password", "telegram:1"],
                         input=f"{PASSWORD}\n{PASSWORD}\n").exit_code == 0
    client = app.test_client()
    assert login(client, "telegram:1").status_code == 302
    monkeypatch.setattr(runtime_setup, "BUILD", runtime_setup.BuildStatus("building", "Step 3/9 : RUN pip install"))
    page = client.get("/admin/sessions").get_data(as_text=True)
    assert "Building the agent image for Docker: Step 3/9 : RUN pip install" in page
    monkeypatch.setattr(runtime_setup, "BUILD", runtime_setup.BuildStatus("failed", error="network unreachable"))
    assert "Building the agent image failed: network unreachable" in client.get("/admin/sessions").get_data(as_text=True)
    database.close()


def test_with_only_docker_possible_the_chat_is_told_and_answered_after_the_build(make_settings, sqlite_url,
                                                                                monkeypatch):
    client, where = docker_rt.connect()
    require(client is not None, f"no Docker engine answers ({where})")
    monkeypatch.setattr(bwrap, "probe", lambda *a, **k: "bwrap is not installed")
    monkeypatch.setattr(background, "RUNTIME_RETRY_S", 0.5)
    image = f"nanoclaw-agent-only-{os.getpid()}:latest"
    with FakeModel(script=lambda req: Reply.say("here")) as model, Telegram() as tg:
        settings = make_settings(DATABASE_URL=sqlite_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                 TELEGRAM_API_BASE=tg.url, ANTHROPIC_UPSTREAM_URL=model.url,
                                 ANTHROPIC_API_KEY="sk-ant-image-only", NANOCLAW_RUNTIME="auto",
                                 NANOCLAW_AGENT_IMAGE=image, NANOCLAW_INSTALL_ID=f"imgonly-{os.getpid()}")
        app, door = app_with_door(settings)
        svc = Service(app, tg, model, settings)
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:4242", "--role", "owner"),
                     ("wire", "telegram", "4242", "andy")):
            svc.cli(*args)
        bg = service.start_service(app)
        try:
            assert bg.manager is None  # nothing can start a sandbox until the image is built
            svc.post(message(4242, ANNA, "hello?"))
            svc.wait(lambda: texts(tg, 4242)[:1] == ["(Setting up: your agent's sandbox is being built; the "
                                                         "first answer takes a minute or two.)"], what="the notice")
            svc.wait(lambda: texts(tg, 4242)[1:] == ["here"], timeout=600, what="the answer from Docker")
            assert bg.manager is not None and bg.manager.runtime.name == "docker"
        finally:
            service.stop_intake(app)
            bg.shutdown()
            door.stop()
            database.close()
            try:
                client.images.remove(image, force=True)
            except Exception:
                pass
