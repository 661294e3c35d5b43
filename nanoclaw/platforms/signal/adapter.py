"""Signal: the signal-events program's hand-overs in, signal-cli's JSON-RPC daemon out.

Inbound: the listener (listener.py) posts each `receive` event of the daemon's stream, signed
(channels/handoff.py), to /webhooks/signal/events; here it becomes an InboundEvent or a choice on a
card (an Action). A person is their ACI uuid (the number may be hidden; the uuid never is), so a
DM's chat id is the person's uuid and a group's is `group.<its base64 id>`. In a group the bot is
mentioned by Signal's mention ranges (its own number or uuid), or by a reply to one of its messages.

A message's id is `<author uuid>:<timestamp>` (Signal names a message by its author and the time it
was sent); the bot's own messages are their timestamp alone. Edits of a person's message are not
answered again; remote deletes, typing, receipts, calls and stories are not routed.

Linked to the owner's own account (instead of a number of its own), NanoClaw *is* the owner: the
owner's DM with it is Note to Self (a sync message from their phone to the account itself) and its
answers go there; a sync message to anyone else is the owner talking to someone else, never routed
or stored.

Outbound: send (with editTimestamp for edits), sendReaction, remoteDelete, sendTyping, files as
`data:` URIs. Signal has no buttons: a card is numbered lines (channels/choices.py) and a reply
quoting it with a number, or a keycap reaction on it, chooses.
"""
from __future__ import annotations

import base64
import binascii
import logging
import time
from pathlib import Path

from . import schema as sg
from .rpc import VOICE_NOTES, Rpc
from ...channels import choices, handoff
from ...channels.base import Card, DeliveryError, Parsed, WebhookRefused, read_as, register
from ...channels.download import AttachmentError, check_size
from ...channels.events import Action, InboundEvent, ReplyTo, said_at
from ...channels.files import Limits, mime_of, sent_as
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...sessions.store import Target

log = logging.getLogger(__name__)

EVENTS_PATH = "/webhooks/signal/events"   # the signal-events program hands each event over here
EVENTS_KEY_PURPOSE = b"signal-events"
TEXT_LIMIT = 2000                         # past this, Signal's apps show a "read more" attachment
GROUP = "group."
MENTION_MARK = "\ufffc"                   # where a mention sits in the text (the range says whom)
SENT_AS = Limits(picture_types=("image/jpeg", "image/png", "image/gif", "image/webp"), picture_bytes=100 * 2**20,
                 audio_bytes=100 * 2**20)
KINDS = (("image/", "photo"), ("video/", "video"), ("audio/", "audio"))


# --- pure ------------------------------------------------------------------------------------

def chat_of(group_id: str | None, person: str) -> str:
    return f"{GROUP}{group_id}" if group_id else person


def recipient(chat_id: str) -> dict:
    """The send parameters that address a chat: a group by its id, a person by their uuid."""
    return {"groupId": chat_id[len(GROUP):]} if chat_id.startswith(GROUP) else {"recipient": [chat_id]}


def message_ref(author: str | None, stamp: int | None, own: bool = False) -> str | None:
    if not stamp:
        return None
    return str(stamp) if own or not author else f"{author}:{stamp}"


def author_and_stamp(ref: str, account: str) -> tuple[str, int]:
    """A message id back to (author, timestamp): the bot's own messages are the account's."""
    author, _, stamp = ref.rpartition(":")
    return author or account, int(stamp)


def with_mentions(text: str, mentions: list[sg.Mention], is_bot, bot_name: str) -> str:
    """The text with each mention's placeholder as a name (the bot's own name for the bot)."""
    out, at = [], 0
    for m in sorted(mentions, key=lambda m: m.start):
        if not 0 <= m.start <= len(text) or m.start < at:
            continue
        out.append(text[at:m.start])
        who = bot_name if is_bot(m) else (m.number or "someone")
        out.append("@" + who)
        at = m.start + max(m.length, 0)
    out.append(text[at:])
    return "".join(out)


def sent_at(stamp: int | None, server_received: int | None) -> str:
    """When the message was said: the sender's own clock (in the encrypted content, which Signal's server
    cannot check), held to the server's receipt time."""
    ms = lambda v: v / 1000 if isinstance(v, int) else None
    return said_at(ms(stamp), ms(server_received))


def attachment_of(item: sg.Attachment, chat_id: str, sender: str) -> dict | None:
    if not item.id:
        return None
    mime = (item.content_type or "").lower()
    kind = next((k for prefix, k in KINDS if mime.startswith(prefix)), "document")
    if kind == "audio" and not item.filename:  # a voice note: recorded in the app, no file name
        kind = "voice"
    facts = {"kind": kind, "signal_id": item.id, "name": item.filename or f"{kind}-{item.id[:12]}",
             "mime": item.content_type, "size": item.size, "chat": chat_id, "sender": sender}
    return {k: v for k, v in facts.items() if v is not None}


# --- the adapter -----------------------------------------------------------------------------

