"""The local `cli` channel: `flask --app app nanoclaw chat FOLDER MESSAGE`.

There is no platform behind it: a reply counts as delivered once it is recorded,
and the `chat` command prints the replies to its own message from the session.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from .base import Card, register
from ..sessions.store import Target


@register("cli")
class CliAdapter:
    def __init__(self, settings):
        self.settings = settings

    def send_text(self, target: Target, text: str) -> str:
        return f"cli-{uuid.uuid4().hex[:12]}"

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        return None

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        return None

    def send_file(self, target: Target, path: Path, caption: str | None) -> str:
        return f"cli-{uuid.uuid4().hex[:12]}"

    def send_card(self, target: Target, card: Card) -> str:
        return f"cli-{uuid.uuid4().hex[:12]}"
