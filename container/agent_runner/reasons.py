"""What the user is told when a turn fails: short, plain, and never a header, key or stack."""
from __future__ import annotations


def short_reason(status: int | None, detail: str | None, subtype: str | None = None) -> str:
    """A one-line reason for a failed model call."""
    if status in (401, 403):
        return f"the model API refused our credentials (HTTP {status})"
    if status == 429:
        return "the model API is rate-limiting us (HTTP 429)"
    if status and status >= 500:
        return f"the model API is unavailable (HTTP {status})"
    if status:
        return f"the model API answered HTTP {status}"
    text = (detail or "").strip()
    line = text.splitlines()[0] if text else ""
    line = line if len(line) <= 160 else line[:157] + "..."
    return line.rstrip(". ") or (subtype or "unknown error")


def failure_text(reason: str, timed_out: bool) -> str:
    if timed_out:
        return f"Sorry — {reason}. Your message will be retried."
    return f"Sorry — the model call failed: {reason}. Your message will be retried."
