"""A client of signal-cli's JSON-RPC daemon over HTTP (`POST {SIGNAL_CLI_URL}/api/v1/rpc`).

One request per call; an error answer becomes a DeliveryError that says what to do. Files travel
in the calls themselves (`getAttachment` answers base64, `send` takes `data:` URIs), never through
signal-cli's own data folder, which may belong to another user or container.
"""
from __future__ import annotations

import itertools
import re

import requests

from . import DEFAULT_URL
from ...channels.base import DeliveryError

TIMEOUT = (5, 60)
RATE_LIMITED, USER_ERROR, UNTRUSTED = -5, -1, -4   # signal-cli's error codes (SignalJsonRpcCommandHandler)
OLDEST = (0, 11, 5)   # getAttachment and the events stream over HTTP came with 0.11.5
TESTED = (0, 14)      # the version the fake daemon answers as, from signal-cli's own documentation
VOICE_NOTES = (0, 14, 2)  # send's `voiceNote`
_ids = itertools.count(1)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def version_of(text: str | None) -> tuple[int, int, int] | None:
    found = _VERSION.search(text or "")
    return tuple(int(x) for x in found.groups()) if found else None


class Rpc:
    def __init__(self, settings, http: requests.Session | None = None):
        self.url = (settings.platform.get("SIGNAL_CLI_URL") or DEFAULT_URL).rstrip("/")
        self.account = settings.platform.get("SIGNAL_ACCOUNT") or ""
        self.http = http or requests.Session()
        self._uuid: str | None = None
        self._version: tuple[int, int, int] | None = None

    def call(self, method: str, params: dict | None = None, *, timeout=TIMEOUT):
        """The call's `result`, or DeliveryError (retry_after for a rate limit, permanent for a refusal)."""
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
        try:
            resp = self.http.post(f"{self.url}/api/v1/rpc", json=body, timeout=timeout)
        except requests.RequestException as exc:
            raise DeliveryError(f"signal-cli's daemon at {self.url} did not answer ({type(exc).__name__}); is "
                                "the signal-events program running (it runs signal-cli where it is installed), or "
                                "`signal-cli daemon --http` where it runs elsewhere?") from None
        try:
            answer = resp.json()
        except ValueError:
            answer = None
        if not resp.ok or not isinstance(answer, dict):
            raise DeliveryError(f"signal-cli: {method} answered HTTP {resp.status_code}",
                                permanent=resp.status_code in (404, 405, 415, 421))
        error = answer.get("error")
        if isinstance(error, dict):
            raise failure(method, error)
        return answer.get("result")

    def sent(self, method: str, params: dict) -> str:
        """A send of some kind; the message's timestamp (its id on Signal). A recipient whose send
        failed makes it a DeliveryError (a rate limit retried, an unregistered number not)."""
        result = self.call(method, params)
        results = result.get("results") if isinstance(result, dict) else None
        failed = [one for one in results if isinstance(one, dict) and one.get("type") not in (None, "SUCCESS")] \
            if isinstance(results, list) else []
        if failed:
            raise from_results(method, failed)
        stamp = result.get("timestamp") if isinstance(result, dict) else None
        if not isinstance(stamp, int):
            raise DeliveryError(f"signal-cli: {method} gave no timestamp")
        return str(stamp)

    def version(self) -> tuple[int, int, int] | None:
        if self._version is None:
            result = self.call("version", timeout=(5, 15))
            self._version = version_of(result.get("version") if isinstance(result, dict) else None)
        return self._version

    def own_uuid(self) -> str | None:
        """The account's own ACI uuid (how mentions of the bot and Note to Self are told)."""
        if self._uuid is None and self.account:
            self._uuid = self.status([self.account]).get(self.account)
        return self._uuid

    def status(self, numbers: list[str]) -> dict[str, str | None]:
        """number -> its ACI uuid (None: not on Signal), from the daemon (getUserStatus)."""
        result = self.call("getUserStatus", {"recipient": numbers})
        out: dict[str, str | None] = {}
        for one in result if isinstance(result, list) else []:
            if isinstance(one, dict) and isinstance(one.get("recipient"), str):
                uuid = one.get("uuid") if one.get("isRegistered") else None
                out[one["recipient"]] = uuid if isinstance(uuid, str) else None
        return out


PERMANENT = ("UNREGISTERED_FAILURE", "IDENTITY_FAILURE")   # a recipient not on Signal, or not trusted
WAITS = ("RATE_LIMIT_FAILURE", "PROOF_REQUIRED_FAILURE")   # Signal says when to try again
DEFAULT_WAIT_S = 60.0


def from_results(method: str, failed: list[dict]) -> DeliveryError:
    """What the recipients' failures mean for the row (pure): any recipient Signal could not reach now
    (NETWORK_FAILURE, an unknown kind) is tried again; a rate limit after the longest retryAfterSeconds any
    result gives; only when every failure is for good (not on Signal, untrusted) is it permanent."""
    kinds = sorted({str(one.get("type")) for one in failed})
    waits = [float(w) for one in failed if str(one.get("type")) in WAITS
             and isinstance(w := one.get("retryAfterSeconds"), (int, float)) and not isinstance(w, bool) and w >= 0]
    limited = any(kind in WAITS for kind in kinds)
    return DeliveryError(f"signal-cli: {method}: {', '.join(kinds)}",
                         retry_after=min(max(waits), 86400.0) if waits else (DEFAULT_WAIT_S if limited else None),
                         permanent=all(kind in PERMANENT for kind in kinds))


def failure(method: str, error: dict) -> DeliveryError:
    """A JSON-RPC error as the row's outcome (pure). signal-cli answers a send that reached no recipient
    with error -1 and the per-recipient results in error.data.response (since 0.12.3): those decide, as for
    a partial failure. Otherwise: -5 rate limited (retryAfterSeconds when given), -1 (a user error: the
    request itself is wrong), -4 (untrusted identity) and unknown-method errors for good, the rest again."""
    code, message = error.get("code"), str(error.get("message") or "")[:300]
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    response = data.get("response") if isinstance(data.get("response"), dict) else {}
    results = response.get("results") if isinstance(response.get("results"), list) else []
    failed = [one for one in results if isinstance(one, dict) and one.get("type") not in (None, "SUCCESS")]
    if failed:
        return from_results(method, failed)
    if code == RATE_LIMITED:
        return DeliveryError(f"signal-cli: {method}: rate limited by Signal ({message})", retry_after=DEFAULT_WAIT_S)
    return DeliveryError(f"signal-cli: {method}: {message} ({code})",
                         permanent=code in (USER_ERROR, UNTRUSTED, -32601, -32602))


def resolve_number(settings, value: str) -> str:
    """A `+number` as the Signal user id NanoClaw keeps (the ACI uuid; a sender may hide the number,
    the uuid is always there). Anything else is taken as it is."""
    if not value.startswith("+"):
        return value
    uuid = Rpc(settings).status([value]).get(value)
    if not uuid:
        raise DeliveryError(f"{value} is not on Signal (signal-cli's daemon says so)", permanent=True)
    return uuid
