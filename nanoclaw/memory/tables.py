"""The memory and history tables (migration 0017), as peewee models on the central database."""
from __future__ import annotations

import peewee as pw

from ..models import Base, utcnow


class Memory(Base):
    agent_folder = pw.CharField()
    scope = pw.CharField(max_length=600)   # private:<user id> | chat:<channel>:<chat id>
    text = pw.TextField(default="")
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "memories"
        indexes = ((("agent_folder", "scope"), True),)


class MemoryChange(Base):
    agent_folder = pw.CharField()
    scope = pw.CharField(max_length=600)
    request_key = pw.CharField(max_length=200, null=True, unique=True)  # an agent's request, applied once
    actor = pw.CharField()                 # agent:<folder> or the person's user id (cli for the CLI)
    session_id = pw.CharField(default="")  # the conversation the agent changed it in
    action = pw.CharField(max_length=16)   # add | replace | remove | edit | clear
    before_text = pw.TextField(null=True)
    after_text = pw.TextField(null=True)
    outcome = pw.TextField(default="")     # what the agent was told
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "memory_changes"


class History(Base):
    agent_folder = pw.CharField()
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    thread_id = pw.CharField(null=True)
    session_id = pw.CharField(default="")
    message_key = pw.CharField(max_length=300)   # the inbound message id, or out:<the agent's row id>
    sender_id = pw.CharField(default="")         # the person's user id, or agent:<folder>
    sender_name = pw.CharField(default="")
    said_at = pw.CharField(max_length=32)        # UTC ISO, as the session files keep times
    text = pw.TextField()
    norm = pw.TextField(default="")              # the text as the index reads it (query.fold)

    class Meta:
        table_name = "history"
        indexes = ((("agent_folder", "message_key"), True),)
