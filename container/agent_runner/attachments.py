"""How a file the user sent reads in the prompt (stdlib only: the host imports human_size too).

The host saved it in the session's inbox/ and wrote its sandbox path, type and size into
messages_in.content.attachments, or an `error` when it could not (too large, download failed),
so the agent can read the file with its tools, or tell the user what went wrong.
"""
from __future__ import annotations


def human_size(n) -> str:
    """52 KB, 1.5 MB, 31 MB (units of 1024, as file managers show them)."""
    try:
        n = int(n)
    except (TypeError, ValueError):
        return "?"
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if n < 10 and unit != "KB" else f"{round(n)} {unit}"
    raise AssertionError("unreachable")


def attachment_line(a) -> str | None:
    """`[attachment: /workspace/session/inbox/…/photo.jpg (image/jpeg, 52 KB)]`, or the reason it
    is missing; None for an entry with nothing to say."""
    if not isinstance(a, dict):
        return f"[attachment: {a}]" if a else None
    facts = ", ".join(p for p in (a.get("mime"), human_size(a["size"]) if a.get("size") is not None else None) if p)
    label = a.get("name") or a.get("filename") or "a file"
    if a.get("error"):
        return f"[attachment not saved: {label}{f' ({facts})' if facts else ''}: {a['error']}]"
    where = a.get("path") or a.get("name") or a.get("filename")
    if not where:
        return None
    return f"[attachment: {where}{f' ({facts})' if facts else ''}]"
