"""WhatsApp Cloud API: signed webhooks in, Graph API `/{phone-number-id}/messages` out.

Inbound: `GET /webhooks/whatsapp` answers Meta's subscription check; `POST` is verified with
`X-Hub-Signature-256` (HMAC-SHA256 of the raw body with the app secret) before anything is
parsed. Every WhatsApp chat is a DM with the sender's wa_id, so every message counts as
addressed to the bot. Taps on our reply buttons or list rows come back as Actions.
Media messages carry their metadata (media id, mime type) in InboundEvent.attachments;
fetch_attachment downloads one (`GET {WHATSAPP_API_BASE}/{media-id}` names a short-lived URL on
lookaside.fbsbx.com, fetched with the same token) for the router to save in the session's inbox/.

Outbound limits that shape the code: text 4096 chars; reply buttons ≤ 3 with titles ≤ 20
chars; list rows ≤ 10 with titles ≤ 24 chars; interactive bodies ≤ 1024 chars. WhatsApp
cannot edit a sent message, so an edit is sent as a new message marked "(edited) ".
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import mimetypes
from pathlib import Path

import requests

from . import schema as wa
from ...channels.base import (
    Card, DeliveryError, api_request, MalformedPayload, Parsed, WebhookRefused, read_as, register)
from ...channels.events import Action, InboundEvent, ReplyTo, said_at
from ...channels import shapes
from ...channels.download import AttachmentError, check_size, fetch, host_allowed
from ...channels.files import Limits, mime_of, sent_as
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...sessions.store import Target

log = logging.getLogger(__name__)

CHANNEL = "whatsapp"
TEXT_LIMIT = 4096
INTERACTIVE_BODY_LIMIT = 1024
HEADER_LIMIT = 60
MAX_BUTTONS = 3
BUTTON_TITLE_LIMIT = 20
LIST_ROWS_LIMIT = 10
ROW_TITLE_LIMIT = 24
ROW_DESCRIPTION_LIMIT = 72
ROW_ID_LIMIT = 200
CAPTION_LIMIT = 1024
DOCUMENT_SIZE_LIMIT = 100 * 1024 * 1024
# Cloud API media limits: images JPEG/PNG to 5 MB; audio AAC, AMR, MP3, MP4 audio, OGG (Opus) to 16 MB.
SENT_AS = Limits(picture_types=("image/jpeg", "image/png"), picture_bytes=5 * 1024 * 1024,
                 audio_types=("audio/aac", "audio/amr", "audio/mpeg", "audio/mp4", "audio/ogg"),
                 audio_bytes=16 * 1024 * 1024)
EDIT_PREFIX = "(edited) "
# Graph error codes that mean "slow down": app/throughput/pair rate limits.
RATE_LIMIT_CODES = {4, 80007, 130429, 131056}
DEFAULT_RETRY_AFTER_S = 30.0
MEDIA_TYPES = ("image", "document", "audio", "video", "sticker")
MEDIA_HOSTS = ("lookaside.fbsbx.com",)  # where Graph's media URLs point; the token goes nowhere else


# --- inbound: verification (pure) -------------------------------------------------------------

def signature_valid(app_secret: str, body: bytes, header: str | None) -> bool:
    """`X-Hub-Signature-256: sha256=<hex>` over the raw body, compared in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header[len("sha256="):].strip().lower())


def subscription_challenge(query, verify_token: str | None) -> str:
    """Meta's GET check: echo hub.challenge when the mode and our verify token match."""
    if (not verify_token or query.get("hub.mode") != "subscribe"
            or not hmac.compare_digest(query.get("hub.verify_token", "").encode(), verify_token.encode())):
        raise WebhookRefused(403, "subscription verification failed")
    challenge = query.get("hub.challenge")
    if not challenge:
        raise MalformedPayload("hub.challenge missing", kind="subscribe")
    return challenge


# --- inbound: parsing (pure) -----------------------------------------------------------------

