"""Slack (Events API, interactivity, Web API): verified webhooks in, Web API calls out.

Inbound: POST /webhooks/slack/events and POST /webhooks/slack/actions, or, with SLACK_APP_TOKEN set
(Socket Mode, no public URL), the `slack-socket` program's signed hand-off of each envelope's
payload to POST /webhooks/slack/socket (channels/handoff.py). Every webhook request is checked
with slack_sdk's SignatureVerifier (v0 HMAC over `v0:{timestamp}:{body}`, 300 s window) on the
raw body before it is parsed; with no SLACK_SIGNING_SECRET every request is refused (403).
  - url_verification is answered with its challenge.
  - every payload is validated into typed objects first (slack_schema.py); one that does not fit is
    acknowledged, logged once and counted, never half-read.
  - `message` (plain, file_share, thread_broadcast, me_message) and `app_mention` become events;
    other subtypes (bot_message, message_changed, message_deleted, joins…) are ignored.
  - `block_suggestion` (a select menu asking for options) is answered with no options.
  - dedup key: `<channel>:<ts>`, the message itself, rather than the envelope's event_id: Slack
    sends one message twice (as `message` and as `app_mention`, with different event_ids) when
    the app subscribes to both; X-Slack-Retry-Num redeliveries carry the same ts and are
    acknowledged and ignored the same way.
  - im → dm, a channel → thread: thread_ts → thread_id, and a top-level channel message is the start
    of its own thread (thread_id = its ts), so each thread is a session and answers go under it.
  - from_self: `user` is our bot user or `bot_id` is our bot (auth.test once, or
    SLACK_BOT_USER_ID). While our identity is unknown, every bot-posted message counts as ours,
    so a loop is impossible.
  - mentioned: a DM, an app_mention, or `<@OURBOT>` in the text. Text is turned into plain
    readable text (`<@U1>` → `@U1`, `<url|label>` → `label (url)`, entities unescaped).
  - attachments: file metadata (file_id, name, mime, size, url = url_private_download);
    fetch_attachment downloads one with the bot token, only from files.slack.com (or the
    configured SLACK_API_BASE's origin), for the router to save in the session's inbox/.
  - block_actions on /actions → Actions (button value = action id). acknowledge_action posts the
    handler's text to the payload's response_url as an ephemeral message (seen by the clicker
    only): the card stays as it was, since a refused click must not change it for everyone.
Outbound: `{SLACK_API_BASE}/{method}` with the bot token as Bearer. Text is split at 3900
characters (Slack's advice is under 4000 per message), escaped (&, <, >) so the agent cannot
ping @channel or forge links. 429 → DeliveryError(retry_after=Retry-After). Errors that retrying
cannot fix (channel_not_found, invalid_auth, …) are permanent. There is no typing indicator for
bots in the Web API; typing() does nothing.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import requests
from slack_sdk.signature import SignatureVerifier

from ...channels import handoff
from . import schema as sl
from .text import TEXT_LIMIT, clip, card_blocks, chat_kind, emoji_name, escape, plain_text
from ...channels.base import (
    Card, DeliveryError, api_request, MalformedPayload, Parsed, WebhookRefused, json_of, read_as, register)
from ...channels.events import Action, InboundEvent, said_at, seconds
from ...channels.download import AttachmentError, check_size, fetch, host_allowed
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...sessions.store import Target

log = logging.getLogger(__name__)

SOCKET_PATH = "/webhooks/slack/socket"   # the slack-socket program hands each envelope over here
SOCKET_KEY_PURPOSE = b"slack-socket"
STREAM_LIMIT = 12_000  # markdown_text of one chat.*Stream call

ROUTED_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}
PERMANENT_ERRORS = {
    "channel_not_found", "not_in_channel", "is_archived", "msg_too_long", "no_text", "invalid_blocks",
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "missing_scope",
    "cant_update_message", "message_not_found", "edit_window_closed", "invalid_name", "too_many_reactions",
    "restricted_action", "not_allowed_token_type", "file_not_found", "invalid_arguments", "channel_is_archived",
    "missing_recipient_team_id", "missing_recipient_user_id", "message_not_in_streaming_state",
}
FILE_HOSTS = ("files.slack.com",)  # where url_private(_download) points; the bot token goes nowhere else


def file_of(f: sl.File) -> dict:
    """A shared file's facts; a clip recorded in Slack (slack_audio) is a voice note."""
    facts = {"kind": "voice" if f.subtype == "slack_audio" else "file", "file_id": f.id, "name": f.name,
             "mime": f.mimetype, "size": f.size, "url": f.url_private_download or f.url_private}
    if f.duration_ms is not None:
        facts["duration"] = round(f.duration_ms / 1000, 1)
    return facts


