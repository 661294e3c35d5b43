"""A fake Slack Web API on 127.0.0.1: `POST /api/<method>`, plus the upload URLs and response_urls
it hands out.

It checks what Slack checks for the calls we make (the bearer token, channel, text, blocks and
button limits) and answers in Slack's shape: `{"ok": true, …}` or `{"ok": false, "error": …}`,
and HTTP 429 with a Retry-After header when rate limited.

    with FakeSlack() as slack:
        settings = make_settings(SLACK_API_BASE=slack.api, SLACK_BOT_TOKEN=TOKEN, ...)
        slack.rate_limit("chat.postMessage", retry_after=7)
        slack.calls("chat.postMessage")
        slack.response_url("T1")      # a response_url for an interactivity payload
        slack.add_file("a.pdf", b"...")   # a file a user shared: its file object, served to the bot token
"""
from __future__ import annotations

import itertools
import json
import re
import time
from urllib.parse import quote

from .platform_server import FakePlatform, Recorded

TOKEN = "xoxb-1111-2222-fakeSlackBotToken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_USER_ID = "U0BOTANDY"
BOT_ID = "B0BOTANDY"
TEAM_ID = "T0TEAM001"
_FILE_PATH = re.compile(rf"^/files-pri/{TEAM_ID}-(F[0-9A-Z]+)/")
LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Fake</body></html>"


def slack_error(error: str, status: int = 200) -> tuple[int, dict, dict]:
    return status, {"ok": False, "error": error}, {}


