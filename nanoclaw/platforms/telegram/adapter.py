"""Telegram (Bot API): webhook updates in, Bot API calls out.

Inbound, POST /webhooks/telegram: the `X-Telegram-Bot-Api-Secret-Token` header is compared in
constant time with TELEGRAM_WEBHOOK_SECRET before the body is parsed; with no secret configured
every request is refused (403). The update_id is the dedup key. In poll mode (no public URL) the
`telegram-poll` program fetches updates with getUpdates and hands each one over, signed, to
POST /webhooks/telegram/poll (channels/handoff.py): the same parsing, dedup and routing.
  - private chat → dm; group/supergroup → group; a forum-topic message (`is_topic_message`) →
    thread with thread_id = message_thread_id.
  - an edited message is a new event (its own update_id) whose text starts with "(edited) ", so
    the agent sees the correction as what it is.
  - mentioned: a DM, a `mention` entity equal to @<bot username> (getMe, once), a `text_mention`
    of the bot, a /command@<bot username>, or a reply to one of the bot's messages.
  - attachments: metadata (kind, file_id, name, mime, size) in InboundEvent.attachments;
    fetch_attachment downloads one (getFile, then `{TELEGRAM_API_BASE}/file/bot{token}/{file_path}`)
    for the router to save in the session's inbox/ (nanoclaw/inbound/inbox.py).
  - callback_query → Action; acknowledge_action always answers it (answerCallbackQuery) with the
    handler's text as a toast, which also stops the client's spinner.
Outbound: `{TELEGRAM_API_BASE}/bot{token}/{method}`, plain text (no parse mode), split at 4096
UTF-16 units. 429 → DeliveryError(retry_after=parameters.retry_after); other 4xx are permanent.
A long reply cut short by a 429 resumes where it stopped on the retry (kept in memory).
"""
from __future__ import annotations

import hmac
import html
import json
import logging
import re
import threading
import time
from pathlib import Path, PurePosixPath
from urllib.parse import quote

import requests

from ...channels import handoff
from . import schema as tg
from .media import SEND_METHODS, SENT_AS, attachments_of
from ...channels.base import (
    Card, DeliveryError, api_request, MalformedPayload, Parsed, WebhookRefused, read_as, register)
from ...channels.events import Action, InboundEvent, ReplyTo, said_at
from ...channels.download import AttachmentError, AttachmentTooLarge, check_size, fetch
from ...channels.files import mime_of, sent_as
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...sessions.store import Target

log = logging.getLogger(__name__)

TEXT_LIMIT = 4096            # UTF-16 code units, after entity parsing
CAPTION_LIMIT = 1024
CALLBACK_DATA_LIMIT = 64     # bytes
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
SECRET_HEADER = "x-telegram-bot-api-secret-token"
SECRET_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
EDITED_PREFIX = "(edited) "
POLL_PATH = "/webhooks/telegram/poll"   # the telegram-poll program hands each update over here
POLL_KEY_PURPOSE = b"telegram-poll"

# Bot reactions are limited to Telegram's fixed set; a few common ones outside it map to a near match.
REACTIONS = set("👍 👎 ❤ 🔥 🥰 👏 😁 🤔 🤯 😱 🤬 😢 🎉 🤩 🤮 💩 🙏 👌 🕊 🤡 🥱 🥴 😍 🐳 ❤‍🔥 🌚 🌭 💯 🤣 ⚡ 🍌 🏆 💔 "
                "🤨 😐 🍓 🍾 💋 🖕 😈 😴 😭 🤓 👻 👨‍💻 👀 🎃 🙈 😇 😨 🤝 ✍ 🤗 🫡 🎅 🎄 ☃ 💅 🤪 🗿 🆒 💘 🙉 🦄 😘 💊 🙊 "
                "😎 👾 🤷‍♂ 🤷 🤷‍♀ 😡".split())
REACTION_ALIASES = {"✅": "👌", "✔": "👌", "😊": "😁", "🙂": "😁", "😄": "😁", "😂": "🤣", "🚀": "🔥", "❌": "👎"}


# --- pure helpers ----------------------------------------------------------------------------

