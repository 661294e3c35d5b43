"""A helper program → the web program: the signed hand-off of one platform event.

Programs that receive events without a webhook (the Discord Gateway, Telegram long polling, Slack
Socket Mode) post each one to the web program on 127.0.0.1, so it is accepted, deduplicated, routed
and woken exactly as a webhook would be. The request is signed with HMAC-SHA256 over
`timestamp + "." + body`, keyed by a key derived from the install's secret for that one purpose
(the cookie-signing key itself never MACs anything else); a timestamp more than 5 minutes off is
refused (replay). `post` is the helper program's side of one hand-over, `Receiver` the web
program's; the rest is pure.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time

import requests

from .base import MalformedPayload, WebhookRefused
from ..config import install_secret

log = logging.getLogger("nanoclaw.handoff")
SAME_SECRET = " (do both programs read the same NANOCLAW_SECRET_KEY / data/secret_key?)"

SIGNATURE_HEADER = "X-NanoClaw-Gateway-Signature"
TIMESTAMP_HEADER = "X-NanoClaw-Gateway-Timestamp"
MAX_SKEW_S = 300


def purpose_key(secret: str, purpose: bytes) -> bytes:
    """A key of its own for `purpose`, derived from the install's secret."""
    return hmac.new(secret.encode(), purpose, hashlib.sha256).digest()


def sign(key: bytes, timestamp: str, body: bytes) -> str:
    return hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(key: bytes, body: bytes, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {SIGNATURE_HEADER: sign(key, timestamp, body), TIMESTAMP_HEADER: timestamp,
            "Content-Type": "application/json"}


def verify(key: bytes, headers, body: bytes, now: float) -> None:
    """Raise WebhookRefused(401) unless our own program signed this body, recently."""
    signature, timestamp = headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER)
    if not signature or not timestamp:
        raise WebhookRefused(401, f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}")
    if not (signature.isascii() and timestamp.isascii()) or \
            not hmac.compare_digest(sign(key, timestamp, body).encode(), signature.encode()):
        raise WebhookRefused(401, "bad hand-off signature")
    try:
        fresh = abs(now - int(timestamp)) <= MAX_SKEW_S
    except ValueError:
        fresh = False
    if not fresh:
        raise WebhookRefused(401, f"stale {TIMESTAMP_HEADER} (possible replay)")


def attempts(web_was_down: bool, retry_delays: tuple) -> int:
    """Retry only while the web program was answering: once it is down, each event tries once, so
    a burst during an outage is not held up by retries one after another."""
    return 1 if web_was_down else len(retry_delays) + 1


def attempt_outcome(status: int | None) -> str:
    """What one POST's answer means: 'done', 'retry' (no answer or 5xx), or 'refused' (4xx)."""
    if status is None or status >= 500:
        return "retry"
    if status >= 400:
        return "refused"
    return "done"


REFUSALS_TO_SET_ASIDE = 5   # a running web program that refused one event this often in a row never takes it


def answer_of(status: int | None) -> str:
    """What one hand-over's answer says of the event (pure): 'done' (2xx: stored, or seen before);
    'outage' (no answer, a 503 "cannot store now", or 401/403: the two programs' keys differ), which says
    nothing of this event, so it is offered again for as long as it takes; 'refused' (any other 5xx or
    4xx): the web program is up and will not take this one."""
    if status is None or status in (401, 403, 503):
        return "outage"
    if 200 <= status < 300:
        return "done"
    return "refused" if status >= 400 else "outage"


class Offering:
    """One event being handed over, until it is taken or set aside: a listener never holds its stream
    on an event a running web program keeps refusing (a parser bug, a payload nobody foresaw)."""

    def __init__(self):
        self.refusals = 0
        self.last: str = ""

    def answered(self, status: int | None, detail: str = "") -> str:
        """'done', 'again' or 'set aside' after one attempt's answer."""
        kind = answer_of(status)
        if kind == "done":
            return "done"
        if kind == "refused":
            self.refusals += 1
            self.last = f"HTTP {status}" + (f": {detail[:200]}" if detail else "")
            return "set aside" if self.refusals >= REFUSALS_TO_SET_ASIDE else "again"
        self.refusals = 0  # in a row: an outage between refusals starts the count again
        return "again"


def offer(attempt, keep_aside, pause, stopped, backoff) -> str:
    """Hand one event over until it is taken ('done'), set aside ('set aside') or the program stops
    ('stopped'). attempt() -> (status or None, detail); keep_aside(reason) -> whether it was kept (if not,
    it is offered again: nothing goes unrecorded); pause(seconds) waits, ending early at a stop;
    backoff(failures) -> seconds."""
    offering, failures = Offering(), 0
    while not stopped():
        step = offering.answered(*attempt())
        if step == "done":
            return "done"
        if step == "set aside" and keep_aside(f"{offering.refusals} times in a row (last: {offering.last})"):
            return "set aside"
        failures += 1
        pause(backoff(failures))
    return "stopped"


def answer_detail(resp) -> tuple[int | None, str]:
    """(status, the start of its body) of post()'s answer, (None, "") for none."""
    if resp is None:
        return None, ""
    try:
        return resp.status_code, resp.text[:200]
    except (UnicodeDecodeError, ValueError):
        return resp.status_code, ""


def post(http: requests.Session, url: str, key: bytes, body: bytes, what: str, then: str):
    """One signed hand-over to the web program: its response, or None when it gave none. A failure is
    logged here, once: `what` names the event, `then` says what becomes of it."""
    try:
        resp = http.post(url, data=body, headers=signed_headers(key, body, time.time()), timeout=10)
    except requests.RequestException as exc:
        log.warning("the web program did not take %s (%s); %s", what, type(exc).__name__, then)
        return None
    if attempt_outcome(resp.status_code) != "done":
        log.log(logging.ERROR if 400 <= resp.status_code < 500 else logging.WARNING,
                "the web program answered %s to %s; %s%s", resp.status_code, what, then,
                SAME_SECRET if resp.status_code == 401 else "")
    return resp


class Receiver:
    """The web program's side of one helper program's hand-overs: the purpose's key, made once (the
    install's secret is fixed for the process's life); each request checked, its JSON read."""

    def __init__(self, settings, purpose: bytes):
        self.settings, self.purpose = settings, purpose
        self._key: bytes | None = None

    def read(self, headers, body: bytes, now: float | None = None):
        if self._key is None:
            self._key = purpose_key(install_secret(self.settings), self.purpose)
        verify(self._key, headers, body, time.time() if now is None else now)
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise MalformedPayload("body is not JSON", kind="not-json") from None
