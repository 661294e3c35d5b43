"""The model route: forward /v1/* to the upstream with the host's credential, stream back.

One pooled requests.Session for all groups, so a warm call reuses its upstream
connection (no new TCP/TLS handshake). The body is relayed with read1(): each
piece is passed on as soon as the upstream sends it, so SSE events are never
held back waiting for a buffer to fill.
"""
from __future__ import annotations

import logging
import os
import time

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from .. import metrics
from ..usage import estimate
from ..usage.budgets import BUDGET_STATUS
from ..usage.meter import Meter
from . import model_paths
from .door import Reply, Request
from .headers import credential_headers, downstream_response_headers, upstream_request_headers
from .spending import Spending

log = logging.getLogger("nanoclaw.proxy")

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 600  # the longest silence we accept mid-stream (Anthropic pings far more often)
RELAY_PIECE = 64 * 1024


def _short(exc: Exception) -> str:
    """The gist of a connection error, without the urllib3 object reprs."""
    text = str(exc)
    for marker in ("Failed to establish a new connection: ", "Caused by "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip(" ()'\"")[:200] or type(exc).__name__


def make_session(upstream_url: str) -> requests.Session:
    session = requests.Session()
    # No netrc, no env proxies picked up per request: the headers we build are all that goes out.
    session.trust_env = False
    session.headers.clear()
    session.proxies = requests.utils.get_environ_proxies(upstream_url)
    session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE") or True
    # One retry covers a pooled connection the upstream closed while idle; the request
    # never reached the model in that case (or produced no response headers).
    retry = Retry(total=1, connect=1, read=1, status=0, redirect=0, other=0,
                  allowed_methods=None, raise_on_status=False)
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


class ModelApi:
    def __init__(self, upstream_url: str, api_key: str | None, oauth_token: str | None, data_dir=None,
                 spending: Spending | None = None):
        self.upstream = upstream_url.rstrip("/")
        self.data_dir = data_dir  # for the time-to-first-request marks (metrics.mark_awaiting)
        self.credential = credential_headers(api_key, oauth_token)
        self.session = make_session(self.upstream)
        self.spending = spending  # usage and budgets (spending.py); None: not counted

    @classmethod
    def from_settings(cls, settings) -> "ModelApi":
        return cls(settings.anthropic_upstream_url, settings.anthropic_api_key, settings.claude_code_oauth_token,
                   settings.data_dir, Spending(settings))

    def close(self) -> None:
        self.session.close()

    def __call__(self, request: Request, reply: Reply) -> int:
        found = model_paths.endpoint(request.method, request.path)
        if isinstance(found, model_paths.Refused):  # never forwarded: not a model endpoint, or not plainly one
            kind = "not_found_error" if found.status == 404 else "invalid_request_error"
            return reply.error(found.status, found.message, kind)
        url = self.upstream + found.path + (f"?{request.query}" if request.query else "")
        headers = upstream_request_headers(request.headers, self.credential)
        # the meter reads the answer as it passes: ask for it uncompressed (a compressing upstream that
        # ignores this is decoded on the side, and an encoding nobody can read is charged the estimate)
        headers["accept-encoding"] = "identity"
        ticket = None
        if found.billed and self.spending is not None:
            ticket = self.spending.admit(request, estimate.head_of(request.body))
            if isinstance(ticket, str):  # before the call leaves the machine; the CLI does not retry a 402
                log.warning("refused a model call of %s: its budget is spent", request.folder)
                return reply.error(BUDGET_STATUS, ticket, kind="invalid_request_error")
        status, meter = 0, None
        try:
            if self.data_dir is not None and found.billed:
                metrics.observe_first_request(self.data_dir, request.folder)
            started = time.monotonic()
            try:
                resp = self.session.request(
                    request.method, url,
                    data=request.body if request.body or request.method not in ("GET", "HEAD") else None,
                    headers=headers, stream=True, allow_redirects=False,
                    timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
            except requests.RequestException as exc:
                metrics.MODEL_REQUESTS.labels("unreachable").inc()
                return reply.error(502, f"nanoclaw proxy: model API upstream unreachable: {_short(exc)}")
            status = resp.status_code
            metrics.MODEL_REQUEST_SECONDS.observe(time.monotonic() - started)
            metrics.MODEL_REQUESTS.labels(metrics.status_class(status)).inc()
            if ticket is not None and status == 200:
                meter = Meter(resp.headers.get("content-type", ""), resp.headers.get("content-encoding", ""))
            try:
                return relay(request, resp, reply, meter)
            finally:
                resp.close()
        finally:
            if ticket is not None:
                self.spending.done(request, ticket, status, meter)  # the caller has had every byte by now


def relay(request: Request, resp: requests.Response, reply: Reply, meter: Meter | None = None) -> int:
    """Pass an upstream response on piece by piece (credential routes use it too); `meter` sees each
    piece after it went out."""
    status = resp.status_code
    has_body = request.method != "HEAD" and status not in (204, 304) and status >= 200
    reply.start(status, downstream_response_headers(resp.raw.headers.items()), has_body=has_body)
    if not has_body:
        return status
    raw = resp.raw
    try:
        while True:
            piece = raw.read1(RELAY_PIECE, decode_content=False)
            if not piece:
                break
            reply.write(piece)
            if meter is not None:
                meter.feed(piece)
    except (BrokenPipeError, ConnectionResetError):
        raise  # the caller left; the door logs it and drops the connection
    except Exception:  # upstream broke off mid-body: headers are out, so cut the stream
        reply.abort()
        return status
    reply.finish()
    raw.release_conn()  # fully read: the connection goes back to the pool
    return status
