"""A chat silent for NANOCLAW_SILENT_SESSION_DAYS: its session folder (and the SDK transcript) is
packed into the archive and removed; its next message starts a fresh conversation that is answered.
A session with something pending, undelivered or scheduled stays."""
from __future__ import annotations

import os
import tarfile
import time

from nanoclaw.lifecycle.silent import clear_silent
from nanoclaw.models import AuditLog, ScheduledTask, Session, utcnow
from tests.fakes.model_api import Reply
from tests.tg_flow import message, person, sandbox_service, texts

OWNER = person(111, "Olivia")


def test_a_silent_chats_folder_is_archived_and_its_next_message_starts_afresh(make_settings, sqlite_url):
    def brain(req):
        remembered = "first question" in " ".join(req.user_texts()) and "second question" in req.current_prompt()
        return Reply.say("I remember" if remembered else "fresh start")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")
        svc.post(message(111, OWNER, "first question"))
        svc.wait(lambda: texts(svc.tg, 111), what="the first answer")
        session = Session.get()
        path = svc.settings.sessions_dir / "andy" / session.id
        bg = svc.app.extensions["nanoclaw.background"]
        bg.manager.stop("andy", session.id)
        svc.wait(lambda: not bg.manager.is_running("andy", session.id), what="the sandbox to stop")

        assert clear_silent(svc.settings, bg.manager) == []  # not silent yet
        later = time.time() + 200 * 86400  # 200 days on: the chat has been silent since
        task = ScheduledTask.create(id="t1", agent_group=session.agent_group, session=session, prompt="x",
                                    schedule_kind="cron", schedule_value="0 9 * * *", next_run_at=utcnow())
        assert clear_silent(svc.settings, bg.manager, now=later) == []  # it has a task of its own
        task.delete_instance()

        assert clear_silent(svc.settings, bg.manager, now=later) == [session.id]
        assert not path.exists()
        entry = AuditLog.get(AuditLog.action == "session.archive")
        with tarfile.open(entry.detail["archive"]) as tar:
            names = tar.getnames()
        assert f"andy/{session.id}/host/inbound.db" in names
        assert any("/agent/home/.claude/projects/" in n and n.endswith(".jsonl") for n in names)  # the transcript
        assert os.stat(entry.detail["archive"]).st_mode & 0o777 == 0o600
        bg.sweep(full=True)  # a start-up pass over a session without its folder

        svc.post(message(111, OWNER, "second question"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, what="the answer after the archive")
        assert texts(svc.tg, 111)[-1] == "fresh start"
        assert Session.select().count() == 1 and path.exists()
