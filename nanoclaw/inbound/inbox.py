"""Files users send, saved into the session's inbox/ where the agent can read them.

`<session>/inbox/<event id>/<name>` on the host is `/workspace/session/inbox/<event id>/<name>`
in the sandbox. The host alone writes inbox/ (the agent's view is read-only: runtime/access.py),
so files are the host's, mode 0644 in 0755 folders (what access._keep_hosts gives them), and
appear whole: written to a hidden temporary file, then renamed.

The router calls `InboxFiles(event, settings).save_into(session_path)` for each session that
takes the message: each file is downloaded once (the adapter's fetch_attachment) and copied into
the other sessions. A file that cannot be had (too large, download failed) never costs the
message: its entry carries an `error` the agent can pass on, and a warning is logged.
Nothing here needs a request context: it may run on any thread.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import unicodedata
from pathlib import Path

from ..channels.base import DeliveryError, get_adapter
from ..channels.events import InboundEvent
from ..channels.download import AttachmentError, AttachmentTooLarge
from ..sessions import session_schema as schema
from ..sessions.store import inbox_dir
from ..security import UnsafePath, contained, write_atomic
from .transcribe import Transcriber, is_audio
from agent_runner.attachments import human_size  # the runner is a package of this project (pyproject.toml)

log = logging.getLogger("nanoclaw.inbox")

INBOX = "inbox"
NAME_MAX_BYTES = 120         # well under every filesystem's 255, room for "-2" suffixes
DIR_MAX = 80
FALLBACK_NAME = "attachment"


# --- pure ----------------------------------------------------------------------------------

def _clip_utf8(text: str, limit: int) -> str:
    raw = text.encode("utf-8")[:limit]
    return raw.decode("utf-8", errors="ignore")


def safe_name(raw, fallback: str = FALLBACK_NAME) -> str:
    """A file name that stays where it is put: no folders (/ or \\), no control or format
    characters (bidi overrides), not hidden (no leading dot), not an option (no leading '-'),
    at most NAME_MAX_BYTES of UTF-8 with its extension kept."""
    name = unicodedata.normalize("NFC", str(raw or ""))
    name = re.split(r"[/\\]", name)[-1]
    name = "".join(ch for ch in name if not unicodedata.category(ch).startswith("C"))
    name = name.strip().lstrip(".-").rstrip(". ").strip()
    if not name:
        return fallback
    if len(name.encode("utf-8")) > NAME_MAX_BYTES:
        stem, dot, ext = name.rpartition(".")
        if not dot or not stem or len(ext.encode("utf-8")) > 16:
            stem, ext = name, ""
        ext = f".{ext}" if ext else ""
        name = _clip_utf8(stem, NAME_MAX_BYTES - len(ext.encode("utf-8"))).rstrip(". ") + ext
    return name or fallback


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `stem-2.ext`, `stem-3.ext`… when an earlier file of the message has it
    (compared without case, for case-insensitive filesystems). Adds the result to `taken`."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    candidate, n = name, 1
    while candidate.casefold() in taken:
        n += 1
        suffix = f"-{n}" + (f".{ext}" if ext else "")
        candidate = _clip_utf8(stem, NAME_MAX_BYTES - len(suffix.encode("utf-8"))) + suffix
    taken.add(candidate.casefold())
    return candidate


def safe_dir(message_id: str) -> str:
    """A folder name for one message: its id with only [A-Za-z0-9._-] (others become '_'); a long
    or empty one is cut and made unique with a hash of the whole id."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", message_id or "").lstrip(".-")
    if clean and len(clean) <= DIR_MAX:
        return clean
    digest = hashlib.sha256((message_id or "").encode()).hexdigest()[:16]
    return (clean[:DIR_MAX - 17] + "-" + digest) if clean else digest


def describe(attachment) -> dict:
    """The facts every platform's metadata has in its own words: name, mime, size, kind."""
    a = attachment if isinstance(attachment, dict) else {}
    size = next((a[k] for k in ("size", "file_size") if isinstance(a.get(k), int)), None)
    mime = a.get("mime") or a.get("mime_type") or a.get("content_type")
    duration = a.get("duration")
    facts = {"name": a.get("name") or a.get("filename"),
             "mime": str(mime).split(";")[0].strip() or None if mime else None,
             "size": size, "kind": a.get("kind") or a.get("type"),
             "duration": duration if isinstance(duration, (int, float)) and not isinstance(duration, bool)
             and 0 <= duration < 10**7 else None}
    return {k: v for k, v in facts.items() if v is not None}


def too_large_text(size: int | None, cap: int) -> str:
    if size is None:
        return f"too large (over {human_size(cap)})"
    return f"too large ({human_size(size)} > {human_size(cap)})"