class FakeSlack(FakePlatform):
    name = "slack"

    def __init__(self):
        super().__init__()
        self._ts = itertools.count(1)
        self._files = itertools.count(1)
        self.uploads: dict[str, bytes] = {}
        self.shared: dict[str, tuple[dict, bytes]] = {}  # files users shared: id -> (file object, bytes)
        self.users_info_delay = 0.0  # seconds users.info takes (a slow Slack)
        self.posted: list[dict] = []  # chat.postMessage's messages as stored, with their ts
        self.streams: dict[str, dict] = {}  # chat.startStream's messages by ts: their text so far, streaming or not
        self.socket_url: str | None = None  # a FakeSocketMode's URL, for apps.connections.open
        self.users = {"U0ALICE01": {"id": "U0ALICE01", "name": "alice", "real_name": "Alice Example",
                                    "profile": {"display_name": "alice", "real_name": "Alice Example"}}}

    @property
    def api(self) -> str:
        return f"{self.url}/api"

    def response_url(self, key: str) -> str:
        return f"{self.url}/actions/{TEAM_ID}/{key}/hook"

    # what a test asserts on -----------------------------------------------------------------------
    @staticmethod
    def method_of(req: Recorded) -> str | None:
        return req.path[len("/api/"):] if req.path.startswith("/api/") else None

    def calls(self, method: str) -> list[dict]:
        return [r.json if r.json is not None else dict(r.form)
                for r in self.accepted(lambda r: self.method_of(r) == method)]

    def responses(self) -> list[dict]:
        """What was posted to response_urls, in order."""
        return [r.json for r in self.accepted(lambda r: r.path.startswith("/actions/"))]

    def rate_limit(self, method: str, retry_after: int = 3, times: int = 1) -> None:
        self.fail_next(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)},
                       times=times, match=lambda r: self.method_of(r) == method)

    def add_file(self, name: str, data: bytes, mimetype: str = "application/octet-stream",
                 file_id: str | None = None) -> dict:
        """A file a user shared: Slack's file object (what a file_share event's `files` holds),
        whose url_private(_download) this fake serves to the bot token only."""
        file_id = file_id or f"F0SHARE{next(self._files):04d}"
        where = f"{self.url}/files-pri/{TEAM_ID}-{file_id}"
        obj = {"id": file_id, "created": int(time.time()), "timestamp": int(time.time()), "name": name,
               "title": name, "mimetype": mimetype, "filetype": name.rpartition(".")[2] or "binary",
               "pretty_type": "File", "user": "U0ALICE01", "user_team": TEAM_ID, "editable": False,
               "size": len(data), "mode": "hosted", "is_external": False, "external_type": "", "is_public": False,
               "public_url_shared": False, "display_as_bot": False, "username": "",
               "url_private": f"{where}/{quote(name)}", "url_private_download": f"{where}/download/{quote(name)}",
               "permalink": f"https://fake.slack.com/files/U0ALICE01/{file_id}/{quote(name)}",
               "permalink_public": f"https://slack-files.com/{TEAM_ID}-{file_id}-0123456789",
               "is_starred": False, "has_rich_preview": False, "file_access": "visible"}
        self.shared[file_id] = (obj, data)
        return obj

    def _serve_file(self, req: Recorded):
        """files.slack.com: the bytes for the bot token; anyone else is sent to the login page."""
        m = _FILE_PATH.match(req.path)
        if m is None or m.group(1) not in self.shared:
            return 404, b"Not Found", {"content-type": "text/plain"}
        if req.headers.get("authorization") != f"Bearer {TOKEN}":
            return 302, None, {"location": f"{self.url}/?redir={quote(req.raw_path, safe='')}"}
        obj, data = self.shared[m.group(1)]
        return 200, data, {"content-type": obj["mimetype"]}

    # the platform ----------------------------------------------------------------------------------------
    def answer(self, req: Recorded):
        if req.method == "GET" and req.path.startswith("/files-pri/"):
            return self._serve_file(req)
        if req.method == "GET" and req.path == "/":
            return 200, LOGIN_PAGE, {"content-type": "text/html; charset=utf-8"}
        if req.method != "POST":
            return 405, None, {}
        if req.path.startswith("/upload/"):  # the presigned upload URL: no token, just the bytes
            file_id = req.path.rsplit("/", 1)[-1]
            if file_id not in self.uploads or not req.files:
                return 404, None, {}
            self.uploads[file_id] = next(iter(req.files.values()))[1]
            return 200, None, {}
        if req.path.startswith("/actions/"):
            return 200, None, {}
        method = self.method_of(req)
        if method is None:
            return 404, None, {}
        if method == "apps.connections.open":  # the app-level token, not the bot's
            from .slack_socket import APP_TOKEN
            if req.headers.get("authorization") != f"Bearer {APP_TOKEN}":
                return slack_error("invalid_auth")
            return (200, {"ok": True, "url": self.socket_url}, {}) if self.socket_url else slack_error("not_allowed")
        if req.headers.get("authorization") != f"Bearer {TOKEN}":
            return slack_error("not_authed" if "authorization" not in req.headers else "invalid_auth")
        p = req.json if req.json is not None else dict(req.form)
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return slack_error("unknown_method", 404)
        result = handler(p)
        if isinstance(result, tuple):
            return result
        return 200, {"ok": True, **result}, {}

    def _next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _auth_test(self, p):
        return {"url": "https://fake.slack.com/", "team": "Fake", "user": "andy", "team_id": TEAM_ID,
                "user_id": BOT_USER_ID, "bot_id": BOT_ID}

    def _users_info(self, p):
        time.sleep(self.users_info_delay)
        user = self.users.get(p.get("user"))
        return {"user": user} if user else slack_error("user_not_found")

    def _chat_postMessage(self, p):
        if not p.get("channel"):
            return slack_error("channel_not_found")
        text, blocks = p.get("text") or "", p.get("blocks")
        if not text and not blocks:
            return slack_error("no_text")
        if len(text) > 40000:
            return slack_error("msg_too_long")
        if blocks is not None:
            problem = _blocks_problem(blocks)
            if problem:
                return slack_error("invalid_blocks")
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": text, "ts": self._next_ts()}
        if p.get("thread_ts"):
            message["thread_ts"] = p["thread_ts"]
        self.posted.append({"channel": p["channel"], **message})
        return {"channel": p["channel"], "ts": message["ts"], "message": message}

    def _chat_startStream(self, p):
        """chat.startStream: a reply in a thread (thread_ts required); in a channel (not a DM, whose id
        starts with D) the recipient's user and team ids are required; markdown_text at most 12,000."""
        if not p.get("channel"):
            return slack_error("channel_not_found")
        if not p.get("thread_ts"):
            return slack_error("invalid_arguments")
        if not str(p["channel"]).startswith("D"):
            if not p.get("recipient_team_id"):
                return slack_error("missing_recipient_team_id")
            if not p.get("recipient_user_id"):
                return slack_error("missing_recipient_user_id")
        if len(p.get("markdown_text") or "") > 12000:
            return slack_error("msg_too_long")
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": p.get("markdown_text") or "",
                   "ts": self._next_ts(), "thread_ts": p["thread_ts"]}
        self.streams[message["ts"]] = {"channel": p["channel"], **message, "streaming": True}
        return {"channel": p["channel"], "ts": message["ts"]}

    def _chat_appendStream(self, p):
        stream = self.streams.get(p.get("ts"))
        if stream is None or stream["channel"] != p.get("channel"):
            return slack_error("message_not_found")
        if not stream["streaming"]:
            return slack_error("message_not_in_streaming_state")
        if not p.get("markdown_text") or len(p["markdown_text"]) > 12000:
            return slack_error("invalid_arguments" if not p.get("markdown_text") else "msg_too_long")
        stream["text"] += p["markdown_text"]
        return {"channel": p["channel"], "ts": p["ts"]}

    def _chat_stopStream(self, p):
        stream = self.streams.get(p.get("ts"))
        if stream is None or stream["channel"] != p.get("channel"):
            return slack_error("message_not_found")
        if not stream["streaming"]:
            return slack_error("message_not_in_streaming_state")
        stream["text"] += p.get("markdown_text") or ""
        stream["streaming"] = False
        return {"channel": p["channel"], "ts": p["ts"], "message": {"text": stream["text"], "ts": p["ts"]}}

    def _chat_update(self, p):
        if not p.get("ts"):
            return slack_error("message_not_found")
        return {"channel": p["channel"], "ts": p["ts"], "text": p.get("text", "")}

    def _chat_delete(self, p):
        if not p.get("ts") or not p.get("channel"):
            return slack_error("message_not_found")
        return {"channel": p["channel"], "ts": p["ts"]}

    def _reactions_add(self, p):
        if not p.get("name") or not p.get("timestamp"):
            return slack_error("invalid_name" if not p.get("name") else "message_not_found")
        return {}

    def _files_info(self, p):
        found = self.shared.get(p.get("file") or "")
        return {"file": found[0], "comments": [], "response_metadata": {"next_cursor": ""}} if found \
            else slack_error("file_not_found")

    def _files_getUploadURLExternal(self, p):
        if not p.get("filename") or not str(p.get("length", "")).isdigit():
            return slack_error("invalid_arguments")
        file_id = f"F0FAKE{next(self._files):04d}"
        self.uploads[file_id] = b""
        return {"upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}

    def _files_completeUploadExternal(self, p):
        try:
            files = json.loads(p.get("files") or "[]")
        except ValueError:
            return slack_error("invalid_arguments")
        if not files or any(f.get("id") not in self.uploads or not self.uploads[f["id"]] for f in files):
            return slack_error("file_not_found")
        return {"files": [{"id": f["id"], "title": f.get("title", "")} for f in files]}


def _blocks_problem(blocks) -> str | None:
    """The Block Kit limits a button card can break."""
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if len(blocks) > 50:
        return "too many blocks"
    for block in blocks:
        if block.get("type") == "section" and len(block["text"]["text"]) > 3000:
            return "section text over 3000"
        if block.get("type") == "actions":
            ids = [e.get("action_id") for e in block["elements"]]
            if len(ids) > 25 or len(set(ids)) < len(ids) or any(len(i or "") > 255 for i in ids):
                return "bad actions"
            if any(len(e["text"]["text"]) > 75 for e in block["elements"]):
                return "button label over 75"
    return None
