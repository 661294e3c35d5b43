"""Answers you can hear (issue 42): which rows are spoken (the chat's choice from the host's own
records, the agent's ask), what the voice says, and every way it falls back to the text alone (the
service failing, a platform refusing voice notes, text too long), each logged once and counted. The
real delivery pass, a real session folder, the fake speech service and a recording adapter."""
from __future__ import annotations

import logging

import pytest

from conftest import counter_value
from nanoclaw.channels.base import DeliveryError
from nanoclaw.outbound import voice
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.fakes.speech_api import FakeSpeech


def test_what_the_voice_says():
    text = ("**Done.** See [the report](https://example.org/r) or https://example.org/x\n"
            "```python\nprint('hi')\n```\n- one\n- two")
    assert voice.spoken(text) == "Done. See the report or a link\n (code sent as text) \none\ntwo"


@pytest.mark.parametrize("op,mode,voice_note,expected", [
    ({"op": "text", "text": "x", "answer": True}, "auto", True, True),
    ({"op": "text", "text": "x", "answer": True}, "auto", False, False),
    ({"op": "text", "text": "x", "answer": True}, "always", False, True),
    ({"op": "text", "text": "x", "answer": True}, "never", True, False),
    ({"op": "text", "text": "x"}, "always", True, False),            # a message in the turn: text
    ({"op": "text", "text": "x", "voice": True}, "auto", False, True),  # the agent asked
    ({"op": "text", "text": "x", "voice": True}, "never", False, False),  # the chat's never wins
    ({"op": "card", "text": "x", "answer": True}, "always", True, False),
    ({"op": "text", "text": "x", "voice": "yes"}, "auto", False, False),  # only a real true asks
])
def test_which_rows_are_spoken(op, mode, voice_note, expected):
    assert voice.wanted(op, mode, voice_note) is expected


class Recorder:
    """An adapter that keeps what it was asked to send."""
    voice_notes = True

    def __init__(self, refuse: DeliveryError | None = None):
        self.sent: list[tuple] = []
        self.refuse = refuse

    def send_text(self, target, text):
        self.sent.append(("text", text))
        return "t1"

    def send_file(self, target, path, caption, voice=False):
        if self.refuse:
            raise self.refuse
        self.sent.append(("voice" if voice else "file", path.read_bytes(), caption))
        return "v1"


@pytest.fixture
def session(tmp_path, monkeypatch, sqlite_app):
    path = tmp_path / "sessions" / "andy" / "s1"   # the agent's folder and the session's id, as the host lays them
    store.prepare(path, Target("recorder", "chat-1"))
    schema.connect(path / "agent" / schema.OUTBOUND).close()
    recorder = Recorder()
    monkeypatch.setattr("nanoclaw.outbound.delivery.get_adapter", lambda _name, _settings: recorder)
    return path, recorder


def answer_to(path, *, voice_note: bool, text: str = "It is sunny.", mode: str = "auto", rows: int = 1,
              **extra) -> None:
    attachments = [{"kind": "voice", "name": "voice.oga", "path": "/workspace/inbound/inbox/x/voice.oga"}] \
        if voice_note else []
    mid = store.write_message(path, content={"text": "", "attachments": attachments}, target=Target("recorder", "chat-1"))
    store.set_option(path, "voice", mode)
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    for n in range(1, rows + 1):
        conn.execute("INSERT INTO messages_out (id, seq, in_reply_to, timestamp, kind, channel_type, platform_id, "
                     "content) VALUES (?, ?, ?, ?, 'chat', 'recorder', 'chat-1', ?)",
                     (f"o{n}", n, mid, schema.utc_now_iso(),
                      __import__("json").dumps({"op": "text", "text": text if rows == 1 else f"{text} {n}",
                                                "answer": n == rows, **extra})))
    conn.close()


def test_a_voice_note_is_answered_with_one_and_its_text(session, make_settings):
    path, recorder = session
    with FakeSpeech() as speech:
        answer_to(path, voice_note=True)
        assert deliver_session(path, make_settings(NANOCLAW_TTS_URL=speech.base)) == 1
    [(kind, audio, caption)] = recorder.sent
    assert (kind, caption) == ("voice", "It is sunny.") and audio.startswith(b"OggS") and audio.endswith(b"It is sunny.")
    assert not (path / "voice").exists() or not any((path / "voice").iterdir())  # nothing left behind


def test_what_is_spoken_is_priced_into_the_agents_spend(session, make_settings):
    """Issue 60, item 9: text to speech costs money outside the door; it is the agent's spend too, so its
    budget counts it (NANOCLAW_TTS_PRICE_PER_1K_CHARS)."""
    from nanoclaw.usage import ledger
    path, recorder = session
    settings = make_settings(NANOCLAW_TTS_PRICE_PER_1K_CHARS="0.03")
    text = "It is sunny. " * 40  # 520 characters, spoken as they are (no code, no links)
    with FakeSpeech() as speech:
        answer_to(path, voice_note=True, text=text)
        from dataclasses import replace
        assert deliver_session(path, replace(settings, tts_url=speech.base)) == 1
    spoken = len(voice.spoken(text))
    spent = ledger.spent("andy", ledger.today(settings.timezone))
    assert spent.day_micro == round(spoken * 0.03 * 1000) > 0  # 0.03 USD per 1,000 characters
    assert recorder.sent[0][0] == "voice"