def agent_path(folder: str, name: str) -> str:
    return f"{schema.SANDBOX_INBOUND_DIR}/{INBOX}/{folder}/{name}"


# --- effects -------------------------------------------------------------------------------

def _place(session_path: Path, folder: str, name: str) -> Path:
    """The file's host path, checked to stay inside the session's inbox (symlinks resolved)."""
    inbox = inbox_dir(session_path)
    target = contained(inbox, Path(folder) / name)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o755)
    return target


def _write_atomic(target: Path, write) -> None:
    """The agent sees the whole file or none (security.write_atomic, readable by the sandbox's user)."""
    write_atomic(target, write, mode=0o644)


class InboxFiles:
    """The attachments of one event: fetched on first use, then copied into each session."""

    def __init__(self, event: InboundEvent, settings, transcriber: Transcriber | None = None):
        self.event = event
        self.settings = settings
        self.transcriber = transcriber
        self.folder = safe_dir(event.event_id)
        self._saved: list[tuple[dict, Path | None]] | None = None  # (entry, first copy on disk)

    def save_into(self, session_path: Path) -> list[dict]:
        """Save every attachment into this session's inbox/; the entries for messages_in.content."""
        if self._saved is None:
            self._saved = self._fetch_all(Path(session_path))
            return [entry for entry, _ in self._saved]
        entries = []
        for entry, source in self._saved:
            if source is not None:
                entry = self._copy(entry, source, Path(session_path))
            entries.append(entry)
        return entries

    def _fetch_all(self, session_path: Path) -> list[tuple[dict, Path | None]]:
        try:
            adapter = get_adapter(self.event.channel, self.settings)
        except DeliveryError:
            adapter = None
        fetch = getattr(adapter, "fetch_attachment", None)
        if fetch is None:  # a channel that cannot hand over files (local chat): metadata as it came
            return [(dict(a) if isinstance(a, dict) else a, None) for a in self.event.attachments]
        taken: set[str] = set()
        return [self._fetch_one(fetch, attachment, session_path, taken) for attachment in self.event.attachments]

    def _fetch_one(self, fetch, attachment, session_path: Path, taken: set[str]) -> tuple[dict, Path | None]:
        facts = describe(attachment)
        label = safe_name(facts.get("name"), fallback=facts.get("kind") or FALLBACK_NAME)
        cap = self.settings.attachment_max_bytes
        try:
            if isinstance(facts.get("size"), int) and facts["size"] > cap:
                raise AttachmentTooLarge(facts["size"], cap)  # not even asked for
            suggested, data = fetch(attachment)
            name = unique_name(safe_name(suggested or facts.get("name"), fallback=label), taken)
            target = _place(session_path, self.folder, name)
            _write_atomic(target, lambda fh: fh.write(data))
        except AttachmentTooLarge as exc:
            return self._failed(facts, label, too_large_text(exc.size, exc.cap)), None
        except AttachmentError as exc:
            return self._failed(facts, label, f"could not be downloaded: {exc}"), None
        except (OSError, UnsafePath) as exc:
            log.warning("could not write %s attachment into %s: %s", self.event.channel, session_path, exc)
            return self._failed(facts, label, "could not be saved on the host"), None
        except Exception:  # an adapter's bug must not cost the message
            log.exception("fetching a %s attachment failed unexpectedly", self.event.channel)
            return self._failed(facts, label, "could not be downloaded"), None
        entry = {**facts, "name": name, "size": len(data), "path": agent_path(self.folder, name)}
        if is_audio(facts):  # heard once here, whichever sessions the entry is copied into
            self.transcriber = self.transcriber or Transcriber(self.settings)
            entry.update(self.transcriber.outcome(name, facts.get("mime"), data, facts.get("duration")))
        return entry, target

    def _copy(self, entry: dict, source: Path, session_path: Path) -> dict:
        """Another session's copy of a file already downloaded for this event."""
        try:
            target = _place(session_path, self.folder, entry["name"])
            with open(source, "rb") as src:
                _write_atomic(target, lambda fh: shutil.copyfileobj(src, fh))
        except (OSError, UnsafePath) as exc:
            log.warning("could not copy attachment %s into %s: %s", entry["name"], session_path, exc)
            return {k: v for k, v in entry.items() if k != "path"} | {"error": "could not be saved on the host"}
        return dict(entry)

    def _failed(self, facts: dict, label: str, reason: str) -> dict:
        log.warning("%s attachment %r of message %s not saved: %s", self.event.channel, label,
                    self.event.event_id, reason)
        return {**facts, "name": label, "error": reason}


def save_attachments(event: InboundEvent, session_path: Path, settings) -> list[dict]:
    """One session's saved attachment entries (InboxFiles for several sessions of one event)."""
    return InboxFiles(event, settings).save_into(session_path)
