"""Backup and restore (issue 18): an archive taken while messages flow, restored into a fresh
install, answers with its history: the agent's SDK session resumes and still knows what was said.
Real CLI, real SQLite files, a real bubblewrap sandbox with the SDK against the fake model."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

from fakes.model_api import Reply
from nanoclaw.config import PROJECT_ROOT
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import message, sandbox_service, texts


def script(req):
    if "what is my favourite colour" in req.current_prompt().lower():
        known = "teal" if "my favourite colour is teal" in req.all_text().lower() else "unknown"
        return Reply.say(f"Your favourite colour is {known}.")
    return Reply.say("Noted.")


def test_a_backup_taken_while_messages_flow_restores_with_its_history(make_settings, sqlite_url, tmp_path):
    archive = tmp_path / "nightly.tar.gz"
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        for args in SETUP:
            svc.cli(*args)
        svc.post(message(4242, ANNA, "My favourite colour is teal."))
        svc.wait(lambda: texts(svc.tg, 4242) == ["Noted."], what="the first answer")
        flowing = threading.Thread(target=lambda: [svc.post(message(4242, ANNA, f"chatter {i}")) for i in range(5)])
        flowing.start()
        out = svc.cli("backup", str(archive), "--keep", "3").output
        flowing.join()
        assert "wrote" in out and "1 agent(s)" in out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert "db/nanoclaw.db" in names and any(n.endswith("host/inbound.db") for n in names)
    assert any("/agent/home/" in n for n in names)  # the SDK's transcript
    assert not any(n.startswith("secrets/") for n in names) and manifest["with_secrets"] is False
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600

    fresh = tmp_path / "fresh"
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(fresh / "data"), "NANOCLAW_GROUPS_DIR": str(fresh / "groups"),
           "DATABASE_URL": f"sqlite:///{fresh / 'data' / 'nanoclaw.db'}", "NANOCLAW_ENV_FILE": str(tmp_path / "no.env"),
           "NANOCLAW_MOUNT_ALLOWLIST": str(fresh / "allowlist.json")}
    flask = [str(Path(sys.executable).parent / "flask"), "--app", "app", "nanoclaw"]
    missing = subprocess.run(flask + ["restore", str(tmp_path / "missing.tar.gz")], env=env, cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    done = subprocess.run(flask + ["restore", str(archive)], env=env, cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=120)  # a fresh install, the service not running
    assert done.returncode == 0 and "restored nightly.tar.gz" in done.stdout, done.stdout + done.stderr

    def fresh_settings(**env):
        return make_settings(**env, NANOCLAW_DATA_DIR=fresh / "data", NANOCLAW_GROUPS_DIR=fresh / "groups")
    with sandbox_service(fresh_settings, f"sqlite:///{fresh / 'data' / 'nanoclaw.db'}", script) as svc:
        running = svc.app.test_cli_runner().invoke(args=["nanoclaw", "restore", str(archive), "--force"])
        assert running.exit_code == 2 and "stop it first" in running.output
        svc.post(message(4242, ANNA, "What is my favourite colour?"))
        # chatter still waiting when the archive was taken is answered too ("Noted."), before or with it
        answered = svc.wait(lambda: [t for t in texts(svc.tg, 4242) if "favourite colour" in t],
                            what="an answer with the history")
        assert answered == ["Your favourite colour is teal."]


def test_restore_refuses_a_non_empty_install(make_settings, sqlite_url, tmp_path):
    from nanoclaw.app import create_app
    from nanoclaw.db import database
    from nanoclaw.migrate import apply_pending
    app = create_app(make_settings(DATABASE_URL=sqlite_url))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "agent", "create", "Andy"]).exit_code == 0
    archive = tmp_path / "b.tar.gz"
    assert runner.invoke(args=["nanoclaw", "backup", str(archive), "--with-secrets"]).exit_code == 0
    result = runner.invoke(args=["nanoclaw", "restore", str(archive)])
    assert result.exit_code == 2 and "not empty" in result.output and "--force" in result.output
    database.close()