def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def utf16_slice(text: str, offset: int, length: int) -> str:
    """Telegram entity offsets count UTF-16 code units."""
    raw = text.encode("utf-16-le")
    return raw[offset * 2:(offset + length) * 2].decode("utf-16-le", errors="replace")


def split_message(text: str) -> list[str]:
    """The shared splitter at 4096 characters; a part that is still too long in UTF-16 units
    (many emoji) is split again at half, which always fits."""
    parts = []
    for part in split_text(text, TEXT_LIMIT):
        parts.extend([part] if utf16_len(part) <= TEXT_LIMIT else split_text(part, TEXT_LIMIT // 2))
    return parts


def clip(text: str, limit: int) -> str:
    """At most `limit` UTF-16 units, with an ellipsis when cut."""
    if utf16_len(text) <= limit:
        return text
    out = text[:limit - 1]
    while utf16_len(out) > limit - 1:
        out = out[:-1]
    return out.rstrip() + "…"


def secret_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def reaction_emoji(emoji: str) -> str:
    """The emoji Telegram will accept for `emoji` (variation selectors dropped, near matches, else 👍)."""
    bare = emoji.replace("\ufe0f", "").strip()
    bare = REACTION_ALIASES.get(bare, bare)
    return bare if bare in REACTIONS else "👍"


ANONYMOUS_ADMIN = 1087968824  # GroupAnonymousBot: `from` of a message an admin sent as the group


def chat_kind(chat: tg.Chat, is_topic: bool) -> str:
    """private → dm; a forum (its topics, and General, which has no topic id) → thread, so each
    topic is a session of its own whichever message made the chat known; any other chat → group.
    A chat without a type (an odd shape) is judged by its id: Telegram gives groups negative ids."""
    private = chat.type == "private" if chat.type else chat.id > 0
    if private:
        return "dm"
    return "thread" if is_topic or chat.is_forum else "group"


def display_name(user: tg.User | tg.Chat | None) -> str:
    if user is None:
        return "unknown"
    name = " ".join(p for p in (user.first_name, user.last_name) if p) or getattr(user, "title", None)
    return name or user.username or str(user.id)


def sender_of(msg: tg.Message) -> tuple[str, str, bool]:
    """(sender id, display name, is a bot). An anonymous group admin or a channel writes as a chat
    (sender_chat); a channel post has no sender at all, so the chat itself speaks."""
    if msg.sender_chat is not None and (msg.sender is None or msg.sender.id == ANONYMOUS_ADMIN):
        return str(msg.sender_chat.id), display_name(msg.sender_chat), False
    if msg.sender is None:
        return str(msg.chat.id), display_name(msg.chat), False
    return str(msg.sender.id), display_name(msg.sender), msg.sender.is_bot


def mentions_bot(msg: tg.Message, bot_id: str | None, username: str | None) -> bool:
    """Entities addressed to this bot, or a reply to one of its messages."""
    text = msg.text or msg.caption or ""
    for ent in msg.entities or msg.caption_entities:
        if ent.type == "text_mention" and ent.user is not None and str(ent.user.id) == bot_id:
            return True
        if ent.type in ("mention", "bot_command") and username:
            word = utf16_slice(text, ent.offset, ent.length)
            if ent.type == "mention" and word.lower() == f"@{username.lower()}":
                return True
            if ent.type == "bot_command" and word.lower().endswith(f"@{username.lower()}"):
                return True
    replied = msg.reply_to_message
    return bot_id is not None and replied is not None and replied.sender is not None and \
        str(replied.sender.id) == bot_id


def needs_username(msg: tg.Message) -> bool:
    return any(e.type in ("mention", "bot_command") for e in msg.entities or msg.caption_entities)


def keyboard(buttons) -> list[list[dict]]:
    """Short labels share one row (up to 3); otherwise one button per row."""
    keys = [{"text": label, "callback_data": action} for label, action in buttons]
    if len(keys) <= 3 and all(len(label) <= 12 for label, _ in buttons):
        return [keys] if keys else []
    return [[k] for k in keys]


# --- the adapter -----------------------------------------------------------------------------

@register("telegram")
class TelegramAdapter:
    max_file_bytes = 50 * 1000 * 1000  # the Bot API sends files of up to 50 MB
    def __init__(self, settings):
        self.settings = settings
        platform = settings.platform
        self.token = platform.get("TELEGRAM_BOT_TOKEN")
        self.secret = platform.get("TELEGRAM_WEBHOOK_SECRET")
        self.base = platform.get("TELEGRAM_API_BASE", "https://api.telegram.org")
        self.bot_id = self.token.split(":", 1)[0] if self.token else None
        self.http = requests.Session()
        self._username: str | None = None
        self._username_tried_at: float | None = None
        self._me_lock = threading.Lock()
        self._parts = PartialSends()  # a long reply cut short by an error resumes where it stopped
        self._poll = handoff.Receiver(settings, POLL_KEY_PURPOSE)

    # --- inbound ---

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind == "poll" and method == "POST":
            return self._polled(headers, body)
        if kind:
            raise WebhookRefused(404, "Telegram has one webhook: /webhooks/telegram")
        if method != "POST":
            raise WebhookRefused(405, "Telegram webhooks are POST requests")
        if not self.secret:
            log.error("refusing a Telegram webhook: TELEGRAM_WEBHOOK_SECRET is not set; set it, then run "
                      "`flask --app app nanoclaw telegram set-webhook URL`")
            raise WebhookRefused(403, "webhook secret not configured")
        given = {k.lower(): v for k, v in headers.items()}.get(SECRET_HEADER)
        if not secret_matches(self.secret, given):
            raise WebhookRefused(401, "missing or wrong secret token")
        try:
            update = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise MalformedPayload("body is not JSON", kind="not-json") from None
        return self.parse_update(update)

    def _polled(self, headers, body: bytes) -> Parsed:
        """An update the `telegram-poll` program fetched with getUpdates, handed over signed."""
        return self.parse_update(self._poll.read(headers, body))

    def parse_update(self, update) -> Parsed:
        """A Bot API update (JSON data) → events or a click. MalformedPayload when it does not fit the
        schema (telegram_schema.py), with its kind for the log and the counter."""
        parsed = read_as(tg.Update, update, "a Telegram update", tg.kind_of(update))
        event_id = str(parsed.update_id)
        if parsed.callback_query is not None:
            return Parsed(actions=[self._action(event_id, parsed.callback_query)])
        for msg, edited in ((parsed.message, False), (parsed.edited_message, True)):
            if msg is not None:
                event = self._event(event_id, msg, edited)
                return Parsed(events=[event] if event else [])
        return Parsed()  # channel posts and other update types are not subscribed to: acknowledged, ignored

    def _event(self, event_id: str, msg: tg.Message, edited: bool) -> InboundEvent | None:
        text = msg.text or msg.caption or ""
        attachments = attachments_of(msg, self.settings.attachment_max_bytes)
        if not text and not attachments:
            return None  # service messages (joins, pins, topic changes) carry nothing to answer
        is_topic = msg.is_topic_message and msg.message_thread_id is not None
        kind = chat_kind(msg.chat, is_topic)
        replied = msg.reply_to_message
        if is_topic and replied is not None and replied.message_id == msg.message_thread_id:
            replied = None  # in a topic every message "replies" to the topic's first message
        sender_id, sender_name, is_bot = sender_of(msg)
        username = self.username() if needs_username(msg) else None
        return InboundEvent(
            channel="telegram", event_id=event_id, chat_id=str(msg.chat.id), kind=kind,
            sender_id=sender_id, sender_name=sender_name,
            text=(EDITED_PREFIX + text) if edited else text,
            timestamp=said_at(msg.edit_date if edited and msg.edit_date else msg.date),
            thread_id=str(msg.message_thread_id) if is_topic else None,
            message_id=str(msg.message_id),
            mentioned=kind == "dm" or mentions_bot(msg, self.bot_id, username),
            sender_is_bot=is_bot,
            from_self=self.bot_id is not None and sender_id == self.bot_id,
            reply_to=ReplyTo(str(replied.message_id), display_name(replied.sender or replied.sender_chat),
                             replied.text or replied.caption) if replied else None,
            attachments=attachments,
            chat_name=msg.chat.title,
            album=msg.media_group_id,
        )

    def _action(self, event_id: str, query: tg.CallbackQuery) -> Action:
        message = query.message
        return Action(channel="telegram", action_id=query.data or "",
                      user_id=f"telegram:{query.sender.id}", user_name=display_name(query.sender),
                      chat_id=str(message.chat.id) if message is not None else None,
                      message_id=str(message.message_id) if message is not None else None,
                      event_id=event_id, raw={"callback_query_id": query.id})

    def acknowledge_action(self, action: Action, text: str | None) -> None:
        """Always answer the callback query, or the user's client spins for a while."""
        params = {"callback_query_id": (action.raw or {}).get("callback_query_id")}
        if text:
            params["text"] = clip(text, 200)
        try:
            self._call("answerCallbackQuery", params)
        except DeliveryError as exc:
            log.warning("answerCallbackQuery for %s failed: %s", action.action_id, exc)

    def username(self) -> str | None:
        """The bot's @username from getMe, fetched once (None while Telegram cannot be asked; asked
        again at most once a minute so a webhook is never held up for long)."""
        with self._me_lock:
            last = self._username_tried_at
            if self._username is None and self.token and (last is None or time.monotonic() - last > 60):
                self._username_tried_at = time.monotonic()
                try:
                    self._username = self._call("getMe", {}, timeout=5).get("username")
                except DeliveryError as exc:
                    log.warning("getMe failed, mentions by @username not recognised for now: %s", exc)
            return self._username

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes) of a file from attachments_of: getFile names its path on Telegram's
        file server, which serves it under the bot token for at least an hour."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        if not attachment.get("file_id"):
            raise AttachmentError("Telegram gave no file id")
        try:
            info = self._call("getFile", {"file_id": attachment["file_id"]}, timeout=15) or {}
        except DeliveryError as exc:
            if "too big" in str(exc):  # the Bot API hands out files up to 20 MB only
                raise AttachmentTooLarge(attachment.get("size"), cap) from None
            raise AttachmentError(f"Telegram would not hand it out ({exc})") from None
        file_path = info.get("file_path")
        if not isinstance(file_path, str) or not file_path:
            raise AttachmentError("Telegram gave no file path")
        check_size(info.get("file_size"), cap)
        data, _ = fetch(f"{self.base}/file/bot{self.token}/{quote(file_path, safe='/')}", max_bytes=cap,
                        what="Telegram's file server")
        return attachment.get("name") or PurePosixPath(file_path).name, data

    # --- outbound ---

    def send_text(self, target: Target, text: str) -> str | None:
        where = self._where(target)
        return self._parts.send((target, text), split_message(text),
                                lambda part: str(self._call("sendMessage", {**where, "text": part})["message_id"]))

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        try:
            self._call("editMessageText", {"chat_id": target.platform_id, "message_id": int(platform_message_id),
                                           "text": clip(text, TEXT_LIMIT)})
        except DeliveryError as exc:
            if "message is not modified" not in str(exc):
                raise

    live_status = True  # a turn's live message can be edited and deleted (outbound/progress.py)
    stream_limit = TEXT_LIMIT  # a live message longer than one message stops streaming

    def drafts(self, target: Target) -> bool:
        """A private chat (a positive chat id) shows the answer as a draft: sendMessageDraft."""
        return target.platform_id.isdigit()

    def send_draft(self, target: Target, draft_id: int, text: str) -> None:
        """Bot API sendMessageDraft: an ephemeral preview in a private chat, animated between calls with
        the same non-zero draft_id; the answer's own sendMessage replaces it."""
        params = {"chat_id": int(target.platform_id), "draft_id": draft_id, "text": clip(text, TEXT_LIMIT)}
        if target.thread_id:
            params["message_thread_id"] = int(target.thread_id)
        self._call("sendMessageDraft", params)

    def delete_message(self, target: Target, platform_message_id: str) -> None:
        self._call("deleteMessage", {"chat_id": target.platform_id, "message_id": int(platform_message_id)})

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        self._call("setMessageReaction", {"chat_id": target.platform_id, "message_id": int(platform_message_id),
                                          "reaction": [{"type": "emoji", "emoji": reaction_emoji(emoji)}]})

    def send_card(self, target: Target, card: Card) -> str | None:
        for label, action in card.buttons:
            if len(action.encode()) > CALLBACK_DATA_LIMIT:
                raise DeliveryError(f"button {label!r}: action id over {CALLBACK_DATA_LIMIT} bytes", permanent=True)
        title = f"<b>{html.escape(card.title)}</b>" if card.title else ""
        body = html.escape(clip(card.body, TEXT_LIMIT - utf16_len(title) - 200))
        params = {**self._where(target), "text": "\n\n".join(p for p in (title, body) if p) or "…",
                  "parse_mode": "HTML"}
        if card.buttons:
            params["reply_markup"] = {"inline_keyboard": keyboard(card.buttons)}
        return str(self._call("sendMessage", params)["message_id"])

    def send_file(self, target: Target, path: Path, caption: str | None) -> str | None:
        """A picture with sendPhoto, a voice recording (OGG) with sendVoice, other audio with
        sendAudio, anything else with sendDocument; a picture Telegram will not take as a photo
        goes as a document."""
        fields = {k: str(v) for k, v in self._where(target).items()}
        long_caption = caption and utf16_len(caption) > CAPTION_LIMIT
        if caption and not long_caption:
            fields["caption"] = caption
        try:
            size = path.stat().st_size
            kind = sent_as(path, size, SENT_AS)
            method, field = SEND_METHODS["voice" if kind == "audio" and mime_of(path) == "audio/ogg" else kind]
            try:
                message = self._upload(method, field, fields, path)
            except DeliveryError as exc:
                if kind == "document" or not exc.permanent or "chat not found" in str(exc).lower():
                    raise
                log.info("telegram %s refused %s (%s); sending it as a document", method, path.name, exc)
                message = self._upload("sendDocument", "document", fields, path)
        except OSError as exc:
            raise DeliveryError(f"cannot read {path.name}: {exc.strerror}", permanent=True) from None
        if long_caption:  # a caption over 1024 follows as its own message rather than being cut
            self.send_text(target, caption)
        return str(message["message_id"])

    def _upload(self, method: str, field: str, fields: dict, path: Path):
        with open(path, "rb") as fh:
            return self._call(method, fields, files={field: (path.name, fh, mime_of(path))})

    def typing(self, target: Target, message_id: str | None = None) -> None:
        """Show "typing…" for about 5 seconds (or until the next message)."""
        self._call("sendChatAction", {**self._where(target), "action": "typing"})

    def set_webhook(self, url: str, drop_pending: bool = False) -> None:
        self._call("setWebhook", {"url": url, "secret_token": self.secret, "allowed_updates": list(ALLOWED_UPDATES),
                                  "drop_pending_updates": drop_pending})

    def webhook_info(self) -> dict:
        return self._call("getWebhookInfo", {})

    def delete_webhook(self, drop_pending: bool = False) -> None:
        self._call("deleteWebhook", {"drop_pending_updates": drop_pending})

    # --- HTTP ---

    @staticmethod
    def _where(target: Target) -> dict:
        params: dict = {"chat_id": target.platform_id}
        if target.thread_id:
            try:
                params["message_thread_id"] = int(target.thread_id)
            except ValueError:
                raise DeliveryError(f"thread id {target.thread_id!r} is not a Telegram topic id",
                                    permanent=True) from None
        return params

    def _call(self, method: str, params: dict, files: dict | None = None, timeout: float = 30):
        """POST one Bot API method; the result, or DeliveryError. The token never enters an error text."""
        if not self.token:
            raise DeliveryError("TELEGRAM_BOT_TOKEN is not set", permanent=True)
        url = f"{self.base}/bot{self.token}/{method}"
        body = {"data": params, "files": files, "timeout": (5, 120)} if files else \
            {"json": params, "timeout": (5, timeout)}
        resp, answer = api_request(self.http, "POST", url, f"telegram {method}", **body)
        answer = answer if isinstance(answer, dict) else {}
        if resp.ok and answer.get("ok"):
            return answer.get("result")
        code = answer.get("error_code") or resp.status_code
        reason = f"telegram {method}: {code} {answer.get('description') or resp.reason}".replace(self.token, "…")
        if code == 429:
            wait = str((answer.get("parameters") or {}).get("retry_after") or resp.headers.get("Retry-After", ""))
            raise DeliveryError(reason, retry_after=float(wait) if wait.replace(".", "", 1).isdigit() else None)
        raise DeliveryError(reason, permanent=400 <= code < 500)
