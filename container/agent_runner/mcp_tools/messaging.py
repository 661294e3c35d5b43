"""Core chat tools: send_message, send_file, edit_message, add_reaction.

Plain functions over a ToolContext (tests call them directly); `sdk_tools` wraps them for the
in-process MCP server. A refusal is a ToolError whose text the model reads.
"""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from ..session_schema import AGENT_MESSAGE_OPS
from ..targets import Target, UnknownDestination, resolve_destination
from .context import ToolContext, ToolError

MAX_FILE_BYTES = 50 * 1024 * 1024


def _target(ctx: ToolContext, to: str | None) -> Target:
    try:
        return resolve_destination(to, ctx.default_target(), ctx.store.destinations())
    except UnknownDestination as e:
        raise ToolError(str(e)) from None


def _clean_text(text: str | None) -> str:
    from ..formatter import format_outbound  # the v1 rule: <internal>…</internal> never reaches the user
    return format_outbound(text or "")


def send_message(ctx: ToolContext, text: str, to: str | None = None, voice: bool = False) -> str:
    body = _clean_text(text)
    if not body:
        raise ToolError("the message text is empty")
    target = _target(ctx, to)
    content = {"op": "text", "text": body}
    if voice is True:  # spoken too, where the host has a voice and the chat allows it (its choice)
        content["voice"] = True
    seq = ctx.store.write_out(content, target, in_reply_to=ctx.turn.in_reply_to)
    return f"Message sent (message_id {seq})."


def _inside(path: Path, roots: tuple[Path, ...]) -> bool:
    for root in roots:
        base = root.resolve()
        if path == base or base in path.parents:
            return True
    return False


def _refuse_path(path: str, why: str) -> ToolError:
    return ToolError(f"cannot send {path!r}: {why}. Only files inside the workspace "
                     f"(/workspace/group, /workspace/session) can be sent.")


def resolve_sendable(ctx: ToolContext, path: str) -> Path:
    """The real path of a file the agent may send (symlinks followed), or a ToolError."""
    if not path or not str(path).strip():
        raise ToolError("no path given")
    p = Path(os.path.expanduser(str(path).strip()))
    if not p.is_absolute():
        p = ctx.config.group_dir / p  # the agent's working directory
    real = p.resolve()
    if not _inside(real, ctx.config.send_roots):
        raise _refuse_path(path, "it is outside the workspace")
    if not real.exists():
        raise ToolError(f"cannot send {path!r}: no such file")
    if not real.is_file():
        raise ToolError(f"cannot send {path!r}: not a regular file")
    return real


def _copy_to_outbox(ctx: ToolContext, real: Path, shown: str) -> str:
    """Copy through an fd whose real path is checked again, so a symlink swapped in after the
    check cannot smuggle another file out."""
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not _inside(opened, ctx.config.send_roots):
            raise _refuse_path(shown, "it is outside the workspace")
        if os.fstat(fd).st_size > MAX_FILE_BYTES:
            raise ToolError(f"cannot send {shown!r}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        outbox = ctx.store.dir / "outbox"
        outbox.mkdir(exist_ok=True)
        name = f"{uuid.uuid4().hex[:8]}-{real.name}"
        with os.fdopen(os.dup(fd), "rb") as src, open(outbox / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return f"outbox/{name}"
    finally:
        os.close(fd)


def send_file(ctx: ToolContext, path: str, to: str | None = None, text: str | None = None) -> str:
    real = resolve_sendable(ctx, path)
    target = _target(ctx, to)
    rel = _copy_to_outbox(ctx, real, path)
    content = {"op": "file", "path": rel, "filename": real.name}
    caption = _clean_text(text)
    if caption:
        content["text"] = caption
    seq = ctx.store.write_out(content, target, in_reply_to=ctx.turn.in_reply_to)
    return f"File {real.name} sent (message_id {seq})."


def _own_message(ctx: ToolContext, message_id) -> dict:
    try:
        seq = int(str(message_id).strip())
    except ValueError:
        raise ToolError(f"message_id must be the number send_message returned, not {message_id!r}") from None
    row = ctx.store.out_row(seq)
    if row is None or row["content"].get("op") not in AGENT_MESSAGE_OPS:
        raise ToolError(f"no message of yours has message_id {seq}")
    return row


def _row_target(row: dict) -> Target:
    return Target(row["channel_type"], row["platform_id"], row["thread_id"])


def edit_message(ctx: ToolContext, message_id, text: str) -> str:
    row = _own_message(ctx, message_id)
    body = _clean_text(text)
    if not body:
        raise ToolError("the new text is empty")
    ctx.store.write_out({"op": "edit", "target_seq": row["seq"], "text": body}, _row_target(row),
                        in_reply_to=ctx.turn.in_reply_to)
    return f"Message {row['seq']} edited."


CURRENT = ("", "current", "user", "theirs", "this")


def add_reaction(ctx: ToolContext, message_id=None, emoji: str = "") -> str:
    emoji = (emoji or "").strip()
    if not emoji:
        raise ToolError("no emoji given")
    if message_id is None or str(message_id).strip().lower() in CURRENT:
        # the message this turn answers: the host finds it in its own inbound.db by this id
        if not ctx.turn.in_reply_to or ctx.turn.reply_to is None:
            raise ToolError("there is no message being answered to react to; give the message_id of yours")
        ctx.store.write_out({"op": "reaction", "on_message_in": ctx.turn.in_reply_to, "emoji": emoji},
                            ctx.turn.reply_to, in_reply_to=ctx.turn.in_reply_to)
        return f"Reaction {emoji} added to the message you are answering."
    row = _own_message(ctx, message_id)
    ctx.store.write_out({"op": "reaction", "target_seq": row["seq"], "emoji": emoji}, _row_target(row),
                        in_reply_to=ctx.turn.in_reply_to)
    return f"Reaction {emoji} added to message {row['seq']}."


_TO = {"type": "string", "description": "Optional: the name of a named destination. Leave empty to "
                                        "answer in the chat the current message came from."}
_MSG_ID = {"type": ["integer", "string"],
           "description": "The message_id that send_message/send_file returned for one of YOUR messages."}

SPECS = [
    (send_message, "send_message",
     "Send a chat message now (e.g. progress while you work). Your final answer is sent "
     "automatically; use this for extra messages or to message a named destination.",
     {"type": "object", "properties": {"text": {"type": "string"}, "to": _TO, "voice": {
         "type": "boolean", "description": "Also as a voice message, spoken (when the owner set up a voice; "
                                           "the text goes too). Only when someone asked to hear it."}},
      "required": ["text"]}),
    (send_file, "send_file",
     "Send a file from the workspace (/workspace/group or /workspace/session) to the chat, with an "
     "optional caption. Paths outside the workspace are refused.",
     {"type": "object", "properties": {"path": {"type": "string"}, "to": _TO, "text": {"type": "string"}},
      "required": ["path"]}),
    (edit_message, "edit_message", "Replace the text of one of your earlier messages.",
     {"type": "object", "properties": {"message_id": _MSG_ID, "text": {"type": "string"}},
      "required": ["message_id", "text"]}),
    (add_reaction, "add_reaction",
     "Add an emoji reaction: to the message you are answering (leave message_id out; e.g. 👍 to say you "
     "got it and are working on it), or to one of your earlier messages.",
     {"type": "object", "properties": {"emoji": {"type": "string"}, "message_id": {
         **_MSG_ID, "description": "Optional: the message_id of one of YOUR messages; leave it out to react "
                                   "to the message you are answering."}},
      "required": ["emoji"]}),
]
