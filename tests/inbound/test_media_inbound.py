"""Phones send photos, albums and voice notes (issue 30): the host saves them, hears a voice note
once through the OpenAI-compatible speech-to-text service however many agents take it, holds an
album until its last item arrived, and never lets the service's key or a failure cost the message.
Real Telegram-shaped updates against the fake Bot API, a fake speech service on 127.0.0.1 shaped
like OpenAI's, the real router and the real session databases."""
from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone

import pytest

from nanoclaw import metrics
from nanoclaw.inbound import transcribe
from nanoclaw.platforms.discord.messages import attachment_of
from nanoclaw.channels import shapes
from nanoclaw.platforms.discord import schema as ds
from nanoclaw.platforms.telegram import schema as tg_schema
from nanoclaw.platforms.telegram.media import attachments_of
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from tests.fakes.speech_api import SAID, FakeSpeech
from tests.inbound.test_attachments import ALICE, fixture, host_path, session_rows, wired_telegram
from tests.tg_flow import post as tg_post, telegram_app
from tests.tg_flow import tg  # noqa: F401  (fixture)

OGG = b"OggS\x00\x02" + bytes(range(256)) * 40  # what matters is that the service gets these bytes


@pytest.fixture
def speech():
    with FakeSpeech(key="sk-speech-test") as server:
        yield server


def voice_update(update_id: int, file_id: str = "AwACAgIAAxkBAAIBvoice", duration: int = 7) -> dict:
    update = fixture("telegram", "voice_message")
    update["update_id"] = update_id
    update["message"]["voice"].update(file_id=file_id, duration=duration, file_size=len(OGG))
    return update


def counted(outcome: str) -> float:
    return metrics.TRANSCRIPTIONS.labels(outcome)._value.get()


# --- voice notes ------------------------------------------------------------------------------

def test_a_voice_note_is_heard_once_for_every_agent_it_goes_to(make_settings, sqlite_url, tg, speech):
    tg.add_file(OGG, file_id="AwACAgIAAxkBAAIBvoice", file_path="voice/file_12.oga")
    with telegram_app(make_settings, sqlite_url, tg, ("agent", "create", "Andy"), ("agent", "create", "Bea"),
                      ("user", "add", f"telegram:{ALICE}", "--role", "owner"),
                      ("wire", "telegram", str(ALICE), "andy"), ("wire", "telegram", str(ALICE), "bea"),
                      NANOCLAW_TRANSCRIBE_URL=speech.base, NANOCLAW_TRANSCRIBE_API_KEY="sk-speech-test") as app:
        tg_post(app, voice_update(910000001))
        rows = session_rows(app.config["NANOCLAW"])
    assert len(rows) == 2
    for session, content in rows:
        [entry] = content["attachments"]
        assert entry["transcript"] == SAID and entry["duration"] == 7 and entry["kind"] == "voice"
        assert host_path(session, entry).read_bytes() == OGG  # the recording stays in inbox/
    [call] = speech.transcriptions()
    assert call.headers["authorization"] == "Bearer sk-speech-test"
    assert call.form["model"] == "whisper-1" and call.files["file"][1] == OGG
    assert set(call.form) <= {"model", "response_format"}  # the audio and nothing else: no name, no chat


def test_a_local_server_needs_no_key(make_settings, sqlite_url, tg):
    tg.add_file(OGG, file_id="AwACAgIAAxkBAAIBvoice", file_path="voice/file_12.oga")
    with FakeSpeech(key=None, words=lambda req: "  on my way  ") as local, \
            wired_telegram(make_settings, sqlite_url, tg, NANOCLAW_TRANSCRIBE_URL=local.base,
                           NANOCLAW_TRANSCRIBE_MODEL="ggml-base.en") as app:
        tg_post(app, voice_update(910000002))
        [(_session, content)] = session_rows(app.config["NANOCLAW"])
        [call] = local.transcriptions()
    assert content["attachments"][0]["transcript"] == "on my way"
    assert "authorization" not in call.headers and call.form["model"] == "ggml-base.en"


@pytest.mark.parametrize("trouble, told", [
    ("refused", "the speech-to-text service refused it (HTTP 401)"),
    ("down", "the speech-to-text service could not be reached"),
    ("too long", "it is 20:00 long, longer than the 15:00 that is transcribed here"),
])
def test_a_voice_note_that_cannot_be_heard_is_kept_and_told_logged_once(make_settings, sqlite_url, tg, speech,
                                                                        caplog, trouble, told):
    tg.add_file(OGG, file_id="AwACAgIAAxkBAAIBvoice", file_path="voice/file_12.oga")
    url = "http://127.0.0.1:9/v1" if trouble == "down" else speech.base
    key = "sk-wrong-key" if trouble == "refused" else "sk-speech-test"
    with wired_telegram(make_settings, sqlite_url, tg, NANOCLAW_TRANSCRIBE_URL=url,
                        NANOCLAW_TRANSCRIBE_API_KEY=key) as app, caplog.at_level(logging.WARNING):
        tg_post(app, voice_update(910000003, duration=1200 if trouble == "too long" else 7))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    [entry] = content["attachments"]
    assert entry["transcript_error"] == told and "transcript" not in entry
    assert host_path(session, entry).read_bytes() == OGG
    lines = [r.getMessage() for r in caplog.records if r.name == "nanoclaw.transcribe"]
    assert len(lines) == 1, lines
    assert "sk-wrong-key" not in caplog.text and "sk-speech-test" not in caplog.text
    if trouble == "too long":
        assert speech.transcriptions() == []  # not even sent


