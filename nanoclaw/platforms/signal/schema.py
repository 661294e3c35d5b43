"""What the signal-events program hands over, and the envelopes in it (pydantic).

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

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Mention(Model):
    uuid: str | None = None
    number: str | None = None
    start: int = 0
    length: int = 0


class Attachment(Model):
    id: str | None = None
    content_type: str | None = Field(None, alias="contentType")
    filename: str | None = None
    size: int | None = None
    caption: str | None = None


class Quote(Model):
    id: int | None = None                       # the quoted message's timestamp
    author_uuid: str | None = Field(None, alias="authorUuid")
    author_number: str | None = Field(None, alias="authorNumber")
    text: str | None = None


class Reaction(Model):
    emoji: str | None = None
    target_author_uuid: str | None = Field(None, alias="targetAuthorUuid")
    target_author_number: str | None = Field(None, alias="targetAuthorNumber")
    target_sent_timestamp: int | None = Field(None, alias="targetSentTimestamp")
    is_remove: bool = Field(False, alias="isRemove")


class GroupInfo(Model):
    group_id: str | None = Field(None, alias="groupId")
    group_name: str | None = Field(None, alias="groupName")
    type: str | None = None                     # DELIVER, UPDATE, QUIT …


class RemoteDelete(Model):
    timestamp: int | None = None


class DataMessage(Model):
    timestamp: int | None = None
    message: str | None = None
    mentions: list[Mention] = []
    attachments: list[Attachment] = []
    quote: Quote | None = None
    reaction: Reaction | None = None
    group_info: GroupInfo | None = Field(None, alias="groupInfo")
    remote_delete: RemoteDelete | None = Field(None, alias="remoteDelete")
    view_once: bool | None = Field(None, alias="viewOnce")


class EditMessage(Model):
    target_sent_timestamp: int | None = Field(None, alias="targetSentTimestamp")
    data_message: DataMessage | None = Field(None, alias="dataMessage")


class SentMessage(DataMessage):
    """A message the account's own phone sent (a sync message): its destination, then the message."""
    destination_number: str | None = Field(None, alias="destinationNumber")
    destination_uuid: str | None = Field(None, alias="destinationUuid")


class SyncMessage(Model):
    sent_message: SentMessage | None = Field(None, alias="sentMessage")


class Envelope(Model):
    source_uuid: str | None = Field(None, alias="sourceUuid")
    source_number: str | None = Field(None, alias="sourceNumber")
    source_name: str | None = Field(None, alias="sourceName")
    source_device: int | None = Field(None, alias="sourceDevice")
    timestamp: int | None = None
    data_message: DataMessage | None = Field(None, alias="dataMessage")
    edit_message: EditMessage | None = Field(None, alias="editMessage")
    sync_message: SyncMessage | None = Field(None, alias="syncMessage")
    typing_message: dict | None = Field(None, alias="typingMessage")
    receipt_message: dict | None = Field(None, alias="receiptMessage")


class Handover(Model):
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
