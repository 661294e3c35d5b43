"""The `signal-events` program: signal-cli's event stream (`GET {SIGNAL_CLI_URL}/api/v1/events`,
server-sent events) handed to the web program one at a time.

Each `receive` event is handed over, signed, to the web program (POST /webhooks/signal/events),
which accepts it exactly as a webhook: parsing, dedup by message, routing, choices on cards. The
next event is read only after the web program answered 2xx (stored, or seen before); until then
the same event is offered again, with growing pauses, while the web program is down or restarting.
An event a running web program refused five times in a row is set aside (inbound/set_aside.py) and
the stream goes on. A lost connection is opened again with backoff.

The stream has no acknowledgement. With `--receive-mode on-connection` the daemon receives from
Signal's servers only while this program is connected, so what arrives while it is down waits there
(or in the daemon); at a SIGKILL at most the one event in flight can be lost.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterable, Iterator

import requests
import urllib3

from . import DEFAULT_URL
from .adapter import EVENTS_KEY_PURPOSE, EVENTS_PATH
from .rpc import Rpc
from ...channels import handoff
from ...channels.base import DeliveryError
from ...inbound import set_aside
from ...config import install_secret

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
READ_TIMEOUT_S = 60   # the daemon sends a keep-alive every 15 s: a minute of silence is a dead line
MAX_EVENT_BYTES = 64 * 1024 * 1024  # an event is one line of JSON; attachments are not in it


def backoff(failures: int) -> float:
    """1, 2, 4 … 60 s after consecutive failures."""
    return min(MAX_BACKOFF_S, 2.0 ** max(0, failures - 1))


def lines_of(read1) -> Iterator[bytes]:
    """The lines of a stream read with `read1` (whatever has arrived, at most 64 KiB), each as soon as
    its newline came: a quiet stream never holds back an event that is complete."""
    pending = b""
    while True:
        chunk = read1(65536)
        if not chunk:
            if pending:
                yield pending
            return
        pending += chunk
        if len(pending) > MAX_EVENT_BYTES:
            raise DeliveryError("signal-cli sent a line over 64 MiB")
        *complete, pending = pending.split(b"\n")
        yield from complete


def events(lines: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """(event type, data) of each server-sent event in a stream of lines (pure). Comments (": …",
    the keep-alives) are skipped; several data lines are joined with newlines, as the spec says."""
    kind, data = "message", []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)


class EventsListener:
    def __init__(self, settings, *, web_url: str | None = None):
        self.settings = settings
        platform = settings.platform
        self.base = (platform.get("SIGNAL_CLI_URL") or DEFAULT_URL).rstrip("/")
        self.account = platform.get("SIGNAL_ACCOUNT") or ""
        self.web_url = (web_url or f"http://127.0.0.1:{settings.port}") + EVENTS_PATH
        self.key = handoff.purpose_key(install_secret(settings), EVENTS_KEY_PURPOSE)
        self.stop = threading.Event()
        self.http = requests.Session()
        self.rpc = Rpc(settings, self.http)
        self.failures = 0
        self.handed = 0
        self.set_aside = 0
        self._stream = None   # the open events response

    @staticmethod
    def name_of(payload: dict) -> str:
        envelope = payload.get("envelope") if isinstance(payload.get("envelope"), dict) else {}
        return f"{envelope.get('sourceUuid')}:{envelope.get('timestamp')}"

    def hand_over(self, payload: dict) -> tuple[int | None, str]:
        """One try: the web program's status (2xx: stored, or seen before) and the start of its answer."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        resp = handoff.post(self.http, self.web_url, self.key, body, f"Signal event {self.name_of(payload)}",
                            "offering it again")
        return handoff.answer_detail(resp)

    def deliver(self, data: str) -> None:
        """Hand one event over, again and again until it is taken, set aside (refused by a running web
        program five times in a row) or the program stops."""
        try:
            payload = json.loads(data)
        except ValueError:
            log.warning("signal-cli sent an event that is not JSON (%d bytes); passed over", len(data))
            return
        if not isinstance(payload, dict):
            return
        if self.account_uuid:
            payload["account_uuid"] = self.account_uuid
        outcome = handoff.offer(lambda: self.hand_over(payload),
                                lambda why: set_aside.keep("signal", self.name_of(payload), why, payload),
                                self.stop.wait, self.stop.is_set, backoff)
        if outcome == "done":
            self.handed += 1
        elif outcome == "set aside":
            self.set_aside += 1

    def listen_once(self) -> None:
        """One connection to the stream, read until it ends."""
        url = f"{self.base}/api/v1/events"
        with self.http.get(url, stream=True, timeout=(5, READ_TIMEOUT_S),
                           headers={"Accept": "text/event-stream"}) as resp:
            if resp.status_code != 200:
                raise DeliveryError(f"signal-cli's events answered HTTP {resp.status_code} (is SIGNAL_ACCOUNT "
                                    f"{self.account} the daemon's account?)")
            self._stream = resp
            if self.stop.is_set():  # a halt that came before the stream was there to shut
                return
            log.info("connected to signal-cli's events at %s; events go to %s", url, self.web_url)
            self.failures = 0
            try:
                for kind, data in events(lines_of(resp.raw.read1)):
                    if self.stop.is_set():
                        return
                    if kind == "receive" and len(data) <= MAX_EVENT_BYTES:
                        self.deliver(data)
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
                if not self.stop.is_set():
                    raise
            finally:
                self._stream = None

    def halt(self) -> None:
        """Stop: the stream's socket is shut, so a read waiting on it ends at once and none starts
        again; an event being handed over still gets its answer (that is another connection)."""
        self.stop.set()
        stream = self._stream
        if stream is not None:
            sock = getattr(getattr(stream.raw, "connection", None), "sock", None)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):
                pass

    @property
    def account_uuid(self) -> str | None:
        try:
            return self.rpc.own_uuid()
        except DeliveryError:
            return None  # mentions still match the account's number

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.listen_once()
                if self.stop.is_set():
                    return
                log.warning("signal-cli's event stream ended; connecting again")
                wait = 1.0
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError, DeliveryError) as exc:
                self.failures += 1
                wait = backoff(self.failures)
                log.warning("no event stream from signal-cli at %s (%s); trying again in %.0f s", self.base,
                            str(exc)[:200] or type(exc).__name__, wait)
            self.stop.wait(wait)