def test_without_a_transcriber_the_agent_is_told_a_voice_note_came(make_settings, sqlite_url, tg, caplog):
    tg.add_file(OGG, file_id="AwACAgIAAxkBAAIBvoice", file_path="voice/file_12.oga")
    before = counted("unset")
    with wired_telegram(make_settings, sqlite_url, tg) as app, caplog.at_level(logging.WARNING):
        tg_post(app, voice_update(910000004))
        [(_session, content)] = session_rows(app.config["NANOCLAW"])
    assert content["attachments"][0]["transcript_error"] == "no speech-to-text service is set up on this NanoClaw"
    assert counted("unset") == before + 1
    assert not [r for r in caplog.records if r.name == "nanoclaw.transcribe"]  # the default, not news


def test_the_service_answering_nonsense_is_a_reason(make_settings, speech):
    settings = make_settings(NANOCLAW_TRANSCRIBE_URL=speech.base, NANOCLAW_TRANSCRIBE_API_KEY="sk-speech-test")
    speech.fail_next(200, b"<html>gateway</html>", {"content-type": "text/html"})
    assert transcribe.Transcriber(settings).outcome("v.oga", "audio/ogg", OGG, 3) == \
        {"transcript_error": "the speech-to-text service gave no words back"}


def test_doctor_says_how_to_set_one_up_and_checks_one_that_is(make_settings, speech):
    ok, detail = transcribe.check(make_settings())
    assert ok is None and "NANOCLAW_TRANSCRIBE_URL" in detail
    good = make_settings(NANOCLAW_TRANSCRIBE_URL=speech.base, NANOCLAW_TRANSCRIBE_API_KEY="sk-speech-test")
    assert transcribe.check(good) == (True, f"{speech.base.split('//')[1].split('/')[0]} answers (whisper-1)")
    bad = make_settings(NANOCLAW_TRANSCRIBE_URL=speech.base, NANOCLAW_TRANSCRIBE_API_KEY="nope")
    ok, detail = transcribe.check(bad)
    assert ok is False and "NANOCLAW_TRANSCRIBE_API_KEY" in detail and "nope" not in detail


# --- what each platform calls a voice note ------------------------------------------------------

def test_each_platform_marks_its_voice_notes_with_their_length():
    telegram = attachments_of(shapes.read(tg_schema.Update, fixture("telegram", "voice_message")).message)
    assert telegram[0]["kind"] == "voice" and telegram[0]["duration"] == 7
    note = attachments_of(shapes.read(tg_schema.Update, fixture("telegram", "video_note")).message)
    assert note[0]["kind"] == "video_note" and transcribe.is_audio({"kind": note[0]["kind"]})
    discord = attachment_of(shapes.read(ds.Attachment, fixture("discord", "gateway_message_voice")["d"]
                                                         ["attachments"][0]))
    assert discord["kind"] == "voice" and discord["duration"] == 4.16
    assert transcribe.is_audio({"mime": "audio/webm"}) and not transcribe.is_audio({"mime": "video/mp4"})


def test_the_largest_photo_size_that_may_be_downloaded_is_taken():
    update = shapes.read(tg_schema.Update, fixture("telegram", "album_photo_1"))
    assert attachments_of(update.message)[0]["file_id"] == "AgACAgIAAxk-a1-x"
    assert attachments_of(update.message, cap=100_000)[0]["file_id"] == "AgACAgIAAxk-a1-m"
    assert attachments_of(update.message, cap=10)[0]["file_id"] == "AgACAgIAAxk-a1-s"  # told as too large later


# --- albums -----------------------------------------------------------------------------------

def pending(path) -> list[tuple[str, str | None]]:
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        return [(r["id"], r["process_after"]) for r in
                conn.execute("SELECT id, process_after FROM messages_in WHERE status = 'pending' ORDER BY seq")]
    finally:
        conn.close()


def test_an_album_waits_for_its_last_item_and_is_taken_in_one_turn(make_settings, sqlite_url, tg):
    for tag in ("a1", "a2"):
        tg.add_file(b"\xff\xd8\xff" + tag.encode() * 100, file_id=f"AgACAgIAAxk-{tag}-x", file_path=f"photos/{tag}.jpg")
    with wired_telegram(make_settings, sqlite_url, tg) as app:
        first, second = fixture("telegram", "album_photo_1"), fixture("telegram", "album_photo_2")
        tg_post(app, first)
        [(session, _)] = session_rows(app.config["NANOCLAW"])
        [(_, held_until)] = pending(session)
        time.sleep(0.05)
        tg_post(app, second)
        rows = pending(session)
    assert len(rows) == 2
    # both wait until just after the second arrived: the runner sees them due together
    assert rows[0][1] == rows[1][1] and rows[1][1] > held_until
    due = datetime.strptime(rows[1][1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert timedelta(0) < due - datetime.now(timezone.utc) <= timedelta(seconds=2)


def test_an_album_item_holds_only_its_own_album(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, store.Target("telegram", "1"))
    store.write_message(path, content={"text": "a", "album": "X"}, target=None, process_after="2999-01-01T00:00:00.000Z")
    store.write_message(path, content={"text": "b"}, target=None)
    store.write_message(path, content={"text": "c", "album": "Y"}, target=None, process_after="2026-01-01T00:00:00.000Z",
                        album="Y")
    assert [after for _id, after in pending(path)] == ["2999-01-01T00:00:00.000Z", None, "2026-01-01T00:00:00.000Z"]