# --- the adapter -----------------------------------------------------------------------------

@register("slack")
class SlackAdapter:
    max_file_bytes = 1024 * 1024 * 1024  # files.upload takes up to 1 GB
    def __init__(self, settings):
        self.settings = settings
        platform = settings.platform
        self.token = platform.get("SLACK_BOT_TOKEN")
        self.base = platform.get("SLACK_API_BASE", "https://slack.com/api")
        secret = platform.get("SLACK_SIGNING_SECRET")
        self.verifier = SignatureVerifier(secret) if secret else None
        self.http = requests.Session()
        self._parts = PartialSends()
        self._identity_lock = threading.Lock()
        self._team: str | None = None
        self._team_tried_at: float | None = None
        configured = platform.get("SLACK_BOT_USER_ID")
        self._identity: tuple[str | None, str | None] | None = (configured, None) if configured else None
        self._identity_tried_at: float | None = None
        self._names: dict[str, str] = {}
        self._socket = handoff.Receiver(settings, SOCKET_KEY_PURPOSE)

    # --- inbound ---

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind == "socket" and method == "POST":
            return self._from_socket(headers, body)
        if kind not in ("events", "actions"):
            raise WebhookRefused(404, "Slack webhooks are /webhooks/slack/events and /webhooks/slack/actions")
        if method != "POST":
            raise WebhookRefused(405, "Slack webhooks are POST requests")
        if self.verifier is None:
            log.error("refusing a Slack webhook: SLACK_SIGNING_SECRET is not set; copy it from the app's "
                      "Basic Information page into .env")
            raise WebhookRefused(403, "signing secret not configured")
        h = {k.lower(): v for k, v in headers.items()}
        timestamp, signature = h.get("x-slack-request-timestamp"), h.get("x-slack-signature")
        if not timestamp or not signature:
            raise WebhookRefused(401, "missing Slack signature headers")
        try:
            valid = self.verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
        except (ValueError, UnicodeDecodeError):
            valid = False
        if not valid:
            raise WebhookRefused(401, "bad signature or timestamp outside the 5-minute window")
        if h.get("x-slack-retry-num"):
            log.info("Slack retry #%s (%s)", h["x-slack-retry-num"], h.get("x-slack-retry-reason", "?"))
        return self.parse_events(body) if kind == "events" else self.parse_actions(body)

    def _from_socket(self, headers, body: bytes) -> Parsed:
        """An envelope's payload the `slack-socket` program received over Socket Mode, handed over
        signed: {"type": "events_api" | "interactive", "payload": …}."""
        envelope = self._socket.read(headers, body)
        if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), dict):
            raise MalformedPayload("expected {type, payload}", kind="socket")
        if envelope.get("type") == "events_api":
            return self.parse_events(json.dumps(envelope["payload"]).encode())
        if envelope.get("type") == "interactive":
            return self.parse_interaction(envelope["payload"])
        return Parsed()  # slash commands and the like: not used

    def parse_events(self, body: bytes) -> Parsed:
        payload = json_of(body)
        envelope = read_as(sl.Envelope, payload, "a Slack event envelope", sl.kind_of(payload))
        if envelope.type == "url_verification":
            if not envelope.challenge:
                raise MalformedPayload("url_verification without a challenge", kind="url_verification")
            return Parsed(response=({"challenge": envelope.challenge}, 200))
        if envelope.type != "event_callback":
            return Parsed()  # app_rate_limited and friends: nothing to route
        if envelope.event is None:
            raise MalformedPayload("an event_callback without its event", kind="event_callback")
        event = self._event(envelope.event)
        return Parsed(events=[event] if event else [])

    def _event(self, ev: sl.Event) -> InboundEvent | None:
        if ev.type not in ("message", "app_mention"):
            return None
        if ev.subtype not in ROUTED_SUBTYPES or ev.hidden:
            return None  # edits (message_changed, the new text nested), deletions, joins, bot_message…
        if not ev.channel or not ev.ts:
            raise MalformedPayload("a message without channel or ts", kind=f"event_callback/{ev.type}")
        if seconds(ev.ts) is None:
            raise MalformedPayload(f"ts {ev.ts!r} is not a time", kind=f"event_callback/{ev.type}")
        timestamp = said_at(ev.ts)
        channel, ts, raw = ev.channel, ev.ts, ev.text or ""
        our_user, our_bot = self.identity()
        if our_user is None and our_bot is None:
            from_self = bool(ev.bot_id)  # who we are is unknown: never risk answering ourselves
        else:
            from_self = (our_user is not None and ev.user == our_user) or (our_bot is not None and ev.bot_id == our_bot)
        kind = chat_kind(ev.channel_type, channel)
        mentioned = (kind == "dm" or ev.type == "app_mention"
                     or (our_user is not None and f"<@{our_user}>" in raw))
        files = tuple(file_of(f) for f in ev.files)
        sender = ev.user or ev.bot_id or "unknown"
        return InboundEvent(
            channel="slack", event_id=f"{channel}:{ts}", chat_id=channel, kind=kind,
            sender_id=sender, sender_name=self._sender_name(ev, sender, from_self),
            # in a channel a top-level message starts a thread of its own: the answer goes under it
            text=plain_text(raw), timestamp=timestamp, thread_id=ev.thread_ts or (ts if kind != "dm" else None),
            message_id=ts, mentioned=mentioned, sender_is_bot=bool(ev.bot_id), from_self=from_self,
            attachments=files,
        )

    def _sender_name(self, ev: sl.Event, sender: str, from_self: bool) -> str:
        """The name the event carries, or one looked up before; never a call to Slack here: the
        acknowledgement has 3 s. An unknown user's name is looked up by enrich(), off the request."""
        profile = ev.user_profile
        name = profile and (profile.display_name or profile.real_name or profile.name)
        if name or from_self or not ev.user:
            return name or ev.username or sender
        return self._names.get(sender, sender)

    def enrich(self, event: InboundEvent) -> InboundEvent:
        """Called on the intake thread before routing: a person's display name (users.info, cached)
        when the event carried only their id."""
        if event.sender_name != event.sender_id or event.sender_is_bot or event.from_self:
            return event
        name = self.user_name(event.sender_id)
        return event if name == event.sender_id else dataclasses.replace(event, sender_name=name)

    def parse_actions(self, body: bytes) -> Parsed:
        try:
            form = parse_qs(body.decode("utf-8"), strict_parsing=True)
            payload = json.loads(form["payload"][0])
        except (ValueError, UnicodeDecodeError, KeyError, IndexError):
            raise MalformedPayload("expected a form field `payload` holding JSON", kind="not-json") from None
        return self.parse_interaction(payload)

    def parse_interaction(self, payload) -> Parsed:
        """An interaction payload (JSON data): a click, or a select menu asking for options."""
        interaction = read_as(sl.Interaction, payload, "a Slack interaction", sl.kind_of(payload))
        if interaction.type == "block_suggestion":
            return Parsed(response=({"options": []}, 200))  # a select menu asks for options: we have none
        if interaction.type != "block_actions":
            return Parsed()  # shortcuts, modals: not used
        if interaction.user is None:
            raise MalformedPayload("block_actions without a user", kind="block_actions")
        container = interaction.container or sl.Container()
        channel = (interaction.channel.id if interaction.channel else None) or container.channel_id
        actions = []
        for i, act in enumerate(interaction.actions):
            action_id = act.value or act.action_id
            if not action_id:
                continue
            trigger = interaction.trigger_id
            actions.append(Action(
                channel="slack", action_id=action_id, user_id=f"slack:{interaction.user.id}", chat_id=channel,
                user_name=interaction.user.name or interaction.user.username, message_id=container.message_ts,
                event_id=f"{trigger}:{i}" if trigger else None,
                raw={"response_url": interaction.response_url, "channel": channel,
                     "message_ts": container.message_ts}))
        return Parsed(actions=actions)

    def acknowledge_action(self, action: Action, text: str | None) -> None:
        """Tell the clicker (only them) what happened, through the payload's response_url."""
        url = (action.raw or {}).get("response_url")
        if not text or not url:
            return
        try:
            resp = self.http.post(url, json={"response_type": "ephemeral", "replace_original": False,
                                             "text": escape(text)}, timeout=(5, 10))
            if not resp.ok:
                log.warning("Slack response_url for %s answered %s", action.action_id, resp.status_code)
        except requests.RequestException as exc:
            log.warning("Slack response_url for %s failed: %s", action.action_id, type(exc).__name__)

    def identity(self) -> tuple[str | None, str | None]:
        """(our bot user id, our bot id): SLACK_BOT_USER_ID, else auth.test once (retried at most
        once a minute while Slack cannot be asked)."""
        with self._identity_lock:
            last = self._identity_tried_at
            if self._identity is None and self.token and (last is None or time.monotonic() - last > 60):
                self._identity_tried_at = time.monotonic()
                try:
                    me = self._call("auth.test", {}, timeout=5)
                    self._identity = (me.get("user_id"), me.get("bot_id"))
                except DeliveryError as exc:
                    log.warning("auth.test failed; every bot message is treated as ours for now: %s", exc)
            return self._identity or (None, None)

    def user_name(self, user_id: str) -> str:
        """A user's display name (users.info, cached); the id itself when Slack cannot say."""
        if user_id not in self._names:
            try:
                user = self._call("users.info", {"user": user_id}, form=True, timeout=3)["user"]
                profile = user.get("profile") or {}
                self._names[user_id] = (profile.get("display_name") or profile.get("real_name")
                                        or user.get("real_name") or user.get("name") or user_id)
            except (DeliveryError, KeyError, TypeError):
                return user_id
        return self._names[user_id]

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes) of a shared file: its url_private_download with the bot token (the
        files:read scope). A file shared without URLs (Slack Connect: file_access
        check_file_info) is looked up with files.info first."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        url, name = attachment.get("url"), attachment.get("name")
        if not url:
            if not attachment.get("file_id"):
                raise AttachmentError("Slack gave no file id")
            try:
                info = self._call("files.info", {"file": attachment["file_id"]}, form=True, timeout=15)["file"]
            except (DeliveryError, KeyError, TypeError) as exc:
                raise AttachmentError(f"Slack would not describe it ({exc})") from None
            url, name = info.get("url_private_download") or info.get("url_private"), name or info.get("name")
            check_size(info.get("size"), cap)
        if not host_allowed(url, FILE_HOSTS, [self.base]):
            log.warning("refused to fetch a Slack file from %r: not Slack's file host", (url or "")[:80])
            raise AttachmentError("the file's address is not on Slack's file host")
        if not self.token:
            raise AttachmentError("SLACK_BOT_TOKEN is not set")
        data, ctype = fetch(url, max_bytes=cap, headers={"Authorization": f"Bearer {self.token}"},
                            what="Slack's file host")
        if (ctype or "").startswith("text/html") and not str(attachment.get("mime") or "").startswith("text/html"):
            raise AttachmentError("Slack answered with a web page instead of the file "
                                  "(does the app have the files:read scope?)")
        return name or url.rstrip("/").rsplit("/", 1)[-1], data

    # --- outbound ---

    def send_text(self, target: Target, text: str) -> str | None:
        where = self._where(target)
        return self._parts.send((target, text), split_text(text, TEXT_LIMIT),
                                lambda part: self._call("chat.postMessage", {**where, "text": escape(part)})["ts"])

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        self._call("chat.update", {"channel": target.platform_id, "ts": platform_message_id,
                                   "text": escape(clip(text, TEXT_LIMIT))})

    live_status = True  # a turn's live message can be edited and deleted (outbound/progress.py)

    def native_stream(self, target: Target) -> bool:
        """A channel's thread streams the answer with Slack's own methods (chat.startStream, …); a DM,
        answered top level, gets one message updated (chat.update)."""
        return bool(target.thread_id) and not target.platform_id.startswith("D")

    def start_stream(self, target: Target, recipient: str | None, text: str) -> str:
        """chat.startStream in the thread, the person answered as its recipient (required in channels:
        their user id and their team's, which is ours: auth.test)."""
        params = {"channel": target.platform_id, "thread_ts": target.thread_id, "markdown_text": clip(text, STREAM_LIMIT)}
        user = (recipient or "").removeprefix("slack:")
        if user:
            params["recipient_user_id"] = user
        team = self.team_id()
        if team:
            params["recipient_team_id"] = team
        return self._call("chat.startStream", params)["ts"]

    def append_stream(self, target: Target, ts: str, more: str) -> None:
        self._call("chat.appendStream", {"channel": target.platform_id, "ts": ts, "markdown_text": more[:STREAM_LIMIT]})

    def stop_stream(self, target: Target, ts: str) -> None:
        self._call("chat.stopStream", {"channel": target.platform_id, "ts": ts})

    def team_id(self) -> str | None:
        """Our workspace's id (auth.test, once; asked again at most once a minute while Slack cannot say)."""
        with self._identity_lock:
            last = self._team_tried_at
            if self._team is None and self.token and (last is None or time.monotonic() - last > 60):
                self._team_tried_at = time.monotonic()
                try:
                    self._team = self._call("auth.test", {}, timeout=5).get("team_id")
                except DeliveryError as exc:
                    log.warning("auth.test failed; streaming in channels waits for it: %s", exc)
            return self._team

    def delete_message(self, target: Target, platform_message_id: str) -> None:
        self._call("chat.delete", {"channel": target.platform_id, "ts": platform_message_id})

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        try:
            self._call("reactions.add", {"channel": target.platform_id, "timestamp": platform_message_id,
                                         "name": emoji_name(emoji)})
        except DeliveryError as exc:
            if "already_reacted" not in str(exc):
                raise

    def send_card(self, target: Target, card: Card) -> str | None:
        fallback = clip("\n".join(p for p in (card.title, card.body) if p) or "…", TEXT_LIMIT)
        return self._call("chat.postMessage", {**self._where(target), "text": escape(fallback),
                                               "blocks": card_blocks(card)})["ts"]

    def send_file(self, target: Target, path: Path, caption: str | None) -> str | None:
        """The external upload flow: get an upload URL, upload the bytes, complete into the chat."""
        try:
            size = path.stat().st_size
            slot = self._call("files.getUploadURLExternal", {"filename": path.name, "length": size}, form=True)
            with open(path, "rb") as fh:
                resp = self.http.post(slot["upload_url"], files={"file": (path.name, fh)}, timeout=(5, 120))
        except OSError as exc:
            raise DeliveryError(f"cannot read {path.name}: {exc.strerror}", permanent=True) from None
        except requests.RequestException as exc:
            raise DeliveryError(f"slack file upload: {type(exc).__name__}") from None
        if resp.status_code != 200:
            raise DeliveryError(f"slack file upload: HTTP {resp.status_code}", permanent=resp.status_code in (400, 413))
        params = {"files": json.dumps([{"id": slot["file_id"], "title": path.name}]),
                  "channel_id": target.platform_id}
        if target.thread_id:
            params["thread_ts"] = target.thread_id
        if caption:
            params["initial_comment"] = escape(caption)
        self._call("files.completeUploadExternal", params, form=True)
        return slot["file_id"]

    def typing(self, target: Target, message_id: str | None = None) -> None:
        """Slack's Web API has no typing indicator for bots; nothing to do."""
        return None

    # --- HTTP ---

    @staticmethod
    def _where(target: Target) -> dict:
        params = {"channel": target.platform_id}
        if target.thread_id:
            params["thread_ts"] = target.thread_id
        return params

    def _call(self, method: str, params: dict, *, form: bool = False, timeout: float = 30) -> dict:
        """POST one Web API method; the answer, or DeliveryError."""
        if not self.token:
            raise DeliveryError("SLACK_BOT_TOKEN is not set", permanent=True)
        headers = {"Authorization": f"Bearer {self.token}"}
        body = {"data": params} if form else {"json": params}
        resp, answer = api_request(self.http, "POST", f"{self.base}/{method}", f"slack {method}", headers=headers,
                                   timeout=(5, timeout), **body)
        answer = answer if isinstance(answer, dict) else {}
        if resp.status_code == 429 or answer.get("error") == "ratelimited":
            wait = resp.headers.get("Retry-After", "")
            raise DeliveryError(f"slack {method}: rate limited",
                                retry_after=float(wait) if wait.replace(".", "", 1).isdigit() else None)
        if resp.ok and answer.get("ok"):
            return answer
        error = answer.get("error") or f"HTTP {resp.status_code}"
        raise DeliveryError(f"slack {method}: {error}",
                            permanent=error in PERMANENT_ERRORS or resp.status_code in (400, 401, 403, 404))
