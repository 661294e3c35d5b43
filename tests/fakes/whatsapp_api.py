"""A fake WhatsApp Cloud API (Graph) on 127.0.0.1: `/{phone-number-id}/messages` and `/media`.

It checks what Graph checks for the calls we make (the bearer token, the phone number id,
text and interactive limits) and answers in Graph's shape, errors included. Media users sent
(`add_media`) is described at `GET /{media-id}` and served, to the same token, at a
lookaside-style `/whatsapp_business/attachments/?mid=…` URL.
"""
from __future__ import annotations

import hashlib
import itertools
import time
from typing import Any

from .platform_server import FakePlatform, Recorded

TOKEN = "wa-test-token"
PHONE_NUMBER_ID = "106540352242922"


def graph_error(message: str, code: int, status: int = 400, **extra) -> tuple[int, dict, dict]:
    return status, {"error": {"message": message, "type": "OAuthException", "code": code,
                              "fbtrace_id": "AbCdEfGh123", **extra}}, {}


RATE_LIMITED = {"error": {"message": "(#130429) Rate limit hit", "type": "OAuthException", "code": 130429,
                          "error_data": {"messaging_product": "whatsapp",
                                         "details": "Cloud API message throughput has been reached."},
                          "fbtrace_id": "AbCdEfGh123"}}


class FakeWhatsApp(FakePlatform):
    name = "whatsapp"

    def __init__(self):
        super().__init__()
        self._ids = itertools.count(1)
        self.media: dict[str, tuple[str, bytes]] = {}  # media id -> (mime type, bytes) users sent
        self.media_url_base: str | None = None          # where media URLs point (default: this fake)
        self.uploaded: dict[str, tuple[str, int]] = {}   # media id -> (type, size) we uploaded

    def add_media(self, data: bytes, mime_type: str, media_id: str | None = None) -> str:
        media_id = media_id or f"10033834213{next(self._ids):05d}"
        self.media[media_id] = (mime_type, data)
        return media_id

    # what a test asserts on
    def messages(self, type_: str | None = None) -> list[dict[str, Any]]:
        """Message bodies Graph accepted (the user saw them), in order."""
        return [r.json for r in self.accepted(lambda r: r.path.endswith("/messages") and "type" in (r.json or {}))
                if type_ is None or r.json["type"] == type_]

    def answer(self, req: Recorded):
        if req.headers.get("authorization") != f"Bearer {TOKEN}":
            return graph_error("Invalid OAuth access token - Cannot parse access token", 190, 401)
        if req.method == "GET":
            return self._media(req)
        if req.method != "POST" or not req.path.startswith(f"/{PHONE_NUMBER_ID}/"):
            return graph_error("Unsupported post request.", 100)
        if req.path.endswith("/media"):
            if req.form.get("messaging_product") != "whatsapp" or "file" not in req.files:
                return graph_error("(#100) The parameter messaging_product is required.", 100)
            media_id = f"{next(self._ids)}0000000000001"
            _name, data, mime = req.files["file"]
            self.uploaded[media_id] = (req.form.get("type") or mime, len(data))
            return 200, {"id": media_id}, {}
        if not req.path.endswith("/messages"):
            return graph_error("Unknown path components", 2500)
        body = req.json or {}
        if body.get("messaging_product") != "whatsapp":
            return graph_error("(#100) The parameter messaging_product is required.", 100)
        if body.get("status") == "read":
            return 200, {"success": True}, {}
        problem = _invalid(body) or self._media_problem(body)
        if problem:
            return graph_error(f"(#131009) Parameter value is not valid: {problem}", 131009)
        to = body["to"]
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": to}],
                     "messages": [{"id": f"wamid.FAKE{next(self._ids):06d}"}]}, {}


    def _media_problem(self, body: dict) -> str | None:
        """What Graph checks of a media message: an uploaded id, a type and size the kind takes, no
        caption on audio."""
        kind = body.get("type")
        if kind not in MEDIA_LIMITS:
            return None
        content = body[kind]
        if kind == "audio" and "caption" in content:
            return "audio takes no caption"
        found = self.uploaded.get(str(content.get("id")))
        if found is None:
            return f"{kind} id"
        types, cap = MEDIA_LIMITS[kind]
        if (types and found[0] not in types) or found[1] > cap:
            return f"{kind} of type {found[0]} and {found[1]} bytes"
        return None

    def _media(self, req: Recorded):
        if req.path == "/whatsapp_business/attachments/":
            found = self.media.get((req.query.get("mid") or [""])[0])
            if found is None:
                return 404, b"", {"content-type": "text/plain"}
            return 200, found[1], {"content-type": found[0]}
        media_id = req.path.rstrip("/").rsplit("/", 1)[-1]  # {base}/{media-id}, base may hold a version
        if media_id not in self.media:
            return graph_error(f"Unsupported get request. Object with ID '{media_id}' does not exist", 100)
        mime_type, data = self.media[media_id]
        base = self.media_url_base or self.url
        return 200, {"messaging_product": "whatsapp",
                     "url": f"{base}/whatsapp_business/attachments/?mid={media_id}&ext={int(time.time())}"
                            f"&hash=ATuHs8Gz0fakeHash",
                     "mime_type": mime_type, "sha256": hashlib.sha256(data).hexdigest(),
                     "file_size": str(len(data)), "id": media_id}, {}


# Cloud API media limits per message type: (types, bytes)
MEDIA_LIMITS = {"image": (("image/jpeg", "image/png"), 5 * 1024 * 1024),
                "audio": (("audio/aac", "audio/amr", "audio/mpeg", "audio/mp4", "audio/ogg"), 16 * 1024 * 1024),
                "document": ((), 100 * 1024 * 1024)}


def _invalid(body: dict) -> str | None:
    """The limits Graph enforces on the messages we send."""
    kind = body.get("type")
    if not body.get("to") or kind not in body:
        return "to and a content object matching type are required"
    if kind == "text":
        text = body["text"].get("body", "")
        return None if 0 < len(text) <= 4096 else f"text body length {len(text)}"
    if kind == "interactive":
        inter = body["interactive"]
        if not 0 < len(inter.get("body", {}).get("text", "")) <= 1024:
            return "interactive body"
        if inter["type"] == "button":
            buttons = inter["action"]["buttons"]
            titles = [b["reply"]["title"] for b in buttons]
            if not 1 <= len(buttons) <= 3 or any(not 0 < len(t) <= 20 for t in titles) or len(set(titles)) < len(titles):
                return "buttons"
        elif inter["type"] == "list":
            rows = [row for s in inter["action"]["sections"] for row in s["rows"]]
            if not 1 <= len(rows) <= 10 or any(not 0 < len(r["title"]) <= 24 for r in rows):
                return "list rows"
            if len(inter["action"]["button"]) > 20:
                return "list button"
    if kind == "reaction" and not body["reaction"].get("message_id"):
        return "reaction message_id"
    if kind == "document" and not body["document"].get("id"):
        return "document id"
    return None
