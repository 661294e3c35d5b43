"""A fake Telegram Bot API on 127.0.0.1: `POST /bot<token>/<method>`.

It checks what the Bot API checks for the calls we make (the token, chat_id, text length in
UTF-16 units, callback_data size, known reaction emoji) and answers in the Bot API's shape:
`{"ok": true, "result": …}` or `{"ok": false, "error_code": …, "description": …}`.

    with FakeTelegram() as tg:
        settings = make_settings(TELEGRAM_API_BASE=tg.url, TELEGRAM_BOT_TOKEN=TOKEN, ...)
        tg.rate_limit("sendMessage", retry_after=3)   # the next sendMessage gets a 429
        tg.calls("sendMessage")                        # parameters of accepted calls, in order
        tg.add_file(b"...", file_id="BQAC...")         # a file a user sent: getFile + the file server
        tg.push_update({...})                          # waits for getUpdates (long polling)

getUpdates behaves as the Bot API documents: updates with update_id >= offset, oldest first, at
most `limit`; a call with an offset confirms (forgets) every update below it; with `timeout` the
call waits up to that many seconds for one to arrive; 409 while a webhook is set.
"""
from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from .platform_server import FakePlatform, Recorded

BOT_ID = 7000001
FILE_LIMIT = 20 * 1024 * 1024  # getFile refuses bigger files ("file is too big")
PHOTO_LIMIT = 10 * 1024 * 1024  # sendPhoto's


