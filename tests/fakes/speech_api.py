"""A fake OpenAI-compatible speech service: speech to text (POST {base}/audio/transcriptions) and text
to speech (POST {base}/audio/speech).

Shaped as OpenAI documents it (and as whisper.cpp's and faster-whisper's servers answer): a
multipart form with `file` and `model` (and optional `response_format`), an optional bearer key,
`{"text": …}` back; 401 with OpenAI's error body for a wrong key, 400 when `file` or `model` is
missing. `words` picks the transcript for a request (default: one fixed sentence).

Text to speech as OpenAI documents it (and Kokoro-FastAPI and openedai-speech serve it): JSON
`model`, `input` (at most 4,096 characters), `voice`, optional `response_format` (mp3 by default;
opus is OGG/Opus); the audio bytes back with their content type. The audio made here is a real
OGG page header followed by the input's bytes, so a test can tell which text was spoken.
"""
from __future__ import annotations

from typing import Callable

from .platform_server import FakePlatform, Recorded

SAID = "Could you buy oat milk on the way home, and remind me at six to call the dentist."


def _error(status: int, message: str, kind: str) -> tuple[int, dict, dict]:
    return status, {"error": {"message": message, "type": kind, "param": None, "code": None}}, {}


class FakeSpeech(FakePlatform):
    name = "speech"

    def __init__(self, key: str | None = None, words: Callable[[Recorded], str] = lambda req: SAID):
        super().__init__()
        self.key = key
        self.words = words

    @property
    def base(self) -> str:
        return f"{self.url}/v1"

    def transcriptions(self) -> list[Recorded]:
        return self.accepted(lambda r: r.path == "/v1/audio/transcriptions")

    def spoken(self) -> list[dict]:
        """The JSON of each text-to-speech request answered."""
        return [r.json for r in self.accepted(lambda r: r.path == "/v1/audio/speech")]

    def answer(self, req: Recorded):
        if req.method == "POST" and req.path == "/v1/audio/speech":
            return self._speech(req)
        if req.method != "POST" or req.path != "/v1/audio/transcriptions":
            return _error(404, f"Invalid URL ({req.method} {req.path})", "invalid_request_error")
        if self.key is not None and req.headers.get("authorization") != f"Bearer {self.key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error")
        if "file" not in req.files or not req.form.get("model"):
            return _error(400, "'file' and 'model' are required", "invalid_request_error")
        return 200, {"text": self.words(req)}, {}

    def _speech(self, req: Recorded):
        if self.key is not None and req.headers.get("authorization") != f"Bearer {self.key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error")
        body = req.json if isinstance(req.json, dict) else {}
        text = body.get("input")
        if not isinstance(text, str) or not text or not body.get("model") or not body.get("voice"):
            return _error(400, "'model', 'input' and 'voice' are required", "invalid_request_error")
        if len(text) > 4096:
            return _error(400, "input is longer than 4096 characters", "invalid_request_error")
        kind = body.get("response_format") or "mp3"
        mime = {"opus": "audio/ogg", "mp3": "audio/mpeg", "wav": "audio/wav", "aac": "audio/aac",
                "flac": "audio/flac"}.get(kind)
        if mime is None:
            return _error(400, f"unsupported response_format {kind!r}", "invalid_request_error")
        head = b"OggS\x00\x02" + bytes(20) if kind == "opus" else b"ID3"
        return 200, head + text.encode(), {"content-type": mime}