def test_a_turn_speaks_at_most_three_times(session, make_settings):
    """The agent can ask for voice on any send: a turn of five sends asking for it gets three voice notes
    and two texts, logged once and counted."""
    path, recorder = session
    before = counter_value("nanoclaw_voice_answers_total", {"outcome": "turn_cap"})
    with FakeSpeech() as speech:
        answer_to(path, voice_note=False, text="Listen", rows=5, voice=True)
        assert deliver_session(path, make_settings(NANOCLAW_TTS_URL=speech.base)) == 5
    assert [kind for kind, *_ in recorder.sent] == ["voice", "voice", "voice", "text", "text"]
    assert counter_value("nanoclaw_voice_answers_total", {"outcome": "turn_cap"}) - before == 2


def test_without_a_voice_set_up_or_for_a_typed_message_the_answer_is_text(session, make_settings):
    path, recorder = session
    answer_to(path, voice_note=True)
    deliver_session(path, make_settings())
    assert recorder.sent == [("text", "It is sunny.")]


@pytest.mark.parametrize("how", ["service down", "wrong key", "platform refuses", "too long"])
def test_every_failure_sends_the_text_alone_logged_once_and_counted(session, make_settings, caplog, how):
    path, recorder = session
    caplog.set_level(logging.WARNING, "nanoclaw.voice")
    voice._told.clear()
    outcome = {"service down": "speech_failed", "wrong key": "speech_failed", "platform refuses": "platform_refused",
               "too long": "too_long"}[how]
    before = counter_value("nanoclaw_voice_answers_total", {"outcome": outcome})
    with FakeSpeech(key="sk-right") as speech:
        url = "http://127.0.0.1:9/v1" if how == "service down" else speech.base
        settings = make_settings(NANOCLAW_TTS_URL=url, NANOCLAW_TTS_API_KEY="sk-wrong" if how == "wrong key"
                                 else "sk-right")
        if how == "platform refuses":
            recorder.refuse = DeliveryError("Bad Request: VOICE_MESSAGES_FORBIDDEN", permanent=True)
        text = "word " * 900 if how == "too long" else "It is sunny."
        answer_to(path, voice_note=True, text=text)
        assert deliver_session(path, settings) == 1
    assert recorder.sent == [("text", text)]
    assert counter_value("nanoclaw_voice_answers_total", {"outcome": outcome}) == before + 1
    assert len([r for r in caplog.records if r.name == "nanoclaw.voice"]) == 1
    assert "sk-" not in caplog.text


def test_a_platform_that_is_away_gets_the_whole_row_again(session, make_settings):
    path, recorder = session
    recorder.refuse = DeliveryError("Too Many Requests", retry_after=5)
    with FakeSpeech() as speech:
        answer_to(path, voice_note=True)
        assert deliver_session(path, make_settings(NANOCLAW_TTS_URL=speech.base)) == 0
    assert recorder.sent == []  # retried later as a voice note, not sent as text now


def test_doctor_speaks_one_word(make_settings):
    with FakeSpeech(key="sk-speech") as speech:
        ok, detail = voice.check(make_settings(NANOCLAW_TTS_URL=speech.base, NANOCLAW_TTS_API_KEY="sk-speech"))
        assert ok and "speaks (tts-1, voice alloy" in detail and speech.spoken()[0]["input"] == "Hello."
        ok, detail = voice.check(make_settings(NANOCLAW_TTS_URL=speech.base, NANOCLAW_TTS_API_KEY="sk-nope"))
        assert ok is False and "NANOCLAW_TTS_API_KEY" in detail and "sk-nope" not in detail
    assert voice.check(make_settings())[0] is None


def test_wire_voice_sets_the_chat_and_its_sessions_at_once(sqlite_app):
    from nanoclaw.models import AgentGroup, MessagingGroup, Session, Wiring
    runner = sqlite_app.test_cli_runner()
    settings = sqlite_app.config["NANOCLAW"]
    for args in (["agent", "create", "Andy"], ["wire", "telegram", "42", "andy"]):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
    wiring = Wiring.get()
    assert wiring.voice == "auto"
    session = Session.create(id="s1", agent_group=AgentGroup.get(), messaging_group=MessagingGroup.get())
    path = store.session_path(settings.sessions_dir, "andy", "s1")
    store.prepare(path, Target("telegram", "42"))
    done = runner.invoke(args=["nanoclaw", "wire", "telegram", "42", "andy", "--voice", "never"])
    assert done.exit_code == 0 and "voice never" in done.output
    assert Wiring.get().voice == "never" and session.id == "s1"
    conn = schema.connect(store.inbound_db(path), readonly=True)
    assert voice.chat_mode(conn) == "never"
    conn.close()
    bad = runner.invoke(args=["nanoclaw", "wire", "telegram", "42", "andy", "--voice", "loud"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
