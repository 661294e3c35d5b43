"""Slack's text: escaping what we send, reading its markup as plain text, emoji names for
reactions, message blocks for a card (pure functions, no I/O)."""
from __future__ import annotations

import html
import re

from ...channels.base import Card

TEXT_LIMIT = 3900
SECTION_LIMIT = 3000
EMOJI_NAMES = {
    "👍": "thumbsup", "👎": "thumbsdown", "❤": "heart", "😂": "joy", "🤣": "rolling_on_the_floor_laughing",
    "🎉": "tada", "👀": "eyes", "✅": "white_check_mark", "✔": "heavy_check_mark", "❌": "x", "🔥": "fire",
    "🙏": "pray", "👌": "ok_hand", "👏": "clap", "😄": "smile", "😁": "grin", "😊": "blush",
    "🙂": "slightly_smiling_face", "😉": "wink", "😢": "cry", "😭": "sob", "😮": "open_mouth", "😱": "scream",
    "🤔": "thinking_face", "💯": "100", "🚀": "rocket", "⚠": "warning", "✨": "sparkles", "💡": "bulb",
    "⏳": "hourglass_flowing_sand", "🤝": "handshake", "✍": "writing_hand", "📌": "pushpin", "🐛": "bug",
    "🎯": "dart", "🙌": "raised_hands", "💪": "muscle", "😎": "sunglasses", "🤖": "robot_face", "👋": "wave",
    "⭐": "star", "🆗": "ok", "❓": "question", "❗": "exclamation", "😅": "sweat_smile", "🥳": "partying_face",
}
_MARKUP = re.compile(r"<([^<>]+)>")


# --- pure helpers ----------------------------------------------------------------------------

def escape(text: str) -> str:
    """Slack's three control characters, escaped as its docs require."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain_text(text: str) -> str:
    """Slack's message markup as readable text for the agent."""
    def one(m: re.Match) -> str:
        inner = m.group(1)
        target, _, label = inner.partition("|")
        if target.startswith(("@", "#")):
            return f"{target[0]}{label or target[1:]}"
        if target.startswith("!"):  # <!here>, <!channel>, <!subteam^S1|@team>
            return label if label.startswith("@") else "@" + (label or target[1:].split("^", 1)[0])
        return f"{label} ({target})" if label and label != target else target
    return html.unescape(_MARKUP.sub(one, text or ""))


def emoji_name(emoji: str) -> str:
    """A reaction name for reactions.add: `:name:`/`name` as given, common unicode emoji mapped,
    anything else thumbsup."""
    bare = emoji.strip().strip(":")
    if re.fullmatch(r"[a-z0-9_+'-]+", bare):
        return bare
    return EMOJI_NAMES.get(bare.replace("\ufe0f", ""), "thumbsup")


def chat_kind(channel_type: str | None, channel_id: str) -> str:
    """im → dm; a channel → thread (Slack conversations are threaded: each thread gets a session of
    its own). app_mention events carry no channel_type, and DM channel ids start with D."""
    if channel_type:
        return "dm" if channel_type == "im" else "thread"
    return "dm" if channel_id.startswith("D") else "thread"


def card_blocks(card: Card) -> list[dict]:
    head = f"*{escape(card.title)}*" if card.title else ""
    text = "\n".join(p for p in (head, escape(card.body)) if p)
    blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": clip(text or " ", SECTION_LIMIT)}}]
    if card.buttons:
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": clip(label, 75)}, "action_id": action,
             "value": action} for label, action in card.buttons[:25]]})
    return blocks


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
