"""Matrix: the matrix-sync program's hand-overs in, the client-server API out.

Inbound: the listener (listener.py) posts each event of a /sync, signed (channels/handoff.py), to
/webhooks/matrix/sync; here it becomes an InboundEvent, a choice on a card (an Action), or an
invite to decide. A room of two is a DM; in a larger room a top-level message starts a thread of
its own (m.thread), as in Slack, and a message in a thread carries the thread's root. Mentions are
`m.mentions` (the pill of clients that set it), or the bot's user id in a message without it.

Outbound: plain HTTPS with the bot's token (the delivery thread is synchronous): m.text, edits as
m.replace, reactions as m.annotation, redactions, typing, files uploaded to the media repository
and sent as m.image / m.audio / m.file. Matrix has no buttons: a card is numbered lines
(channels/choices.py) and a reply with a number, or a keycap reaction, on it chooses.

Encrypted rooms are not supported: the bot cannot read them, and the listener says so in the room
(listener.py). Invites are taken from the owner or an admin (and, while a pairing code is open,
a DM invite, so the first person can pair); every other invite is declined and logged.
"""
from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import requests

from . import account
from . import schema as mx
from ...channels import choices, handoff
from ...channels.base import Card, DeliveryError, api_request, Parsed, WebhookRefused, read_as, register
from ...channels.download import AttachmentError, check_size, fetch
from ...channels.events import Action, InboundEvent, ReplyTo, said_at
from ...channels.files import Limits, mime_of, sent_as
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...db import connected
from ...models import PairingCode, UserRole, utcnow
from ...sessions.store import Target

log = logging.getLogger(__name__)

SYNC_PATH = "/webhooks/matrix/sync"     # the matrix-sync program hands each event over here
SYNC_KEY_PURPOSE = b"matrix-sync"
TEXT_LIMIT = 16000                      # characters per event: well under the 64 KiB a Matrix event may be
TIMEOUT = (5, 30)
FILE_KINDS = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": "document"}
SENT_AS = Limits(picture_types=("image/jpeg", "image/png", "image/gif", "image/webp"), picture_bytes=50 * 2**20,
                 audio_bytes=50 * 2**20)
_FALLBACK = re.compile(r"^(?:>[^\n]*\n)+\n?")   # a reply's quoted fallback before the text
_MXC = re.compile(r"^mxc://([A-Za-z0-9.:\-\[\]]+)/([A-Za-z0-9_-]+)$")
INVITER_ROLES = ("owner", "admin")


# --- pure ------------------------------------------------------------------------------------

def without_fallback(body: str | None) -> str:
    """A reply's body without the quoted lines older clients put before it."""
    return _FALLBACK.sub("", body or "", count=1)


def chat_kind(members: int) -> str:
    """A room of two (the bot and one person) is a DM; in a larger room every thread is a session."""
    return "dm" if 0 < members <= 2 else "thread"


def mentioned(content: mx.Content, bot: str | None, kind: str) -> bool:
    if kind == "dm":
        return True
    if content.mentions is not None:  # a client that sets m.mentions says exactly whom it means
        return bool(bot) and bot in content.mentions.user_ids
    return bool(bot) and bot in f"{content.body or ''} {content.formatted_body or ''}"


def attachment_of(content: mx.Content) -> dict | None:
    """A file's facts from m.image / m.audio / m.video / m.file; None for anything else."""
    kind = FILE_KINDS.get(content.msgtype or "")
    if kind is None or not content.url:
        return None
    if kind == "audio" and content.voice is not None:
        kind = "voice"
    info = content.info or mx.FileInfo()
    facts = {"kind": kind, "mxc": content.url, "name": content.filename or content.body,
             "mime": info.mimetype, "size": info.size}
    if info.duration is not None:
        facts["duration"] = round(info.duration / 1000, 1)
    return {k: v for k, v in facts.items() if v is not None}


def caption_of(content: mx.Content) -> str:
    """A file's caption (Matrix 1.10: body is the caption when filename is set), else nothing."""
    if content.filename and content.body and content.body != content.filename:
        return content.body
    return ""


def unmentioning(content: dict) -> dict:
    """A message of the bot's says whom it mentions: nobody unless the host names someone. Without
    `m.mentions`, clients fall back to reading the body, so "@room" or a member's name in the agent's
    text would notify people (the agent's text is not the host's to vouch for)."""
    if "m.mentions" in content:
        return content
    out = {**content, "m.mentions": {}}
    if isinstance(content.get("m.new_content"), dict):  # an edit: its replacement says so too
        out["m.new_content"] = unmentioning(content["m.new_content"])
    return out