def picture_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG or JPEG, read from its header; None for anything else."""
    import struct
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                height, width = struct.unpack(">HH", data[i + 5:i + 9])
                return width, height
            i += 2 + length
    return None
TOKEN = f"{BOT_ID}:AAH-fake-telegram-token_0123456789ab"
USERNAME = "andy_test_bot"


# The emoji a bot may react with (Bot API, ReactionTypeEmoji).
REACTIONS = set("👍 👎 ❤ 🔥 🥰 👏 😁 🤔 🤯 😱 🤬 😢 🎉 🤩 🤮 💩 🙏 👌 🕊 🤡 🥱 🥴 😍 🐳 ❤‍🔥 🌚 🌭 💯 🤣 ⚡ 🍌 🏆 💔 "
                "🤨 😐 🍓 🍾 💋 🖕 😈 😴 😭 🤓 👻 👨‍💻 👀 🎃 🙈 😇 😨 🤝 ✍ 🤗 🫡 🎅 🎄 ☃ 💅 🤪 🗿 🆒 💘 🙉 🦄 😘 💊 🙊 "
                "😎 👾 🤷‍♂ 🤷 🤷‍♀ 😡".split())


def api_error(code: int, description: str, **parameters) -> tuple[int, dict, dict]:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return code, body, {}


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class FakeTelegram(FakePlatform):
    name = "telegram"

    def __init__(self, token: str = TOKEN):
        super().__init__()
        self.token = token
        self._ids = itertools.count(500)
        self.files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self.slow: dict[str, float] = {}  # file_path -> seconds before the file server answers
        self.webhook: dict = {}
        self.pending: list[dict] = []          # updates not confirmed yet, oldest first
        self._updates_cond = threading.Condition()

    # what a test asserts on -----------------------------------------------------------------------
    @staticmethod
    def method_of(req: Recorded) -> str:
        return req.path.rsplit("/", 1)[-1]

    @staticmethod
    def params(req: Recorded) -> dict:
        return req.json if req.json is not None else dict(req.form)

    def calls(self, method: str) -> list[dict]:
        """Parameters of the accepted calls of `method`, in order (files under "_files")."""
        return [{**self.params(r), **({"_files": r.files} if r.files else {})}
                for r in self.accepted(lambda r: self.method_of(r) == method)]

    def rate_limit(self, method: str, retry_after: int = 3, times: int = 1) -> None:
        status, body, headers = api_error(429, f"Too Many Requests: retry after {retry_after}",
                                          retry_after=retry_after)
        self.fail_next(status, body, headers, times=times, match=lambda r: self.method_of(r) == method)

    def add_file(self, data: bytes, *, file_id: str | None = None, file_path: str | None = None) -> str:
        """A file a user sent, kept as Telegram keeps it: a file_id for getFile, served at
        /file/bot<token>/<file_path>. Returns the file_id."""
        n = next(self._ids)
        file_id = file_id or f"BQACAgIAAxkBAAI{n}"
        self.files[file_id] = (file_path or f"documents/file_{n}.bin", data)
        return file_id

    def slow_download(self, file_path: str, seconds: float) -> None:
        """The file server takes this long to start sending that file (a phone's upload on a slow
        line, Telegram's file server busy)."""
        self.slow[file_path] = seconds

    # the Bot API --------------------------------------------------------------------------------------
    def answer(self, req: Recorded):
        prefix = f"/bot{self.token}/"
        if req.method == "GET" and req.path.startswith("/file/bot"):
            return self._download(req)
        if req.method != "POST" or not req.path.startswith("/bot"):
            return api_error(404, "Not Found")
        if not req.path.startswith(prefix):
            return api_error(401, "Unauthorized")
        method, p = req.path[len(prefix):], self.params(req)
        handler = getattr(self, "_" + method, None)
        if handler is None:
            return api_error(404, "Not Found: method not found")
        result = handler(p, req)
        if isinstance(result, tuple):
            return result
        return 200, {"ok": True, "result": result}, {}

    def _message(self, p: dict, **content) -> dict:
        chat_id = str(p.get("chat_id", ""))
        msg = {"message_id": next(self._ids), "date": int(time.time()),
               "from": {"id": BOT_ID, "is_bot": True, "first_name": "Andy", "username": USERNAME},
               "chat": {"id": int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id,
                        "type": "private" if not chat_id.startswith("-") else "supergroup"}, **content}
        if p.get("message_thread_id"):
            msg.update(message_thread_id=int(p["message_thread_id"]), is_topic_message=True)
        return msg

    def _getMe(self, p, req):
        return {"id": BOT_ID, "is_bot": True, "first_name": "Andy", "username": USERNAME,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    def _sendMessage(self, p, req):
        text = p.get("text") or ""
        if not p.get("chat_id"):
            return api_error(400, "Bad Request: chat_id is empty")
        if not text.strip():
            return api_error(400, "Bad Request: message text is empty")
        if _utf16(text) > 4096:
            return api_error(400, "Bad Request: message is too long")
        markup = p.get("reply_markup") or {}
        for row in markup.get("inline_keyboard", []):
            for button in row:
                if len(button.get("callback_data", "").encode()) > 64:
                    return api_error(400, "Bad Request: BUTTON_DATA_INVALID")
        extra = {"reply_markup": markup} if markup else {}
        return self._message(p, text=text, **extra)

    def _editMessageText(self, p, req):
        if _utf16(p.get("text") or "") > 4096:
            return api_error(400, "Bad Request: MESSAGE_TOO_LONG")
        return {"message_id": int(p["message_id"]), "date": int(time.time()), "edit_date": int(time.time()),
                "chat": {"id": p["chat_id"], "type": "private"}, "text": p["text"]}

    def _sendMessageDraft(self, p, req):
        """Bot API sendMessageDraft: a private chat only (a user's id, positive), a non-zero draft_id,
        text of 1-4096 characters after entities parsing; True. A draft is no message: nothing is kept
        as one, and the call's log is all a test sees."""
        chat_id = str(p.get("chat_id", ""))
        if not chat_id.isdigit():
            return api_error(400, "Bad Request: TEXTDRAFT_PEER_INVALID")
        try:
            draft_id = int(p.get("draft_id") or 0)
        except (TypeError, ValueError):
            draft_id = 0
        if draft_id == 0:
            return api_error(400, "Bad Request: parameter \"draft_id\" must be non-zero")
        text = p.get("text") or ""
        if not text.strip():
            return api_error(400, "Bad Request: message text is empty")
        if _utf16(text) > 4096:
            return api_error(400, "Bad Request: message is too long")
        return True

    def _deleteMessage(self, p, req):
        if not p.get("chat_id") or not p.get("message_id"):
            return api_error(400, "Bad Request: message to delete not found")
        return True

    def _setMessageReaction(self, p, req):
        for r in p.get("reaction") or []:
            if r.get("type") == "emoji" and r.get("emoji") not in REACTIONS:
                return api_error(400, "Bad Request: REACTION_INVALID")
        return True

    def _sendDocument(self, p, req):
        return self._sent_file(p, req, "document")

    def _sendPhoto(self, p, req):
        """A photo as Telegram takes it: JPEG/PNG/WebP it can decode, at most 10 MB, width and height
        together at most 10,000 px, a ratio within 20; it answers with the sizes it made."""
        if "photo" not in req.files:
            return api_error(400, "Bad Request: there is no photo in the request")
        _name, data, _mime = req.files["photo"]
        if len(data) > PHOTO_LIMIT:
            return api_error(400, "Bad Request: PHOTO_SAVE_FILE_INVALID")
        size = picture_size(data)
        if size is None:
            return api_error(400, "Bad Request: IMAGE_PROCESS_FAILED")
        width, height = size
        if width + height > 10000 or max(width, height) > 20 * min(width, height):
            return api_error(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        photo = [{"file_id": f"AgACAgIAAx{next(self._ids)}", "file_unique_id": "AQAD", "width": width,
                  "height": height, "file_size": len(data)}]
        return self._message(p, photo=photo, **({"caption": p["caption"]} if p.get("caption") else {}))

    def _sendVoice(self, p, req):
        return self._sent_file(p, req, "voice")

    def _sendAudio(self, p, req):
        return self._sent_file(p, req, "audio")

    def _sent_file(self, p, req, field: str):
        if field not in req.files:
            return api_error(400, f"Bad Request: there is no {field} in the request")
        filename, data, mime = req.files[field]
        return self._message(p, **{field: {"file_id": f"BQACAgIAAx{next(self._ids)}", "file_unique_id": "AgAD",
                                           "file_name": filename, "mime_type": mime, "file_size": len(data)}},
                             **({"caption": p["caption"]} if p.get("caption") else {}))

    def _getFile(self, p, req):
        found = self.files.get(str(p.get("file_id") or ""))
        if found is None:
            return api_error(400, "Bad Request: invalid file_id")
        file_path, data = found
        if len(data) > FILE_LIMIT:
            return api_error(400, "Bad Request: file is too big")
        return {"file_id": p["file_id"], "file_unique_id": f"AgAD{abs(hash(p['file_id'])) % 10**6}",
                "file_size": len(data), "file_path": file_path}

    def _download(self, req: Recorded):
        """The file server: the token is part of the path; a wrong one or an unknown path is 404."""
        prefix = f"/file/bot{self.token}/"
        if not req.path.startswith(prefix):
            return api_error(404, "Not Found")
        wanted = req.path[len(prefix):]
        if wanted in self.slow:
            time.sleep(self.slow[wanted])
        for file_path, data in self.files.values():
            if file_path == wanted:
                return 200, data, {"content-type": "application/octet-stream"}
        return api_error(404, "Not Found")

    def _answerCallbackQuery(self, p, req):
        if not p.get("callback_query_id"):
            return api_error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        return True

    def _sendChatAction(self, p, req):
        return True

    def _setWebhook(self, p, req):
        if not str(p.get("url", "")).startswith("https://"):
            return api_error(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = p
        return True

    def _deleteWebhook(self, p, req):
        self.webhook = {}
        if str(p.get("drop_pending_updates", "")).lower() == "true" or p.get("drop_pending_updates") is True:
            with self._updates_cond:
                self.pending.clear()
        return True

    def _getWebhookInfo(self, p, req):
        hook = self.webhook
        return {"url": hook.get("url", ""), "has_custom_certificate": False,
                "pending_update_count": len(self.pending), "allowed_updates": hook.get("allowed_updates", [])}

    # long polling ----------------------------------------------------------------------------------
    def push_update(self, update: dict) -> None:
        with self._updates_cond:
            self.pending.append(update)
            self._updates_cond.notify_all()

    def _getUpdates(self, p, req):
        if self.webhook.get("url"):
            return api_error(409, "Conflict: can't use getUpdates method while webhook is active; "
                                  "use deleteWebhook to delete the webhook first")
        offset = int(p.get("offset") or 0)
        limit = max(1, min(100, int(p.get("limit") or 100)))
        deadline = time.monotonic() + min(50.0, float(p.get("timeout") or 0))
        with self._updates_cond:
            if offset:
                self.pending = [u for u in self.pending if u["update_id"] >= offset]  # confirmed
            while True:
                ready = [u for u in self.pending if u["update_id"] >= offset][:limit]
                left = deadline - time.monotonic()
                if ready or left <= 0:
                    return ready
                self._updates_cond.wait(left)
