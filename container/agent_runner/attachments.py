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


SPOKEN = {"voice": "voice note", "video_note": "video message", "audio": "audio file"}


def clock(seconds) -> str | None:
    try:
        total = int(round(float(seconds)))
    except (TypeError, ValueError):
        return None
    hours, rest = divmod(max(total, 0), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def heard_line(a: dict) -> str | None:
    """A voice note the host transcribed (or could not): its words as the person's, marked as a
    transcript with its length; None when the entry is not one."""
    if "transcript" not in a and "transcript_error" not in a:
        return None
    what = SPOKEN.get(a.get("kind"), "audio file")
    length = clock(a.get("duration")) if a.get("duration") is not None else None
    head = f"{what}, {length}" if length else what
    where = a.get("path") or a.get("name") or "the inbox"
    words = a.get("transcript")
    if isinstance(words, str) and words.strip():
        return f"[{head}; transcript below; the recording is at {where}]\n{words.strip()}\n[end of transcript]"
    if isinstance(words, str):
        return f"[{head} at {where}: no words could be made out]"
    return (f"[{head} at {where}: it could not be heard ({a.get('transcript_error')}); say so and ask for it "
            "in writing if it matters]")


def attachment_line(a, shown: str | None = None) -> str | None:
    """`[attachment: /workspace/session/inbox/…/photo.jpg (image/jpeg, 52 KB)]`, or the reason it
    is missing; None for an entry with nothing to say. `shown`: what became of it as a content
    block (media.Shown), added to the line."""
    if not isinstance(a, dict):
        return f"[attachment: {a}]" if a else None
    if not a.get("error"):
        heard = heard_line(a)
        if heard:
            return heard
    facts = ", ".join(p for p in (a.get("mime"), human_size(a["size"]) if a.get("size") is not None else None) if p)
    label = a.get("name") or a.get("filename") or "a file"
    if a.get("error"):
        return f"[attachment not saved: {label}{f' ({facts})' if facts else ''}: {a['error']}]"
    where = a.get("path") or a.get("name") or a.get("filename")
    if not where:
        return None
    return f"[attachment: {where}{f' ({facts})' if facts else ''}{f', {shown}' if shown else ''}]"
