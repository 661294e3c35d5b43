"""The local `web` channel: the /chat page where a logged-in owner or admin talks to an agent.

There is no platform behind it. Inbound: the page (web/chat.py) records the user's line in
web_messages and routes it like any platform's message. Outbound:
delivery hands rows to WebAdapter, which stores them in web_messages, where the page
(polling a small JSON endpoint) picks them up. Platform message ids are "web-<row id>".

Each (user, agent) pair is one DM chat, wired to the agent on first use (as the cli
channel does), so two admins never read each other's conversations.
"""
from __future__ import annotations

import shutil
import uuid
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from .base import Card, DeliveryError, register
from .download import AttachmentError, check_size
from ..security import UnsafePath, contained
from ..db import database
from ..models import WebMessage, utcnow
from ..sessions.store import Target

CHANNEL = "web"
MAX_FILE_BYTES = 25 * 1024 * 1024
MAX_TEXT = 8000


def files_dir(settings) -> Path:
    """Files of the web chat, both ways: the agent's (send_file) and the person's uploads."""
    return settings.data_dir / "web" / "files"


def chat_id_for(user_id: str, folder: str) -> str:
    """One chat per (user, agent): 'andy|telegram:42'. '|' appears in neither a folder nor a user id."""
    return f"{folder}|{user_id}"


def message_ref(row_id: int) -> str:
    return f"web-{row_id}"


def row_id_of(platform_message_id: str) -> int | None:
    prefix, _, number = (platform_message_id or "").partition("-")
    return int(number) if prefix == "web" and number.isdigit() else None


@contextmanager
def _connected():
    """Use the thread's connection if it has one; otherwise open one just for this (delivery thread)."""
    opened = database.is_closed()
    if opened:
        database.connect()
    try:
        yield
    finally:
        if opened:
            database.close()


def serialize(row: WebMessage) -> dict:
    return {"id": row.id, "direction": row.direction, "sender": row.sender, "text": row.text,
            "card": row.card, "file": row.file_name, "reactions": row.reactions or [],
            "at": row.created_at.isoformat() + "Z"}


def transcript(chat_id: str, *, after: int = 0, since: datetime | None = None, limit: int = 200) -> list[WebMessage]:
    """Rows newer than `after`, plus older rows changed since `since` (edits, reactions), oldest first."""
    cond = WebMessage.id > after
    if since is not None:
        cond = cond | (WebMessage.updated_at >= since)
    query = WebMessage.select().where((WebMessage.chat_id == chat_id) & cond)
    if after == 0 and since is None:  # first load: the latest `limit`
        return list(reversed(list(query.order_by(WebMessage.id.desc()).limit(limit))))
    return list(query.order_by(WebMessage.id).limit(limit))


@register(CHANNEL)
class WebAdapter:
    max_file_bytes = MAX_FILE_BYTES
    def __init__(self, settings):
        self.settings = settings

    def _store(self, target: Target, **fields) -> str:
        with _connected():
            row = WebMessage.create(chat_id=target.platform_id, direction="out", **fields)
        return message_ref(row.id)

    def _row(self, target: Target, platform_message_id: str) -> WebMessage:
        row_id = row_id_of(platform_message_id)
        row = WebMessage.get_or_none(WebMessage.id == row_id, WebMessage.chat_id == target.platform_id)
        if row is None:
            raise DeliveryError(f"no web message {platform_message_id} in this chat", permanent=True)
        return row

    def send_text(self, target: Target, text: str) -> str:
        return self._store(target, text=text)

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        with _connected():
            row = self._row(target, platform_message_id)
            # like a platform's edit, the new text replaces the card's body and its buttons go
            card = dict(row.card, body=text, buttons=[]) if row.card else None
            WebMessage.update(text=text, card=card, updated_at=utcnow()).where(WebMessage.id == row.id).execute()

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        with _connected():
            row = self._row(target, platform_message_id)
            reactions = [r for r in (row.reactions or []) if r != emoji] + [emoji]
            WebMessage.update(reactions=reactions, updated_at=utcnow()).where(WebMessage.id == row.id).execute()

    def send_card(self, target: Target, card: Card) -> str:
        return self._store(target, text=card.body, card={"title": card.title, "body": card.body,
                                                         "buttons": [list(b) for b in card.buttons]})

    def send_file(self, target: Target, path: Path, caption: str | None) -> str:
        """Copy the file out of the session (the agent may change its outbox later)."""
        path = Path(path)
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise DeliveryError(f"file {path.name} is {size} bytes; the web chat takes at most {MAX_FILE_BYTES}",
                                permanent=True)
        folder = files_dir(self.settings) / uuid.uuid4().hex
        folder.mkdir(parents=True)
        copy = folder / path.name
        shutil.copyfile(path, copy, follow_symlinks=False)
        return self._store(target, text=caption or "", file_name=path.name, file_path=str(copy))

    def typing(self, target: Target, message_id: str | None = None) -> None:
        return None

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """A file the person attached on the page (web/chat.keep_upload), read from data/web/files/."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        try:
            path = contained(files_dir(self.settings), str(attachment.get("web_file") or ""))
            data = path.read_bytes()
        except (UnsafePath, OSError) as exc:
            raise AttachmentError(f"the uploaded file is gone ({type(exc).__name__})") from None
        check_size(len(data), cap)
        return path.name, data
