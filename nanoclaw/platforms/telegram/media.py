"""Telegram's files: what a message carries (attachments_of, for InboundEvent.attachments) and
which Bot API method a file we send goes with (SENT_AS, SEND_METHODS)."""
from __future__ import annotations

from . import schema as tg
from ...channels.files import Limits

BOT_API_FILE_LIMIT = 20 * 1024 * 1024  # getFile hands out nothing bigger
# sendPhoto takes JPEG/PNG/WebP up to 10 MB; uploads of audio and documents up to 50 MB.
SENT_AS = Limits(picture_bytes=10 * 1024 * 1024, audio_types=("audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/ogg"),
                 audio_bytes=50 * 1024 * 1024)
SEND_METHODS = {"picture": ("sendPhoto", "photo"), "voice": ("sendVoice", "voice"), "audio": ("sendAudio", "audio"),
                "document": ("sendDocument", "document")}
ATTACHMENT_KINDS = ("document", "audio", "video", "voice", "video_note", "animation", "sticker")


def largest_photo(sizes: list[tg.PhotoSize], cap: int) -> tg.PhotoSize:
    """The biggest size Telegram offers that may be downloaded (the Bot API hands out at most
    20 MB, and NANOCLAW_ATTACHMENT_MAX_BYTES may say less); the smallest when none fits."""
    area = lambda p: (p.width * p.height, p.file_size or 0)  # noqa: E731
    fitting = [p for p in sizes if (p.file_size or 0) <= cap]
    return max(fitting, key=area) if fitting else min(sizes, key=area)


def attachments_of(msg: tg.Message, cap: int = BOT_API_FILE_LIMIT) -> tuple[dict, ...]:
    found = []
    if msg.photo:
        best = largest_photo(msg.photo, min(cap, BOT_API_FILE_LIMIT))
        found.append({"kind": "photo", "file_id": best.file_id, "name": None, "mime": "image/jpeg",
                      "size": best.file_size, "width": best.width, "height": best.height})
    for kind in ATTACHMENT_KINDS:
        item = getattr(msg, kind)
        if item is None:
            continue
        entry = {"kind": kind, "file_id": item.file_id, "name": item.file_name, "mime": item.mime_type,
                 "size": item.file_size}
        if item.duration is not None:
            entry["duration"] = item.duration
        if kind == "video_note" and not item.mime_type:
            entry["mime"] = "video/mp4"  # Telegram gives none; heard for its sound
        if kind == "voice" and not item.mime_type:
            entry["mime"] = "audio/ogg"
        if kind == "sticker":
            entry["mime"] = "video/webm" if item.is_video else \
                "application/x-tgsticker" if item.is_animated else "image/webp"
        found.append(entry)
    return tuple(found)
