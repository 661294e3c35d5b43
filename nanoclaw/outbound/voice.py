"""Answers you can hear: the agent's answer also as a voice note, spoken on the host by an
OpenAI-compatible text-to-speech service (`{NANOCLAW_TTS_URL}/audio/speech`: JSON `model`, `input`,
`voice`, `response_format`; OpenAI, Kokoro-FastAPI, openedai-speech …). The key stays on the host.

Which messages: a turn's answer (the runner marks it `answer`) when its chat's wiring says so
(`voice`: auto answers a voice note with one, always, never) and a message the agent sent with
`"voice": true`, unless the chat says never. Progress, cards and everything else stay text. What is
decided comes from the host's own records (the session's options, which the host writes, and the
person's message in inbound.db); the agent's own marks can only ask.

The synthesized audio is written under the session's host-only folder (never the agent's outbox)
and handed to the adapter's file sending with the full text as caption; each adapter sends it as
its platform's voice note and the text as the caption where it fits, else as a message after it,
so nothing is only audible. A failure of the service or a platform refusing voice notes sends the
text alone: logged once, counted. Text over 4,096 characters is not voiced.
"""
from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from pathlib import Path
from urllib.parse import urlsplit

import requests

from .. import metrics
from ..usage import ledger

log = logging.getLogger("nanoclaw.voice")

MAX_CHARS = 4096                   # what OpenAI's endpoint takes in one request
MAX_A_TURN = 3                     # voice sends one turn may make: the agent can ask for voice on any send
_TURNS_KEPT = 1024
TIMEOUT = (5, 60)
MAX_AUDIO_BYTES = 16 * 1024 * 1024
FORMAT, SUFFIX = "opus", ".ogg"    # OGG/Opus: what Telegram, WhatsApp and Signal play as a voice note
_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.S)
_LINK = re.compile(r"\[([^\]]+)\]\((?:https?://|mailto:)[^)]+\)")
_URL = re.compile(r"https?://\S+")
_MARKS = re.compile(r"(\*\*|__|~~|`|^#+\s*|^\s*[-*]\s+)", re.M)


class SpeechError(Exception):
    """The service gave no audio: why, in words for the log (never its key or the text)."""


# --- pure decisions -------------------------------------------------------------------------------

def turn_allows(voiced: set, row_id: str) -> bool:
    """Whether this row may be spoken, given the rows of its turn already spoken (a row tried again after an
    outage keeps its place)."""
    return row_id in voiced or len(voiced) < MAX_A_TURN


_voiced: OrderedDict = OrderedDict()   # (session folder, the message answered) -> rows spoken; the latest kept


def take_turn_place(session_path: Path, in_reply_to: str | None, row_id: str) -> bool:
    """turn_allows for this process's record of the turn, and the row's place taken when it may."""
    key = (str(session_path), in_reply_to or "")
    voiced = _voiced.setdefault(key, set())
    _voiced.move_to_end(key)
    while len(_voiced) > _TURNS_KEPT:
        _voiced.popitem(last=False)
    if not turn_allows(voiced, row_id):
        return False
    voiced.add(row_id)
    return True


def spoken(text: str) -> str:
    """What the voice says: code blocks become "code sent as text", a link its label (a bare one
    "a link"), markdown marks go; the words stay."""
    text = _CODE_BLOCK.sub(" (code sent as text) ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub("a link", text)
    text = _MARKS.sub("", text)
    return re.sub(r"[ \t]+", " ", re.sub(r"\n{3,}", "\n\n", text)).strip()


def wanted(op: dict, mode: str, answers_a_voice_note: bool) -> bool:
    """Voice this row? `mode` is the chat's (auto|always|never), from the host's own records."""
    if mode == "never" or op.get("op") != "text":
        return False
    if op.get("voice") is True:
        return True
    if op.get("answer") is not True:
        return False
    return mode == "always" or (mode == "auto" and answers_a_voice_note)


# --- reading the facts ----------------------------------------------------------------------------

def chat_mode(conn) -> str:
    """The session's `voice` option, which the host writes from the chat's wiring ('never' without one)."""
    try:
        row = conn.execute("SELECT value FROM options WHERE key = 'voice'").fetchone()
    except Exception:  # noqa: BLE001 - a session made before options existed
        return "never"
    return row[0] if row and row[0] in ("auto", "always", "never") else "never"


def answers_a_voice_note(conn, message_in_id: str | None) -> bool:
    """Whether the message this answers (the host's own inbound.db) carried a voice note."""
    if not message_in_id:
        return False
    row = conn.execute("SELECT content FROM messages_in WHERE id = ?", (message_in_id,)).fetchone()
    try:
        files = json.loads(row[0]).get("attachments") or [] if row else []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(f, dict) and f.get("kind") == "voice" for f in files)