def _message_text(message: wa.Message) -> tuple[str, tuple[dict, ...]] | None:
    """(text, attachments) for the message types a person writes; None for the rest."""
    kind = message.type
    if kind == "text":
        return (message.text.body if message.text else ""), ()
    if kind == "button":  # a quick-reply button of a template message
        return (message.button.text if message.button else ""), ()
    if kind in MEDIA_TYPES:
        media = getattr(message, kind) or wa.Media()
        attachment = {"type": "voice" if kind == "audio" and media.voice else kind, "media_id": media.id,
                      "mime_type": media.mime_type, "filename": media.filename}
        return media.caption or f"[{kind}]", ({k: v for k, v in attachment.items() if v},)
    if kind == "location" and message.location is not None:
        loc = message.location
        where = ", ".join(str(v) for v in (loc.name, loc.address) if v)
        return f"[location {loc.latitude},{loc.longitude}{' ' + where if where else ''}]", ()
    return None


def parse_message(message: wa.Message, names: dict[str, str]) -> InboundEvent | Action | None:
    """One entry of `value.messages` → an event, a button/list Action, or None (ignored type)."""
    wamid, sender = message.id, message.sender
    context = message.context.id if message.context else None
    if message.type == "interactive":
        interactive = message.interactive or wa.Interactive()
        choice = getattr(interactive, interactive.type or "", None) if interactive.type in (
            "button_reply", "list_reply") else None
        if not choice or not choice.id:
            return None
        return Action(channel=CHANNEL, action_id=choice.id, user_id=f"{CHANNEL}:{sender}", chat_id=sender,
                      user_name=names.get(sender), message_id=context, event_id=wamid, raw={"title": choice.title})
    content = _message_text(message)
    if content is None:
        log.info("ignored WhatsApp message %s of type %r", wamid, message.type)  # reactions, unsupported kinds
        return None
    text, attachments = content
    return InboundEvent(
        channel=CHANNEL, event_id=wamid, chat_id=sender, kind="dm", sender_id=sender,
        sender_name=names.get(sender) or sender, text=text, timestamp=said_at(message.timestamp),
        message_id=wamid, mentioned=True,  # WhatsApp has no mentions: every chat is a DM with us
        reply_to=ReplyTo(context) if context else None, attachments=attachments)


def parse_payload(payload) -> Parsed:
    """A webhook body → events and actions. `statuses` (sent/delivered/read) are acknowledged only.
    A body that does not fit the schema is MalformedPayload; one message in it that does not fit is
    skipped (and reported) while the others are routed."""
    body = read_as(wa.Body, payload, "a WhatsApp webhook body", wa.kind_of(payload))
    parsed = Parsed()
    for entry in body.entry:
        for change in entry.changes:
            if change.field != "messages":
                continue
            value = change.value
            for status in value.statuses:  # sent/delivered/read receipts: nothing to route
                if status.status == "failed":
                    log.warning("WhatsApp reports message %s failed: %s", status.id, status.errors)
            names = {c.wa_id: c.profile.name for c in value.contacts if c.wa_id and c.profile}
            for raw in value.messages:
                try:
                    message = shapes.read(wa.Message, raw)
                except shapes.ShapeError as exc:
                    parsed.skipped.append((f"messages/{str(raw.get('type') or 'other')[:30]}", shapes.first_problem(exc)))
                    continue
                item = parse_message(message, names)
                if isinstance(item, Action):
                    parsed.actions.append(item)
                elif item is not None:
                    parsed.events.append(item)
    return parsed


def media_intact(data: bytes, file_size, sha256) -> bool:
    """Does the download match what Graph's media object says (size; hash when given as hex)?"""
    if str(file_size or "").isdigit() and int(file_size) != len(data):
        return False
    claimed = str(sha256 or "").lower()
    if len(claimed) == 64 and all(c in "0123456789abcdef" for c in claimed):
        return hashlib.sha256(data).hexdigest() == claimed
    return True


# --- outbound: request bodies (pure) ---------------------------------------------------------

