"""Downloading a file a user sent: what every adapter's fetch_attachment builds on.

Each platform adapter has `fetch_attachment(attachment: dict) -> tuple[str, bytes]`: the
attachment metadata its parser put in InboundEvent.attachments in, (suggested file name, the
file's bytes) out, or AttachmentError (AttachmentTooLarge past NANOCLAW_ATTACHMENT_MAX_BYTES).

Rules kept here, for all of them:
- A URL taken from a payload gets our bot token only when it is on the platform's own file
  hosts (https) or on the origin of the configured API base (what tests point at); anything
  else is refused before a byte is sent.
- Redirects are not followed: a platform answers a file request with the file, and a redirect
  (Slack sends one to its login page) would carry the request somewhere we did not check.
- The body is read in chunks and abandoned past the cap or a total deadline, so a huge or
  endless answer costs at most the cap and bounded time. Error texts never hold a URL (a
  Telegram file URL contains the token) or a token.
"""
from __future__ import annotations

import time
from typing import Iterable
from urllib.parse import urlsplit

import requests

TIMEOUT = (5, 30)        # connect, between bytes
DEADLINE_S = 120         # the whole download
CHUNK = 64 * 1024


class AttachmentError(Exception):
    """The file could not be had; str() is a short reason the agent may repeat to the user."""


class AttachmentTooLarge(AttachmentError):
    def __init__(self, size: int | None, cap: int):
        super().__init__("too large")
        self.size = size   # None: it went past the cap while streaming, its full size unknown
        self.cap = cap


def origin(url: str | None) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else."""
    try:
        parts = urlsplit(url or "")
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def host_allowed(url: str | None, hosts: Iterable[str], bases: Iterable[str | None] = ()) -> bool:
    """Is `url` https on one of `hosts`, or on the same origin as one of `bases`?"""
    where = origin(url)
    if where is None:
        return False
    if where[0] == "https" and where[2] == 443 and where[1] in {h.lower() for h in hosts}:
        return True
    return any(base and origin(base) == where for base in bases)


def check_size(size, cap: int) -> None:
    """Refuse early when the platform already told us the size."""
    try:
        size = int(size)
    except (TypeError, ValueError):
        return
    if size > cap:
        raise AttachmentTooLarge(size, cap)


def fetch(url: str, *, max_bytes: int, headers: dict | None = None, what: str = "the file"
          ) -> tuple[bytes, str | None]:
    """GET `url` → (body, content type), at most `max_bytes`. The caller checked the host."""
    deadline = time.monotonic() + DEADLINE_S
    try:
        with requests.get(url, headers=headers or {}, stream=True, allow_redirects=False, timeout=TIMEOUT) as resp:
            if resp.is_redirect or resp.status_code >= 300:
                raise AttachmentError(f"{what} answered HTTP {resp.status_code}")
            check_size(resp.headers.get("Content-Length"), max_bytes)
            body = bytearray()
            for chunk in resp.iter_content(CHUNK):
                body += chunk
                if len(body) > max_bytes:
                    raise AttachmentTooLarge(None, max_bytes)
                if time.monotonic() > deadline:
                    raise AttachmentError(f"{what} took longer than {DEADLINE_S} s to download")
            return bytes(body), resp.headers.get("Content-Type")
    except requests.RequestException as exc:
        raise AttachmentError(f"{what} could not be reached ({type(exc).__name__})") from None