# --- the service ----------------------------------------------------------------------------------

def where(url: str) -> str:
    return urlsplit(url).netloc or "?"


class Speaker:
    def __init__(self, settings, http: requests.Session | None = None):
        self.settings = settings
        self.http = http or requests.Session()

    def synthesize(self, text: str) -> bytes:
        settings = self.settings
        headers = {"Authorization": f"Bearer {settings.tts_api_key}"} if settings.tts_api_key else {}
        body = {"model": settings.tts_model, "input": text, "voice": settings.tts_voice, "response_format": FORMAT}
        try:
            resp = self.http.post(settings.tts_url.rstrip("/") + "/audio/speech", json=body, headers=headers,
                                  timeout=TIMEOUT, stream=True)
        except requests.RequestException as exc:
            raise SpeechError(f"{where(settings.tts_url)} did not answer ({type(exc).__name__})") from None
        with resp:
            if resp.status_code != 200:
                raise SpeechError(f"{where(settings.tts_url)} answered HTTP {resp.status_code}"
                                  + (" (check NANOCLAW_TTS_API_KEY)" if resp.status_code in (401, 403) else ""))
            data = resp.raw.read(MAX_AUDIO_BYTES + 1, decode_content=True)
        if not data or len(data) > MAX_AUDIO_BYTES:
            raise SpeechError(f"{where(settings.tts_url)} gave {'no' if not data else 'too much'} audio")
        return data


def check(settings) -> tuple[bool | None, str]:
    """`doctor`: one word spoken. (None: not set up.)"""
    if not settings.tts_url:
        return None, ("no text-to-speech service: set NANOCLAW_TTS_URL (https://api.openai.com/v1 with "
                      "NANOCLAW_TTS_API_KEY, or a local Kokoro-FastAPI or openedai-speech) for answers you can hear")
    try:
        audio = Speaker(settings).synthesize("Hello.")
    except SpeechError as exc:
        return False, str(exc)
    return True, f"{where(settings.tts_url)} speaks ({settings.tts_model}, voice {settings.tts_voice}; " \
                 f"{len(audio)} bytes for one word)"


# --- sending --------------------------------------------------------------------------------------

_told: set[str] = set()


def _once(kind: str, message: str, *args) -> None:
    if kind not in _told:
        _told.add(kind)
        log.warning(message + " (logged once; counted in nanoclaw_voice_answers_total)", *args)


def send(adapter, target, text: str, settings, session_path: Path, row_id: str, in_reply_to: str | None = None
         ) -> str | None:
    """The text as a voice note with the text as its caption (or after it: the adapter's file
    sending knows its platform's caption limit); the text alone when the voice cannot be made or
    sent, or when the turn has spoken MAX_A_TURN times already. What is spoken is priced into the
    agent's spend (NANOCLAW_TTS_PRICE_PER_1K_CHARS), so its budget counts it. The audio waits in the
    session's host-only folder (`session_path`), which no sandbox sees."""
    if len(text) > MAX_CHARS:
        _once("long", "an answer over %d characters was sent as text only", MAX_CHARS)
        metrics.VOICE_ANSWERS.labels("too_long").inc()
        return adapter.send_text(target, text)
    if not take_turn_place(session_path, in_reply_to, row_id):
        _once("turn_cap", "a turn asked for more than %d voice notes; the rest went as text only", MAX_A_TURN)
        metrics.VOICE_ANSWERS.labels("turn_cap").inc()
        return adapter.send_text(target, text)
    words = spoken(text)
    try:
        audio = Speaker(settings).synthesize(words)
    except SpeechError as exc:
        _once("service", "the answer went as text only: the text-to-speech service failed: %s", exc)
        metrics.VOICE_ANSWERS.labels("speech_failed").inc()
        return adapter.send_text(target, text)
    ledger.record_speech(session_path.parent.name, session_path.name, settings.tts_model, len(words),
                         settings.tts_price_per_1k_chars, ledger.today(settings.timezone))
    folder = session_path / "voice"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"answer-{row_id[:12]}{SUFFIX}"
    path.write_bytes(audio)
    try:
        if getattr(adapter, "voice_notes", False):
            pid = adapter.send_file(target, path, text, voice=True)
        else:
            pid = adapter.send_file(target, path, text)
    except Exception as exc:  # noqa: BLE001 - a platform refusing voice notes: the text alone
        from ..channels.base import DeliveryError
        if isinstance(exc, DeliveryError) and not exc.permanent:
            raise  # the platform is away: the whole row is tried again
        _once("platform", "a voice note was refused (%s); the answer went as text only", exc)
        metrics.VOICE_ANSWERS.labels("platform_refused").inc()
        return adapter.send_text(target, text)
    finally:
        path.unlink(missing_ok=True)
    metrics.VOICE_ANSWERS.labels("sent").inc()
    return pid
