"""Would fetching this URL carry a secret out? Pure; asked before any connection.

An agent fed a hostile page can be steered to put what it knows into a URL it reads. The host can
not know every secret a conversation holds, but it knows its own: a host secret's value anywhere in
the URL (as written, and percent-decoded as often as it was encoded) is refused, and so is a query
parameter whose name says it carries a credential, whatever its value (`SECRET_PARAMS`, compared
case-insensitively). The answer names the reason and never the value.
"""
from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

SECRET_PARAMS = frozenset({
    "token", "access_token", "refresh_token", "id_token", "auth_token", "api_token", "key", "api_key", "apikey",
    "api-key", "secret", "client_secret", "password", "passwd", "pwd", "pass", "signature", "sig", "auth",
    "authorization", "session", "sessionid", "session_id", "sid", "jwt", "bearer", "credential", "credentials",
    "private_key", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
    "x-goog-credential",
})
SHORTEST_SECRET = 8  # shorter values (a port, "true") are not secrets worth matching anywhere


def _spellings(url: str) -> list[str]:
    """The URL as written and each decoding of it, until decoding changes nothing (at most 4 times)."""
    found = [url]
    for _ in range(4):
        step = unquote_plus(unquote(found[-1]))
        if step == found[-1]:
            break
        found.append(step)
    return found


def secret_in_url(url: str, secret_values: Iterable[str]) -> str | None:
    """Why this URL may not be fetched because of what it carries, or None."""
    spellings = [s.casefold() for s in _spellings(url)]
    for value in secret_values:
        if value and len(value) >= SHORTEST_SECRET and any(value.casefold() in s for s in spellings):
            return "the URL contains one of this install's secrets; it is not fetched (and the value is not shown)"
    try:
        query = urlsplit(url).query
    except ValueError:
        return None  # the address check refuses what cannot be read
    for name, _value in parse_qsl(query, keep_blank_values=True):
        for spelling in _spellings(name):
            plain = spelling.strip().rstrip("[]").casefold()
            if plain in SECRET_PARAMS:
                return (f"the URL has a query parameter named {plain!r}, which carries credentials; it is not "
                        "fetched. Read the page without it")
    return None
