"""How a file the agent sends should arrive: as a picture, as audio, or as a document (pure).

Each adapter's send_file asks `sent_as(path, limits)` and calls its platform's matching method; a
picture the platform then refuses (dimensions, format it will not process) is sent again as a
document by the adapter, so the file arrives either way.
"""
from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from pathlib import Path

PICTURE_TYPES = ("image/jpeg", "image/png", "image/webp")


@dataclass(frozen=True)
class Limits:
    """What a platform takes as a picture and as audio: types and sizes (bytes)."""
    picture_types: tuple[str, ...] = PICTURE_TYPES
    picture_bytes: int = 10 * 1024 * 1024
    audio_types: tuple[str, ...] = ()
    audio_bytes: int = 50 * 1024 * 1024


def mime_of(path: Path | str) -> str:
    return mimetypes.guess_type(str(path))[0] or "application/octet-stream"


def sent_as(path: Path | str, size: int, limits: Limits) -> str:
    """"picture", "audio" or "document" for a file of this name and size on this platform."""
    mime = mime_of(path)
    if mime in limits.picture_types and size <= limits.picture_bytes:
        return "picture"
    if (mime in limits.audio_types or (not limits.audio_types and mime.startswith("audio/"))) \
            and size <= limits.audio_bytes:
        return "audio"
    return "document"
