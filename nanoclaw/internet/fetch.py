"""GET a page for an agent: checked before any connection, connected only to the address checked.

For each hop (the URL, then each redirect, at most `Limits.redirects`): the URL is read as a socket
would read it and refused if it carries a secret (`url_secrets`); the name is resolved once, by the
resolver the fetcher was given (a test serves its own DNS), and every address it answers is checked
(`addresses.refusal`): one refused address refuses the hop, so an answer that mixes a public and a
loopback address cannot win by order. The connection goes to the first checked address with the
URL's name as Host and TLS server name (the certificate is checked against the name), so a second,
rebinding answer is never asked for. GET only, no cookies, no credentials, a stated user agent,
`identity` encoding (what is counted is what is read). Limits: connect and first byte, the whole
fetch, the bytes read (streamed, stopped at the limit: what arrived is kept and marked). Only the
types an agent can read are read; another is refused naming its type, before its body is read.
"""
from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urljoin, urlsplit

from .addresses import Refused, Rules, Target, refusal, target
from .url_secrets import secret_in_url

USER_AGENT = "NanoClaw-web-read/1 (an AI agent's host, reading a page its user asked for)"
READABLE = ("text/html", "application/xhtml+xml", "text/plain", "text/markdown", "application/json",
            "application/xml", "text/xml", "application/rss+xml", "application/atom+xml", "application/pdf",
            "text/csv")
REDIRECTS = (301, 302, 303, 307, 308)
PIECE = 64 * 1024

Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    found: list[str] = []
    for *_rest, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in found:
            found.append(sockaddr[0])
    return found


@dataclass(frozen=True)
class Limits:
    connect_s: float = 10.0      # connect, and the first byte of the answer
    total_s: float = 30.0        # the whole fetch, redirects included
    max_bytes: int = 5_000_000
    redirects: int = 5


@dataclass
class Page:
    url: str                     # the final URL, after redirects
    status: int
    content_type: str            # lower-case, no parameters
    charset: str | None
    body: bytes
    fetched_at: datetime
    stopped: str = ""            # "" when whole; else why reading stopped ("size", "time")
    hops: list[str] = field(default_factory=list)  # every URL asked, the first included


def readable(content_type: str) -> bool:
    return content_type in READABLE or content_type.endswith(("+json", "+xml"))


class _Pinned(http.client.HTTPConnection):
    """HTTP to one checked address, whatever the name would resolve to now."""

    def __init__(self, target: Target, address: str, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, target: Target, address: str, timeout: float, context: ssl.SSLContext):
        super().__init__(target.host, target.port, timeout=timeout, context=context)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class Fetcher:
    def __init__(self, rules: Rules = Rules(), *, resolver: Resolver = system_resolver, limits: Limits = Limits(),
                 secrets: Callable[[], Iterable[str]] = tuple, tls: ssl.SSLContext | None = None):
        self.rules, self.resolver, self.limits, self.secrets = rules, resolver, limits, secrets
        self.tls = tls or ssl.create_default_context()

    def check(self, url: str) -> tuple[Target, str]:
        """The target and the one address a fetch of `url` would connect to, or Refused."""
        reason = secret_in_url(url, self.secrets())
        if reason:
            raise Refused(reason)
        where = target(url, allow_ports=self.rules.allow_ports)
        if where.literal is not None:
            addresses = [str(where.literal)]
        else:
            try:
                addresses = self.resolver(where.host, where.port)
            except OSError:
                addresses = []
            if not addresses:
                raise Refused(f"{where.host} does not resolve to any address")
        for address in addresses:
            why = refusal(address, where.port, self.rules)
            if why:
                raise Refused(why if where.literal is not None else f"{where.host} resolves to {address}; {why}")
        return where, addresses[0]

    def get(self, url: str) -> Page:
        deadline = time.monotonic() + self.limits.total_s
        hops = []
        for _ in range(self.limits.redirects + 1):
            hops.append(url)
            where, address = self.check(url)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Refused(f"the page did not answer within {self.limits.total_s:.0f} s")
            timeout = min(self.limits.connect_s, remaining)
            conn = (_PinnedTLS(where, address, timeout, self.tls) if where.scheme == "https"
                    else _Pinned(where, address, timeout))
            try:
                page = self._one(conn, url, deadline)
            except (OSError, http.client.HTTPException) as exc:
                raise Refused(f"{where.authority} could not be read: {_plain(exc)}") from None
            finally:
                conn.close()
            if isinstance(page, str):
                url = page  # a redirect: checked again from the top
                continue
            page.hops = hops
            return page
        raise Refused(f"more than {self.limits.redirects} redirects")

    def _one(self, conn: http.client.HTTPConnection, url: str, deadline: float) -> Page | str:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", path, headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,"
                     "text/plain;q=0.9,application/pdf;q=0.9,*/*;q=0.5", "Accept-Encoding": "identity"})
        sock = conn.sock  # the response reads through it; the connection lets go of it on a closing answer
        response = conn.getresponse()
        if response.status in REDIRECTS:
            location = response.getheader("Location")
            if not location:
                raise Refused(f"a redirect ({response.status}) without a Location")
            return urljoin(url, location.strip())
        media = (response.getheader("Content-Type") or "application/octet-stream").split(";")
        content_type = media[0].strip().lower()
        charset = next((p.split("=", 1)[1].strip().strip('"') for p in media[1:] if p.strip().lower().startswith("charset=")),
                       None)
        if not readable(content_type):
            raise Refused(f"the page is {_token(content_type)}, which cannot be read as text (HTML, text, JSON, "
                          "XML, RSS and PDF can)")
        body, stopped = bytearray(), ""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "time"
                break
            sock.settimeout(min(self.limits.connect_s, remaining))
            try:
                piece = response.read1(min(PIECE, self.limits.max_bytes - len(body)) or 1)
            except TimeoutError:
                stopped = "time"
                break
            if not piece:
                break
            body += piece
            if len(body) >= self.limits.max_bytes:
                body, stopped = body[:self.limits.max_bytes], "size"
                break
        return Page(url, response.status, content_type, charset, bytes(body), datetime.now(timezone.utc), stopped)


def _token(value: str) -> str:
    """A media type as the server wrote it, cut to what a media type may hold: a refusal reaches the
    agent outside the envelope, so it carries no free text of the server's."""
    return "".join(c for c in value if c.isascii() and (c.isalnum() or c in "/.+-"))[:60] or "of no stated type"


def _plain(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its certificate is not valid for it ({exc.verify_message})"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, ConnectionRefusedError):
        return "the connection was refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    return type(exc).__name__  # never its text: http.client's can hold the line the server sent