def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _titles(labels: list[str], limit: int) -> list[str]:
    """Clipped labels; WhatsApp rejects two equal titles in one message, so number clashes."""
    titles = [_clip(label.strip() or "?", limit) for label in labels]
    if len(set(titles)) < len(titles):
        titles = [_clip(f"{i}. {label.strip()}", limit) for i, label in enumerate(labels, 1)]
    return titles


def media_content(kind: str, media_id: str, name: str, caption: str | None, long_caption: bool) -> dict:
    """The `image` / `audio` / `document` object of a media message (audio has no caption)."""
    content = {"id": media_id}
    if kind == "document":
        content["filename"] = name
    if caption and not long_caption and kind != "audio":
        content["caption"] = caption
    return content


def message_body(to: str, kind: str, content: dict, reply_to: str | None = None) -> dict:
    body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to, "type": kind,
            kind: content}
    if reply_to:
        body["context"] = {"message_id": reply_to}
    return body


def card_bodies(to: str, card: Card) -> list[dict]:
    """The messages that show a card: overflow text first, then one interactive message per ≤ 10
    options (reply buttons when there are at most 3, else a list)."""
    titled = "\n".join(p for p in (f"*{card.title}*" if card.title else "", card.body) if p)
    if not card.buttons:
        return [message_body(to, "text", {"preview_url": False, "body": c})
                for c in split_text(titled, TEXT_LIMIT) or ["…"]]
    header = card.title.strip() if card.title and len(card.title) <= HEADER_LIMIT else ""
    chunks = split_text(card.body if header else titled, INTERACTIVE_BODY_LIMIT) or [card.title or "…"]
    bodies = [message_body(to, "text", {"preview_url": False, "body": c}) for c in chunks[:-1]]
    for label, action_id in card.buttons:
        if len(action_id) > ROW_ID_LIMIT:
            raise DeliveryError(f"action id {action_id[:20]!r}… is longer than WhatsApp allows", permanent=True)
    groups = [card.buttons[i:i + LIST_ROWS_LIMIT] for i in range(0, len(card.buttons), LIST_ROWS_LIMIT)]
    for n, group in enumerate(groups):
        interactive: dict = {"body": {"text": chunks[-1] if n == 0 else f"(more options {n + 1}/{len(groups)})"}}
        if header and n == 0:
            interactive["header"] = {"type": "text", "text": header}
        labels = [label for label, _ in group]
        if len(card.buttons) <= MAX_BUTTONS:
            interactive["type"] = "button"
            interactive["action"] = {"buttons": [
                {"type": "reply", "reply": {"id": action_id, "title": title}}
                for (_, action_id), title in zip(group, _titles(labels, BUTTON_TITLE_LIMIT))]}
        else:
            rows = []
            for (label, action_id), title in zip(group, _titles(labels, ROW_TITLE_LIMIT)):
                row = {"id": action_id, "title": title}
                if title != label.strip():  # the whole label stays readable under the clipped title
                    row["description"] = _clip(label.strip(), ROW_DESCRIPTION_LIMIT)
                rows.append(row)
            interactive["type"] = "list"
            interactive["action"] = {"button": "Choose", "sections": [{"title": _clip(card.title or "Options", 24),
                                                                       "rows": rows}]}
        bodies.append(message_body(to, "interactive", interactive))
    return bodies


