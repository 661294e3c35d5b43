"""What the signal-events program hands over, and the envelopes in it (`channels/shapes.py`).

The hand-over is one `receive` event of signal-cli's stream exactly as the daemon sent it
(signal-cli-jsonrpc(5); its JSON classes: JsonMessageEnvelope, JsonDataMessage, JsonSyncMessage …):

    {"account": "+4915…", "envelope": {"sourceUuid": "…", "sourceNumber": "+49…" | null,
     "sourceName": "…", "sourceDevice": 1, "timestamp": 1700000000000,
     "dataMessage": {…} | "editMessage": {…} | "syncMessage": {…} | "typingMessage": {…} | …}}

Only what the parser uses is declared; unknown keys are ignored (signal-cli adds fields freely). A
value of another type where a string belongs makes the hand-over malformed: answered, logged,
counted.
"""
from __future__ import annotations

from ...channels.shapes import Shape, field


class Mention(Shape):
    uuid: str | None = None
    number: str | None = None
    start: int = 0
    length: int = 0


class Attachment(Shape):
    id: str | None = None
    content_type: str | None = field(default=None, name="contentType")
    filename: str | None = None
    size: int | None = None
    caption: str | None = None


class Quote(Shape):
    id: int | None = None                       # the quoted message's timestamp
    author_uuid: str | None = field(default=None, name="authorUuid")
    author_number: str | None = field(default=None, name="authorNumber")
    text: str | None = None


class Reaction(Shape):
    emoji: str | None = None
    target_author_uuid: str | None = field(default=None, name="targetAuthorUuid")
    target_author_number: str | None = field(default=None, name="targetAuthorNumber")
    target_sent_timestamp: int | None = field(default=None, name="targetSentTimestamp")
    is_remove: bool = field(default=False, name="isRemove")


class GroupInfo(Shape):
    group_id: str | None = field(default=None, name="groupId")
    group_name: str | None = field(default=None, name="groupName")
    type: str | None = None                     # DELIVER, UPDATE, QUIT …


class RemoteDelete(Shape):
    timestamp: int | None = None


class DataMessage(Shape):
    timestamp: int | None = None
    message: str | None = None
    mentions: list[Mention] = []
    attachments: list[Attachment] = []
    quote: Quote | None = None
    reaction: Reaction | None = None
    group_info: GroupInfo | None = field(default=None, name="groupInfo")
    remote_delete: RemoteDelete | None = field(default=None, name="remoteDelete")
    view_once: bool | None = field(default=None, name="viewOnce")


class EditMessage(Shape):
    target_sent_timestamp: int | None = field(default=None, name="targetSentTimestamp")
    data_message: DataMessage | None = field(default=None, name="dataMessage")


class SentMessage(DataMessage):
    """A message the account's own phone sent (a sync message): its destination, then the message."""
    destination_number: str | None = field(default=None, name="destinationNumber")
    destination_uuid: str | None = field(default=None, name="destinationUuid")


class SyncMessage(Shape):
    sent_message: SentMessage | None = field(default=None, name="sentMessage")


class Envelope(Shape):
    source_uuid: str | None = field(default=None, name="sourceUuid")
    source_number: str | None = field(default=None, name="sourceNumber")
    source_name: str | None = field(default=None, name="sourceName")
    source_device: int | None = field(default=None, name="sourceDevice")
    timestamp: int | None = None
    server_received_timestamp: int | None = field(default=None, name="serverReceivedTimestamp")  # Signal's server's clock
    data_message: DataMessage | None = field(default=None, name="dataMessage")
    edit_message: EditMessage | None = field(default=None, name="editMessage")
    sync_message: SyncMessage | None = field(default=None, name="syncMessage")
    typing_message: dict | None = field(default=None, name="typingMessage")
    receipt_message: dict | None = field(default=None, name="receiptMessage")


class Handover(Shape):
    account: str | None = None
    account_uuid: str | None = None             # added by the listener: the account's own ACI uuid
    envelope: Envelope | None = None


def kind_of(payload) -> str:
    """The event's kind as far as it can be told, for the log line and the counter of a malformed one."""
    envelope = payload.get("envelope") if isinstance(payload, dict) else None
    if not isinstance(envelope, dict):
        return "unknown"
    for key in ("dataMessage", "editMessage", "syncMessage", "typingMessage", "receiptMessage", "callMessage",
                "storyMessage"):
        if key in envelope:
            return key
    return "other"