@register("signal")
class SignalAdapter:
    max_file_bytes = 100 * 1024 * 1024  # what Signal's servers take in one attachment
    live_status = True                  # sends can be edited (editTimestamp) and deleted (remoteDelete)
    stream_limit = 2000  # Signal's own clients cut longer texts
    max_edits = 8  # clients show at most 10 edits of one message; the last ones are kept for the end
    voice_notes = True                  # send_file(…, voice=True) sends a voice note

    def __init__(self, settings):
        self.settings = settings
        self.account = settings.platform.get("SIGNAL_ACCOUNT") or ""
        self.rpc = Rpc(settings)
        self._events = handoff.Receiver(settings, EVENTS_KEY_PURPOSE)
        self._parts = PartialSends()

    # --- inbound ---

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind != "events" or method != "POST":
            raise WebhookRefused(404, "Signal events arrive from the signal-events program at /webhooks/signal/events")
        if not self.account:
            log.error("refusing a Signal hand-over: SIGNAL_ACCOUNT is not set; put the bot's number in .env")
            raise WebhookRefused(403, "Signal is not configured")
        return self.parse(self._events.read(headers, body))

    def parse(self, payload) -> Parsed:
        handed = read_as(sg.Handover, payload, "a Signal event", sg.kind_of(payload))
        env = handed.envelope
        if env is None or not env.source_uuid:
            return Parsed()
        own_uuid = handed.account_uuid
        if env.sync_message is not None:
            sent = env.sync_message.sent_message
            to_self = sent is not None and sent.group_info is None and (
                (sent.destination_number and sent.destination_number == self.account)
                or (sent.destination_uuid and sent.destination_uuid == env.source_uuid))
            if not to_self:  # the owner's phone talking to someone else: none of ours
                return Parsed()
            built = self._event(env, sent, env.source_uuid, own_uuid)
            return Parsed(events=[built] if built else [])
        data = env.data_message
        if data is None or env.edit_message is not None or data.remote_delete is not None:
            return Parsed()  # typing, receipts, calls, stories; an edit (the original was answered); a delete
        if data.reaction is not None:
            action = self._chosen_by_reaction(env, data)
            return Parsed(actions=[action] if action else [])
        action = self._chosen_by_reply(env, data)
        if action is not None:
            return Parsed(actions=[action])
        built = self._event(env, data, env.source_uuid, own_uuid)
        return Parsed(events=[built] if built else [])

    def _is_bot(self, own_uuid: str | None):
        return lambda m: bool((m.number and m.number == self.account) or (own_uuid and m.uuid == own_uuid))

    def _event(self, env: sg.Envelope, data: sg.DataMessage, sender: str, own_uuid: str | None) -> InboundEvent | None:
        group = data.group_info
        if group is not None and group.type not in (None, "DELIVER"):
            return None  # a group update (members, name, avatar): no words for the agent
        chat_id = chat_of(group.group_id if group else None, sender)
        kind = "group" if group else "dm"
        is_bot = self._is_bot(own_uuid)
        text = with_mentions(data.message or "", data.mentions, is_bot, self.settings.assistant_name)
        files = tuple(a for a in (attachment_of(item, chat_id, sender) for item in data.attachments) if a)
        if not text.strip() and not files:
            return None
        stamp = data.timestamp or env.timestamp
        ref = message_ref(sender, stamp)
        quote = data.quote
        quoted_bot = quote is not None and ((quote.author_number and quote.author_number == self.account)
                                            or (own_uuid and quote.author_uuid == own_uuid))
        replied = None
        if quote is not None and quote.id:
            replied = ReplyTo(message_ref(quote.author_uuid, quote.id, own=bool(quoted_bot)),
                              text=(quote.text or "")[:500] or None)
        return InboundEvent(
            channel="signal", event_id=ref or f"{sender}:{time.time_ns()}", chat_id=chat_id, kind=kind,
            sender_id=sender, sender_name=env.source_name or env.source_number or f"Signal user {sender[:8]}",
            text=text, timestamp=sent_at(stamp, env.server_received_timestamp), message_id=ref,
            mentioned=kind == "dm" or any(is_bot(m) for m in data.mentions) or bool(quoted_bot),
            reply_to=replied, attachments=files, chat_name=group.group_name if group else None)

    def _chosen_by_reply(self, env: sg.Envelope, data: sg.DataMessage) -> Action | None:
        quote = data.quote
        if quote is None or not quote.id or data.attachments:
            return None
        chat_id = chat_of(data.group_info.group_id if data.group_info else None, env.source_uuid)
        return self._action(env, chat_id, choices.chosen("signal", chat_id, str(quote.id),
                                                         choices.number_in(data.message)), data)

    def _chosen_by_reaction(self, env: sg.Envelope, data: sg.DataMessage) -> Action | None:
        reaction = data.reaction
        if reaction.is_remove or not reaction.target_sent_timestamp:
            return None
        chat_id = chat_of(data.group_info.group_id if data.group_info else None, env.source_uuid)
        card = str(reaction.target_sent_timestamp)
        return self._action(env, chat_id, choices.chosen("signal", chat_id, card, choices.number_in(reaction.emoji)),
                            data)

    def _action(self, env: sg.Envelope, chat_id: str, action_id: str | None, data: sg.DataMessage) -> Action | None:
        if action_id is None:
            return None
        quote, reaction = data.quote, data.reaction
        card = str(quote.id if quote is not None and data.reaction is None else reaction.target_sent_timestamp)
        return Action(channel="signal", action_id=action_id, user_id=f"signal:{env.source_uuid}",
                      user_name=env.source_name or env.source_number or env.source_uuid, chat_id=chat_id,
                      message_id=card, event_id=message_ref(env.source_uuid, data.timestamp or env.timestamp))

    def acknowledge_action(self, action: Action, text: str | None) -> None:
        """Signal has no toast: what the choice did is a message quoting the person's choice."""
        if not text or not action.chat_id:
            return None
        params = {**self._to(action.chat_id), "message": text}
        if action.event_id and ":" in action.event_id:
            author, stamp = author_and_stamp(action.event_id, self.account)
            params.update(quoteTimestamp=stamp, quoteAuthor=author)
        try:
            self.rpc.sent("send", params)
        except DeliveryError as exc:
            log.warning("could not acknowledge Signal choice %s: %s", action.action_id, exc)
        return None

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes), from the daemon's API (getAttachment), never from its data folder."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        if not attachment.get("signal_id"):
            raise AttachmentError("Signal gave no attachment id")
        chat = str(attachment.get("chat") or "")
        where = {"groupId": chat[len(GROUP):]} if chat.startswith(GROUP) else {"recipient": attachment.get("sender")}
        try:
            result = self.rpc.call("getAttachment", {"id": attachment["signal_id"], **where}, timeout=(5, 120))
        except DeliveryError as exc:
            raise AttachmentError(f"signal-cli would not hand it out ({exc})") from None
        encoded = result.get("data") if isinstance(result, dict) else None
        if not isinstance(encoded, str) or len(encoded) > (cap * 4) // 3 + 8:
            raise AttachmentError("signal-cli gave no file, or one over the limit")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise AttachmentError("signal-cli's answer is not base64") from None
        check_size(len(data), cap)
        return attachment.get("name") or attachment["signal_id"], data

    # --- outbound ---

    def _to(self, chat_id: str) -> dict:
        """How to address a chat; the account's own uuid is Note to Self (linked to the owner's account)."""
        if not chat_id.startswith(GROUP) and chat_id == self.rpc.own_uuid():
            return {"noteToSelf": True}
        return recipient(chat_id)

    def send_text(self, target: Target, text: str) -> str | None:
        to = self._to(target.platform_id)
        return self._parts.send((target, text), split_text(text, TEXT_LIMIT),
                                lambda part: self.rpc.sent("send", {**to, "message": part}))

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        self.rpc.sent("send", {**self._to(target.platform_id), "message": text[:TEXT_LIMIT],
                               "editTimestamp": int(platform_message_id)})

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        author, stamp = author_and_stamp(platform_message_id, self.account)
        self.rpc.sent("sendReaction", {**self._to(target.platform_id), "emoji": emoji, "targetAuthor": author,
                                       "targetTimestamp": stamp})

    def delete_message(self, target: Target, platform_message_id: str) -> None:
        self.rpc.sent("remoteDelete", {**self._to(target.platform_id), "targetTimestamp": int(platform_message_id)})

    def send_card(self, target: Target, card: Card) -> str | None:
        message_id = self.rpc.sent("send", {**self._to(target.platform_id), "message": choices.numbered(card)})
        choices.remember("signal", target.platform_id, message_id, card)
        return message_id

    def send_file(self, target: Target, path: Path, caption: str | None, *, voice: bool = False) -> str | None:
        """The file as a `data:` URI with its caption; `voice`: as a voice note (signal-cli 0.14.2 on)."""
        try:
            size = path.stat().st_size
            if size > self.max_file_bytes:
                raise DeliveryError(f"{path.name} is over Signal's 100 MB", permanent=True)
            data = base64.b64encode(path.read_bytes()).decode()
        except OSError as exc:
            raise DeliveryError(f"cannot read {path.name}: {exc.strerror}", permanent=True) from None
        mime = mime_of(path)
        params = {**self._to(target.platform_id), "message": caption or "",
                  "attachments": [f"data:{mime};filename={path.name};base64,{data}"]}
        if voice and (self.rpc.version() or (0, 0, 0)) >= VOICE_NOTES:
            params["voiceNote"] = True
        log.debug("sending %s to Signal as %s", path.name, sent_as(path, size, SENT_AS))
        return self.rpc.sent("send", params)

    def typing(self, target: Target, message_id: str | None = None) -> None:
        self.rpc.call("sendTyping", self._to(target.platform_id))
