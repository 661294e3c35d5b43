"""A full disk (issue 15, faults): webhooks answer 503 so the platform retries, nothing is
half-written, and service resumes by itself when space returns.

The data lives on a real, small tmpfs filled to the last byte (mounted by the test: root only, as
in CI). Telegram updates go through the real webhook into the real SQLite files."""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import require
from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.inbound import intake
from nanoclaw.models import AcceptedEvent
from tests.inbound.test_intake import ANNA, SETUP, session_texts, unrouted_rows
from tests.tg_flow import SECRET, message, telegram_app, tg  # noqa: F401  (tg is a fixture)


def unavailable_total() -> float:
    from prometheus_client import REGISTRY
    return sum(s.value for m in REGISTRY.collect() if m.name == "nanoclaw_webhooks_unavailable"
               for s in m.samples if s.name.endswith("_total"))


@contextmanager
def small_disk(path: Path, size: str = "16m"):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    require(done.returncode == 0, f"cannot mount a tmpfs here (root needed): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; its path (delete it to give space back)."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        while True:  # the last partial block
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    return filler


def post_update(app, update):
    return app.test_client().post("/webhooks/telegram", json=update,
                                  headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def disk(tmp_path):
    with small_disk(tmp_path / "disk") as path:
        yield path


def test_a_full_disk_answers_503_and_the_retry_after_space_returns_counts_once(make_settings, tmp_path, disk, tg):
    db = disk / "nanoclaw.db"
    with telegram_app(make_settings, f"sqlite:///{db}", tg, *SETUP, NANOCLAW_DATA_DIR=disk / "data") as app:
        assert post_update(app, message(4242, ANNA, "before")).status_code == 200
        assert session_texts(app) == ["before"]
        from nanoclaw.db import database
        database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")  # the next write must find new space
        filler = fill(disk)
        update = message(4242, ANNA, "while full")
        unavailable = unavailable_total()

        resp = post_update(app, update)
        assert resp.status_code == 503, resp.data
        assert resp.headers["Retry-After"].isdigit()
        assert unavailable_total() == unavailable + 1
        assert not AcceptedEvent.select().where(AcceptedEvent.event_id == str(update["update_id"])).exists()
        assert session_texts(app) == ["before"]

        os.unlink(filler)  # space returns; Telegram sends the same update again
        assert post_update(app, update).status_code == 200
        assert session_texts(app) == ["before", "while full"]
        assert post_update(app, update).status_code == 200  # a second retry is a duplicate
        assert session_texts(app) == ["before", "while full"]
        assert integrity(db) == "ok"


def test_a_full_sessions_disk_keeps_the_accepted_event_until_it_can_be_written(make_settings, tmp_path, disk, tg):
    """The central database has room, the session folders do not: the webhook is acknowledged (the
    event is stored), the session's inbound.db is left as it was, and the recovery pass writes the
    message once space returns."""
    with telegram_app(make_settings, f"sqlite:///{tmp_path / 'central.db'}", tg, *SETUP,
                      NANOCLAW_DATA_DIR=disk / "data") as app:
        assert post_update(app, message(4242, ANNA, "before")).status_code == 200
        session_db = next((disk / "data").rglob("inbound.db"))
        conn = sqlite3.connect(session_db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        filler = fill(disk)

        assert post_update(app, message(4242, ANNA, "while full")).status_code == 200
        assert unrouted_rows() == 1
        assert session_texts(app) == ["before"]
        assert integrity(session_db) == "ok"

        os.unlink(filler)
        assert intake.recover(app.config["NANOCLAW"], NO_WAKE, older_than_s=0) == 1  # the background's periodic pass
        assert unrouted_rows() == 0
        assert session_texts(app) == ["before", "while full"]
        assert intake.recover(app.config["NANOCLAW"], NO_WAKE, older_than_s=0) == 0
        assert session_texts(app) == ["before", "while full"]
