"""A fake OpenAI-compatible speech-to-text service: POST {base}/audio/transcriptions.

Shaped as OpenAI documents it (and as whisper.cpp's and faster-whisper's servers answer): a
multipart form with `file` and `model` (and optional `response_format`), an optional bearer key,
`{"text": …}` back; 401 with OpenAI's error body for a wrong key, 400 when `file` or `model` is
missing. `words` picks the transcript for a request (default: one fixed sentence).
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

    def answer(self, req: Recorded):
        if req.method != "POST" or req.path != "/v1/audio/transcriptions":
            return _error(404, f"Invalid URL ({req.method} {req.path})", "invalid_request_error")
        if self.key is not None and req.headers.get("authorization") != f"Bearer {self.key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error")
        if "file" not in req.files or not req.form.get("model"):
            return _error(400, "'file' and 'model' are required", "invalid_request_error")
        return 200, {"text": self.words(req)}, {}