def may_join(inviter_roles: set[str], pairing_open: bool, is_direct: bool) -> bool:
    """Join a room when the owner or an admin invited the bot, or (so the first person can pair)
    a DM while a pairing code is open."""
    return bool(inviter_roles & set(INVITER_ROLES)) or (pairing_open and is_direct)


def retry_after(body: dict, headers) -> float | None:
    wait_ms = body.get("retry_after_ms") if isinstance(body, dict) else None
    if isinstance(wait_ms, (int, float)):
        return wait_ms / 1000
    raw = headers.get("Retry-After", "")
    return float(raw) if raw.replace(".", "", 1).isdigit() else None


# --- the adapter -----------------------------------------------------------------------------

def sent_at(event: mx.Event, now: float | None = None) -> str:
    """When it was said: the origin server's claim, held to the time our own homeserver's `unsigned.age`
    implies (any homeserver in a room sets origin_server_ts; canonical JSON allows up to 2^53-1 ms)."""
    now = time.time() if now is None else now
    age = event.unsigned.age
    reference = now - age / 1000 if isinstance(age, int) and age >= 0 else None
    return said_at(event.origin_server_ts / 1000 if event.origin_server_ts else None, reference, now)


@register("matrix")
class MatrixAdapter:
    max_file_bytes = 50 * 1024 * 1024  # Synapse's default max_upload_size
    voice_notes = True                 # send_file(…, voice=True) marks audio as a voice message
    live_status = True  # a long turn's status message can be edited and redacted (outbound/progress.py)

    def __init__(self, settings):
        self.settings = settings
        platform = settings.platform
        self.base = (platform.get("MATRIX_HOMESERVER") or "").rstrip("/")
        self.user_id = platform.get("MATRIX_USER_ID")
        self.http = requests.Session()
        self._sync = handoff.Receiver(settings, SYNC_KEY_PURPOSE)
        self._parts = PartialSends()

    # --- inbound ---

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind != "sync" or method != "POST":
            raise WebhookRefused(404, "Matrix events arrive from the matrix-sync program at /webhooks/matrix/sync")
        if not (self.base and self.user_id and account.access_token(self.settings)
                or self.settings.platform.get("MATRIX_PASSWORD")):
            log.error("refusing a Matrix hand-over: MATRIX_ACCESS_TOKEN is not set (nor MATRIX_PASSWORD with a "
                      "login): set MATRIX_HOMESERVER, MATRIX_USER_ID and one of them in .env")
            raise WebhookRefused(403, "Matrix is not configured")
        return self.parse(self._sync.read(headers, body))

    def parse(self, payload) -> Parsed:
        handed = read_as(mx.Handover, payload, "a Matrix hand-over", mx.kind_of(payload))
        if handed.kind == "invite":
            self._invited(handed)
            return Parsed()
        event = handed.event
        if handed.kind != "event" or event.sender == self.user_id:
            return Parsed()  # our own echo, or nothing we route
        if event.type == "m.reaction":
            action = self._chosen_by_reaction(handed)
            return Parsed(actions=[action] if action else [])
        if event.type == "m.room.encrypted":
            log.info("an encrypted message in %s was not read (encrypted rooms are not supported)", handed.room_id)
            return Parsed()
        if event.type != "m.room.message":
            return Parsed()
        relation = event.content.relates_to
        if relation is not None and relation.rel_type == "m.replace":
            return Parsed()  # an edit: the original was answered
        action = self._chosen_by_reply(handed)
        if action is not None:
            return Parsed(actions=[action])
        built = self._event(handed)
        return Parsed(events=[built] if built else [])

    def _event(self, handed: mx.Handover) -> InboundEvent | None:
        event, content = handed.event, handed.event.content
        kind = chat_kind(handed.members)
        attachment = attachment_of(content)
        if attachment is None:
            text = without_fallback(content.body)
        else:  # a voice note's body is a label ("Voice message"), not words
            text = "" if attachment["kind"] == "voice" else caption_of(content)
        if not text and not attachment:
            return None
        relation = content.relates_to
        in_thread = relation is not None and relation.rel_type == "m.thread" and relation.event_id
        thread_id = relation.event_id if in_thread else (event.event_id if kind != "dm" else None)
        replied = relation.in_reply_to.event_id if relation and relation.in_reply_to and \
            not (in_thread and relation.is_falling_back) else None
        return InboundEvent(
            channel="matrix", event_id=event.event_id, chat_id=handed.room_id, kind=kind,
            sender_id=event.sender, sender_name=self._name(handed),
            text=text, timestamp=sent_at(event),
            thread_id=thread_id, message_id=event.event_id, mentioned=mentioned(content, self.user_id, kind),
            reply_to=ReplyTo(replied) if replied else None,
            attachments=(attachment,) if attachment else (), chat_name=handed.room_name)

    @staticmethod
    def _name(handed: mx.Handover) -> str:
        return handed.sender_name or handed.event.sender

    def _chosen_by_reply(self, handed: mx.Handover) -> Action | None:
        relation = handed.event.content.relates_to
        card = relation.in_reply_to.event_id if relation and relation.in_reply_to else None
        if card is None or (relation.rel_type == "m.thread" and relation.is_falling_back):
            return None
        n = choices.number_in(without_fallback(handed.event.content.body))
        return self._action(handed, card, choices.chosen("matrix", handed.room_id, card, n))

    def _chosen_by_reaction(self, handed: mx.Handover) -> Action | None:
        relation = handed.event.content.relates_to
        if relation is None or relation.rel_type != "m.annotation" or not relation.event_id:
            return None
        n = choices.number_in(relation.key)
        return self._action(handed, relation.event_id, choices.chosen("matrix", handed.room_id, relation.event_id, n))

    def _action(self, handed: mx.Handover, card: str, action_id: str | None) -> Action | None:
        if action_id is None:
            return None
        return Action(channel="matrix", action_id=action_id, user_id=f"matrix:{handed.event.sender}",
                      user_name=self._name(handed), chat_id=handed.room_id, message_id=card,
                      event_id=handed.event.event_id)

    def acknowledge_action(self, action: Action, text: str | None) -> None:
        """Matrix has no toast: what the choice did is a notice replying to the person's choice."""
        if not text or not action.chat_id or not action.event_id:
            return None
        try:
            self._send(Target("matrix", action.chat_id), {"msgtype": "m.notice", "body": text, "m.relates_to": {
                "m.in_reply_to": {"event_id": action.event_id}}}, in_thread=False)
        except DeliveryError as exc:
            log.warning("could not acknowledge Matrix choice %s: %s", action.action_id, exc)
        return None

    def _invited(self, handed: mx.Handover) -> None:
        inviter = handed.inviter or handed.event.sender
        with connected():
            roles = {r.role for r in UserRole.select().where(UserRole.user == f"matrix:{inviter}")}
            pairing_open = PairingCode.select().where(PairingCode.used_at.is_null(),
                                                      PairingCode.expires_at > utcnow()).exists()
        try:
            if may_join(roles, pairing_open, handed.is_direct):
                self._call("POST", f"/_matrix/client/v3/rooms/{quote(handed.room_id)}/join", {})
                log.info("joined %s: invited by %s", handed.room_id, inviter)
            else:
                self._call("POST", f"/_matrix/client/v3/rooms/{quote(handed.room_id)}/leave",
                           {"reason": "Only this assistant's owner or an admin can invite it."})
                log.warning("declined an invite to %s from %s: not the owner or an admin", handed.room_id, inviter)
        except DeliveryError as exc:
            log.warning("could not answer the invite to %s: %s", handed.room_id, exc)

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes) of an mxc:// file, from our own homeserver's authenticated media API."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        found = _MXC.match(str(attachment.get("mxc") or ""))
        if not found:
            raise AttachmentError("Matrix gave no usable mxc:// address")
        server, media = found.groups()
        url = f"{self.base}/_matrix/client/v1/media/download/{quote(server)}/{media}?allow_redirect=false"
        data, _ = fetch(url, max_bytes=cap, headers=self._auth(), what="the homeserver's media repository")
        return attachment.get("name") or media, data

    # --- outbound ---

    def send_text(self, target: Target, text: str) -> str | None:
        return self._parts.send((target, text), split_text(text, TEXT_LIMIT),
                                lambda part: self._send(target, {"msgtype": "m.text", "body": part}))

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        body = text[:TEXT_LIMIT]
        self._send(target, {"msgtype": "m.text", "body": f"* {body}", "m.new_content": {"msgtype": "m.text",
                                                                                       "body": body},
                            "m.relates_to": {"rel_type": "m.replace", "event_id": platform_message_id}},
                   in_thread=False)

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        self._send(target, {"m.relates_to": {"rel_type": "m.annotation", "event_id": platform_message_id,
                                             "key": emoji}}, event_type="m.reaction", in_thread=False)

    def delete_message(self, target: Target, platform_message_id: str) -> None:
        self._call("PUT", f"/_matrix/client/v3/rooms/{quote(target.platform_id)}/redact/"
                          f"{quote(platform_message_id)}/{uuid.uuid4().hex}", {})

    def send_card(self, target: Target, card: Card) -> str | None:
        message_id = self._send(target, {"msgtype": "m.text", "body": choices.numbered(card)})
        if message_id:
            choices.remember("matrix", target.platform_id, message_id, card)
        return message_id

    def send_file(self, target: Target, path: Path, caption: str | None, *, voice: bool = False) -> str | None:
        """Uploaded to the media repository, then sent as a picture, audio or a file, with its caption;
        `voice`: audio marked as a voice message (MSC3245, what Element shows as one)."""
        try:
            size = path.stat().st_size
            with open(path, "rb") as fh:
                uploaded = self._call("POST", "/_matrix/media/v3/upload", data=fh, params={"filename": path.name},
                                      content_type=mime_of(path), timeout=(5, 300))
        except OSError as exc:
            raise DeliveryError(f"cannot read {path.name}: {exc.strerror}", permanent=True) from None
        uri = uploaded.get("content_uri")
        if not isinstance(uri, str) or not uri.startswith("mxc://"):
            raise DeliveryError("the homeserver's upload gave no mxc:// address")
        msgtype = {"picture": "m.image", "audio": "m.audio", "document": "m.file"}[sent_as(path, size, SENT_AS)]
        content = {"msgtype": msgtype, "body": caption or path.name, "filename": path.name, "url": uri,
                   "info": {"mimetype": mime_of(path), "size": size}}
        if voice and msgtype == "m.audio":
            content.update({"org.matrix.msc3245.voice": {}, "org.matrix.msc1767.audio": {}})
        return self._send(target, content)

    def typing(self, target: Target, message_id: str | None = None) -> None:
        self._call("PUT", f"/_matrix/client/v3/rooms/{quote(target.platform_id)}/typing/{quote(self.user_id or '')}",
                   {"typing": True, "timeout": 10000})

    def leave(self, room_id: str) -> None:
        self._call("POST", f"/_matrix/client/v3/rooms/{quote(room_id)}/leave", {})

    # --- HTTP ---

    def _send(self, target: Target, content: dict, event_type: str = "m.room.message",
              in_thread: bool = True) -> str | None:
        if event_type == "m.room.message":
            content = unmentioning(content)
        if in_thread and target.thread_id:
            content = {**content, "m.relates_to": {"rel_type": "m.thread", "event_id": target.thread_id,
                                                   "is_falling_back": True,
                                                   "m.in_reply_to": {"event_id": target.thread_id}}}
        answer = self._call("PUT", f"/_matrix/client/v3/rooms/{quote(target.platform_id)}/send/{event_type}/"
                                   f"{uuid.uuid4().hex}", content)
        return answer.get("event_id")

    def _auth(self) -> dict:
        token = account.access_token(self.settings)
        if not token:
            raise DeliveryError("the Matrix account is not logged in yet: set MATRIX_ACCESS_TOKEN, or run "
                                "`flask --app app nanoclaw matrix login`")
        return {"Authorization": f"Bearer {token}"}

    def _call(self, method: str, path: str, payload: dict | None = None, *, data=None, params=None,
              content_type: str | None = None, timeout=TIMEOUT) -> dict:
        """One client-server API call; the JSON answer, or DeliveryError. The token never enters an error."""
        if not self.base:
            raise DeliveryError("MATRIX_HOMESERVER is not set", permanent=True)
        headers = self._auth()
        if content_type:
            headers["Content-Type"] = content_type
        resp, body = api_request(self.http, method, f"{self.base}{path}", f"matrix {method}",
                                 json=payload if data is None else None, data=data, params=params, headers=headers,
                                 timeout=timeout)
        if resp.ok:
            return body if isinstance(body, dict) else {}
        code = body.get("errcode", "") if isinstance(body, dict) else ""
        reason = f"matrix: {resp.status_code} {code} {body.get('error', '') if isinstance(body, dict) else ''}".strip()
        if resp.status_code == 429:
            raise DeliveryError(reason, retry_after=retry_after(body, resp.headers))
        raise DeliveryError(reason, permanent=400 <= resp.status_code < 500)

