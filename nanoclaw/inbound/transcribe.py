"""Voice notes and audio as words, on the host, through an OpenAI-compatible speech-to-text service.

`NANOCLAW_TRANSCRIBE_URL` is the service's base (…/v1); the audio goes to `{url}/audio/transcriptions`
as multipart `file` and `model` (`NANOCLAW_TRANSCRIBE_MODEL`, default whisper-1), with
`NANOCLAW_TRANSCRIBE_API_KEY` as a bearer token when one is set (local whisper servers need none).
The service gets the audio and nothing else: no name of the person, no chat, no text.

The router's InboxFiles calls this once per file of an event, however many agents take the message;
the outcome rides in the attachment's entry: `transcript`, or `transcript_error` (why it could not
be heard, in words the agent may pass on). Each failure is logged once, here, and counted. The key
stays on the host: the sandbox only ever sees the words.
"""
from __future__ import annotations

import logging
from urllib.parse import urlsplit

import requests

from .. import metrics
from agent_runner.attachments import clock  # the runner is a package of this project (pyproject.toml)

log = logging.getLogger("nanoclaw.transcribe")

AUDIO_KINDS = ("voice", "audio", "video_note")
TIMEOUT = (5, 120)          # connect, answer: a long note takes a while on a CPU-only local server
MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # what OpenAI's endpoint takes; larger is refused before sending
MAX_TRANSCRIPT_CHARS = 20_000


def is_audio(facts: dict) -> bool:
    """A voice note, an audio file, or a round video message (heard for its sound)."""
    mime = str(facts.get("mime") or "").lower()
    return facts.get("kind") in AUDIO_KINDS or mime.startswith("audio/")


def refusal(settings, duration, size: int) -> tuple[str, str] | None:
    """(outcome, why) when this recording is not sent at all; None when it may be (pure)."""
    if not settings.transcribe_url:
        return "unset", "no speech-to-text service is set up on this NanoClaw"
    if isinstance(duration, (int, float)) and duration > settings.transcribe_max_s:
        return "too_long", (f"it is {clock(duration)} long, longer than the {clock(settings.transcribe_max_s)} "
                            "that is transcribed here")
    if size > MAX_UPLOAD_BYTES:
        return "too_long", "it is larger than the 25 MB the speech-to-text service takes"
    return None


def where(url: str) -> str:
    """The service as logs name it: its host, never its path or query (which may hold a key)."""
    return urlsplit(url).netloc or "?"


class Transcriber:
    def __init__(self, settings, http: requests.Session | None = None):
        self.settings = settings
        self.http = http or requests.Session()

    def outcome(self, name: str, mime: str | None, data: bytes, duration=None) -> dict:
        """{"transcript": words} or {"transcript_error": why}: what goes into the attachment entry."""
        refused = refusal(self.settings, duration, len(data))
        if refused is not None:
            kind, why = refused
            metrics.TRANSCRIPTIONS.labels(kind).inc()
            if kind != "unset":  # unset is the default: doctor says how to set one up, not each note
                log.warning("voice note %s not transcribed: %s", name, why)
            return {"transcript_error": why}
        words, why = self._ask(name, mime, data)
        if why is not None:
            return {"transcript_error": why}
        metrics.TRANSCRIPTIONS.labels("ok").inc()
        return {"transcript": words}

    def _ask(self, name: str, mime: str | None, data: bytes) -> tuple[str, str | None]:
        url = f"{self.settings.transcribe_url}/audio/transcriptions"
        headers = {"Authorization": f"Bearer {self.settings.transcribe_api_key}"} \
            if self.settings.transcribe_api_key else {}
        try:
            resp = self.http.post(url, headers=headers, timeout=TIMEOUT,
                                  data={"model": self.settings.transcribe_model, "response_format": "json"},
                                  files={"file": (name, data, mime or "application/octet-stream")})
        except requests.Timeout:
            return self._failed("failed", "the speech-to-text service did not answer in time", "timed out")
        except requests.RequestException as exc:
            return self._failed("failed", "the speech-to-text service could not be reached", type(exc).__name__)
        if resp.status_code != 200:
            return self._failed("refused", f"the speech-to-text service refused it (HTTP {resp.status_code})",
                                f"HTTP {resp.status_code}")
        try:
            words = resp.json().get("text")
        except (ValueError, AttributeError):
            words = None
        if not isinstance(words, str):
            return self._failed("failed", "the speech-to-text service gave no words back", "no text in its answer")
        return words.strip()[:MAX_TRANSCRIPT_CHARS], None

    def _failed(self, outcome: str, why: str, detail: str) -> tuple[str, str]:
        metrics.TRANSCRIPTIONS.labels(outcome).inc()
        log.warning("transcription at %s failed: %s", where(self.settings.transcribe_url), detail)
        return "", why


def silence_wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A short silent WAV: what `doctor` sends to see the service answer (costs a fraction of a cent)."""
    import io
    import wave
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(rate * seconds))
    return out.getvalue()


def check(settings, http: requests.Session | None = None) -> tuple[bool | None, str]:
    """doctor's line: (ok, detail). Not set up is not a failure, but it says what voice notes lose."""
    if not settings.transcribe_url:
        return None, ("not set up: voice notes reach the agent as files it cannot hear. Set "
                      "NANOCLAW_TRANSCRIBE_URL to an OpenAI-compatible speech-to-text base, e.g. "
                      "https://api.openai.com/v1 (with NANOCLAW_TRANSCRIBE_API_KEY) or a local whisper server's "
                      "http://127.0.0.1:PORT/v1")
    words, why = Transcriber(settings, http)._ask("doctor.wav", "audio/wav", silence_wav())
    if why is None:
        return True, f"{where(settings.transcribe_url)} answers ({settings.transcribe_model})"
    if "HTTP 401" in why or "HTTP 403" in why:
        return False, f"{where(settings.transcribe_url)} refused the key; check NANOCLAW_TRANSCRIBE_API_KEY"
    return False, f"{why}; check NANOCLAW_TRANSCRIBE_URL ({where(settings.transcribe_url)}) and that it is running"