def _retry_after(headers) -> float | None:
    try:
        return float(headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def error_for(status: int, payload, headers) -> DeliveryError:
    """Graph's answer → DeliveryError: rate limits carry retry_after, other 4xx are permanent."""
    err = payload.get("error") if isinstance(payload, dict) else None
    err = err if isinstance(err, dict) else {}
    code, message = err.get("code"), err.get("message") or f"HTTP {status}"
    text = f"WhatsApp API error {status}" + (f" (code {code})" if code is not None else "") + f": {message}"
    if status == 429 or code in RATE_LIMIT_CODES:
        return DeliveryError(text, retry_after=_retry_after(headers) or DEFAULT_RETRY_AFTER_S)
    if 400 <= status < 500 and status != 408:
        return DeliveryError(text, permanent=True)
    return DeliveryError(text)


# --- the adapter (effects) ---------------------------------------------------------------------

@register(CHANNEL)
class WhatsAppAdapter:
    max_file_bytes = DOCUMENT_SIZE_LIMIT
    timeout = (5, 30)

    def __init__(self, settings):
        self.settings = settings
        self._parts = PartialSends()  # a long reply cut short by an error resumes where it stopped

    def _setting(self, name: str) -> str:
        value = self.settings.platform.get(name)
        if not value:
            raise DeliveryError(f"{name} is not set", permanent=True)
        return value

    # inbound

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind:
            raise WebhookRefused(404, f"no WhatsApp webhook named {kind!r}")
        if method == "GET":
            challenge = subscription_challenge(query, self.settings.platform.get("WHATSAPP_VERIFY_TOKEN"))
            return Parsed(response=(challenge, 200))
        secret = self.settings.platform.get("WHATSAPP_APP_SECRET")
        if not secret:
            raise WebhookRefused(403, "WHATSAPP_APP_SECRET is not set; refusing unverifiable webhooks")
        if not signature_valid(secret, body, headers.get("X-Hub-Signature-256")):
            raise WebhookRefused(401, "bad or missing X-Hub-Signature-256")
        try:
            payload = json.loads(body)
        except ValueError:
            raise MalformedPayload("body is not JSON", kind="not-json") from None
        return parse_payload(payload)

    def acknowledge_action(self, action: Action, text: str | None) -> None:
        """Answer the tap in the chat, quoting the card it came from."""
        if not text or not action.chat_id:
            return None
        try:
            self._post_message(message_body(action.chat_id, "text", {"preview_url": False, "body": text[:TEXT_LIMIT]},
                                            reply_to=action.message_id))
        except DeliveryError as exc:
            log.warning("could not acknowledge WhatsApp action %s: %s", action.action_id, exc)
        return None

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes) of a media message: Graph's media object names its download URL
        (valid for minutes, so it is asked for right before the download)."""
        cap = self.settings.attachment_max_bytes
        media_id = str(attachment.get("media_id") or "")
        if not (media_id.isascii() and media_id.isalnum()):
            raise AttachmentError("WhatsApp gave no usable media id")
        base = self.settings.platform.get("WHATSAPP_API_BASE", "https://graph.facebook.com/v21.0")
        auth = {"Authorization": f"Bearer {self._attachment_token()}"}
        try:
            resp = requests.get(f"{base}/{media_id}", headers=auth, timeout=(5, 15))
            media = resp.json() if resp.ok else None
        except (requests.RequestException, ValueError) as exc:
            raise AttachmentError(f"WhatsApp would not describe it ({type(exc).__name__})") from None
        if not isinstance(media, dict) or not isinstance(media.get("url"), str):
            raise AttachmentError(f"WhatsApp would not describe it (HTTP {resp.status_code})")
        check_size(media.get("file_size"), cap)
        if not host_allowed(media["url"], MEDIA_HOSTS, [base]):
            log.warning("refused to fetch WhatsApp media %s from %r: not WhatsApp's media host", media_id,
                        media["url"][:80])
            raise AttachmentError("the media address is not on WhatsApp's media host")
        data, _ = fetch(media["url"], max_bytes=cap, headers=auth, what="WhatsApp's media host")
        if not media_intact(data, media.get("file_size"), media.get("sha256")):
            raise AttachmentError("the file arrived damaged or incomplete")
        mime = str(media.get("mime_type") or attachment.get("mime_type") or "").split(";")[0].strip()
        kind = attachment.get("type") or "file"
        return attachment.get("filename") or f"{kind}{mimetypes.guess_extension(mime) or ''}", data

    def _attachment_token(self) -> str:
        try:
            return self._setting("WHATSAPP_TOKEN")
        except DeliveryError as exc:
            raise AttachmentError(str(exc)) from None

    # outbound

    def _url(self, path: str) -> str:
        base = self.settings.platform.get("WHATSAPP_API_BASE", "https://graph.facebook.com/v21.0")
        return f"{base}/{self._setting('WHATSAPP_PHONE_NUMBER_ID')}/{path}"

    def _call(self, path: str, **kwargs) -> dict:
        headers = {"Authorization": f"Bearer {self._setting('WHATSAPP_TOKEN')}"}
        resp, payload = api_request(requests, "POST", self._url(path), "WhatsApp API unreachable", headers=headers,
                                    timeout=kwargs.pop("timeout", self.timeout), **kwargs)
        if resp.status_code >= 400 or not isinstance(payload, dict):
            raise error_for(resp.status_code, payload, resp.headers)
        return payload

    def _post_message(self, body: dict) -> str | None:
        messages = self._call("messages", json=body).get("messages") or [{}]
        return messages[0].get("id")

    def send_text(self, target: Target, text: str) -> str | None:
        return self._parts.send((target, text), split_text(text, TEXT_LIMIT), lambda chunk: self._post_message(
            message_body(target.platform_id, "text", {"preview_url": False, "body": chunk})))

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        # WhatsApp has no edit: the correction arrives as a new message, quoting the old one.
        chunks = split_text(EDIT_PREFIX + text, TEXT_LIMIT)
        self._parts.send((target, "edit", platform_message_id, text), chunks, lambda chunk: self._post_message(
            message_body(target.platform_id, "text", {"preview_url": False, "body": chunk},
                         reply_to=platform_message_id if chunk is chunks[0] else None)))

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        self._post_message(message_body(target.platform_id, "reaction",
                                        {"message_id": platform_message_id, "emoji": emoji}))

    def send_card(self, target: Target, card: Card) -> str | None:
        """Returns the id of the first message with buttons: a tap's context.id names it."""
        with_buttons: list[str | None] = []

        def send_one(body: dict) -> str | None:
            wamid = self._post_message(body)
            if body["type"] == "interactive":
                with_buttons.append(wamid)
            return wamid
        first = self._parts.send((target, card), card_bodies(target.platform_id, card), send_one)
        return with_buttons[0] if with_buttons else first

    def send_file(self, target: Target, path: Path, caption: str | None) -> str | None:
        """Uploaded to /media, then sent as an image (JPEG/PNG to 5 MB), audio (to 16 MB; audio
        takes no caption, so it follows as text) or a document; an image WhatsApp refuses goes
        as a document."""
        size = path.stat().st_size
        if size > DOCUMENT_SIZE_LIMIT:
            raise DeliveryError(f"{path.name} is {size} bytes; WhatsApp documents are limited to 100 MB",
                                permanent=True)
        kind = {"picture": "image", "audio": "audio", "document": "document"}[sent_as(path, size, SENT_AS)]
        media_id = self._upload(path)
        long_caption = bool(caption) and len(caption) > CAPTION_LIMIT
        try:
            wamid = self._post_message(message_body(target.platform_id, kind,
                                                    media_content(kind, media_id, path.name, caption, long_caption)))
        except DeliveryError as exc:
            if kind != "image" or not exc.permanent:
                raise
            log.info("whatsapp refused %s as an image (%s); sending it as a document", path.name, exc)
            kind = "document"
            wamid = self._post_message(message_body(target.platform_id, kind,
                                                    media_content(kind, media_id, path.name, caption, long_caption)))
        if caption and (long_caption or kind == "audio"):
            self.send_text(target, caption)
        return wamid

    def _upload(self, path: Path) -> str:
        mime = mime_of(path)
        with path.open("rb") as fh:
            media = self._call("media", data={"messaging_product": "whatsapp", "type": mime},
                               files={"file": (path.name, fh, mime)}, timeout=(5, 300))
        if not media.get("id"):
            raise DeliveryError("WhatsApp media upload returned no id")
        return media["id"]

    def typing(self, target: Target, message_id: str | None = None) -> None:
        """Mark the user's message read and show "typing…" (WhatsApp ties both to a message id)."""
        if not message_id:
            return None
        self._call("messages", json={"messaging_product": "whatsapp", "status": "read", "message_id": message_id,
                                     "typing_indicator": {"type": "text"}})
