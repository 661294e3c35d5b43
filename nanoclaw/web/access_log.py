"""The web program's access log without secrets: gunicorn's logger with every URL redacted.

A URL can carry a secret: a one-time login link (`/login/link/<token>`), WhatsApp's subscription
check (`?hub.verify_token=…&hub.challenge=…`), a card's token. The log keeps the method, the path's
shape, the query's parameter names, the status and the timing, and drops every query value and
any path segment that looks like a token (the request line, the path, the query, the referer, and
every header and environ atom a custom format could name). `redact` is the pure rule.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from gunicorn.glogging import Logger

HIDDEN = "…"
TOKEN_SEGMENT = re.compile(r"^(?=.*[A-Z])[A-Za-z0-9_=-]{16,}$")  # random URL-safe text: mixed case, long
AFTER = ("link",)  # /login/link/<anything> is a credential whatever it looks like


def is_token(segment: str, previous: str) -> bool:
    """A path segment to hide: random-looking (agent folders and session ids are lower-case and kept)."""
    return bool(segment) and (previous in AFTER or TOKEN_SEGMENT.match(segment) is not None)


def redact_path(path: str) -> str:
    segments = path.split("/")
    return "/".join(HIDDEN if is_token(s, segments[i - 1] if i else "") else s for i, s in enumerate(segments))


def redact_query(query: str) -> str:
    names = [name for name, _ in parse_qsl(query or "", keep_blank_values=True)]
    return "&".join(f"{name}={HIDDEN}" for name in names) if names else (HIDDEN if query else "")


def redact(target: str | None) -> str | None:
    """A request target or a full URL with its secrets replaced (scheme and host kept)."""
    if not target or target == "-":
        return target
    parts = urlsplit(target)
    prefix = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    query = redact_query(parts.query)
    return prefix + redact_path(parts.path) + (f"?{query}" if query else "")


class RedactingLogger(Logger):
    """gunicorn's logger (`logger_class` in gunicorn.conf.py) with URLs redacted in access lines."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        raw = environ.get("RAW_URI") or ""
        atoms["r"] = f"{environ.get('REQUEST_METHOD')} {redact(raw)} {environ.get('SERVER_PROTOCOL')}"
        atoms["U"] = redact_path(environ.get("PATH_INFO") or "")
        atoms["q"] = redact_query(environ.get("QUERY_STRING") or "")
        atoms["f"] = redact(atoms.get("f"))
        for key, rule in (("{referer}i", redact), ("{http_referer}e", redact), ("{raw_uri}e", redact),
                          ("{request_uri}e", redact), ("{path_info}e", redact_path), ("{query_string}e", redact_query)):
            if key in atoms:
                atoms[key] = rule(str(atoms[key]))
        return atoms
