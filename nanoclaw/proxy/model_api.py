"""The model route: forward /v1/* to the agent's model upstream with the host's credential, stream back.

Which models an agent may name and where each goes is its chain (upstreams/chains.py: its model,
then its fallbacks, each on a named upstream); without one, any model goes to the default upstream
as before. A call that names a model outside the chain is refused with the allowed ones. When an
upstream fails a call before any byte of the answer went back (429, 529, 5xx, unreachable, or a
stream whose first event is an error), the next link of the chain gets the same request with its
`model` rewritten, within one deadline (upstreams/failover.py); the sandbox sees one answer.

One pooled requests.Session per upstream, so a warm call reuses its connection (no new TCP/TLS
handshake). The body is relayed with read1(): each piece is passed on as soon as the upstream sends
it, so SSE events are never held back (a chain's first event only, to see whether it is an error).
"""
from __future__ import annotations

import json
import logging
import os
import time

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from .. import metrics
from ..upstreams import failover
from ..upstreams.chains import AgentModel, Link
from ..usage import estimate, prices
from ..usage.budgets import BUDGET_STATUS
from ..usage.meter import Meter
from . import model_body, model_paths
from .model_features import FeatureBook
from .policy_files import policy_root
from .door import Reply, Request
from .headers import downstream_response_headers, error_body, upstream_request_headers
from .outages import Outages
from .spending import RETRY_AFTER_S, Busy, Spending
from .upstream_book import UpstreamBook

log = logging.getLogger("nanoclaw.proxy")

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 600  # the longest silence we accept mid-stream (Anthropic pings far more often)
RELAY_PIECE = 64 * 1024
MAX_ERROR_BODY = 64 * 1024  # what is kept of a failed link's answer (to give the primary's back)


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


def with_model(body: bytes, model: str) -> bytes:
    """The request with its top-level `model` replaced (nothing else of it changes)."""
    data = json.loads(body)
    data["model"] = model
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def models_list(choice: AgentModel) -> dict:
    """GET /v1/models for an agent with a chain: its own models, in the Models API's shape."""
    data = [{"type": "model", "id": m, "display_name": m, "created_at": "2026-01-01T00:00:00Z"}
            for m in choice.models()]
    return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}


class ModelApi:
    def __init__(self, settings, spending: Spending | None = None, secrets=None):
        self.data_dir = settings.data_dir  # for the time-to-first-request marks (metrics.mark_awaiting)
        table = spending.table if spending is not None else prices.load(settings.prices_file)
        self.book = UpstreamBook(settings, table, make_session, secrets)
        self.upstream = self.book.default_url
        self.credential = self.book.default_credential
        self.spending = spending  # usage and budgets (spending.py); None: not counted
        self.breaker = failover.Breaker()
        self.outages = Outages(settings.data_dir) if spending is not None else None
        self._free_logged: set[str] = set()
        self.features = FeatureBook(policy_root(settings))

    @classmethod
    def from_settings(cls, settings) -> "ModelApi":
        return cls(settings, Spending(settings))

    def close(self) -> None:
        self.book.close()

    def __call__(self, request: Request, reply: Reply) -> int:
        arrived = time.time()
        found = model_paths.endpoint(request.method, request.path)
        if isinstance(found, model_paths.Refused):  # never forwarded: not a model endpoint, or not plainly one
            kind = "not_found_error" if found.status == 404 else "invalid_request_error"
            return reply.error(found.status, found.message, kind)
        choice = self.book.choice(request.folder)
        if found.kind == model_paths.MODELS and choice is not None:
            return self._models(found, choice, reply)
        if request.method == "POST":  # what the provider would fetch or run past the allowlist and the budget
            why = model_body.refusal(request.body, self.features.allowed(request.folder), request.folder)
            if why is not None:
                log.warning("refused a model request of %s: %s", request.folder, why.split(":")[0])
                return reply.error(400, why, "invalid_request_error")
        head = estimate.head_of(request.body) if request.method == "POST" else estimate.Head()
        free = self.book.free_upstreams()
        ticket, spent = None, False
        if found.billed and self.spending is not None:
            first = failover.candidates(choice, head.model, free=free, budget_spent=False, open_upstreams=set())
            if isinstance(first, failover.Refused):
                return reply.error(first.status, first.message, "invalid_request_error")
            price = self.book.reservation_price(choice, first)
            has_free = choice is not None and any(link.upstream in free for link in choice.chain)
            if not price.rates:
                ticket = self.spending.free_ticket(request, head)
            else:
                ticket = self.spending.admit(request, head, price, wait=not has_free, tell=not has_free)
                if isinstance(ticket, Busy):  # two of its calls under way for a minute: the CLI retries a 429
                    reply.simple(429, error_body(ticket, "rate_limit_error"), "application/json",
                                 headers={"retry-after": str(RETRY_AFTER_S)})
                    return 429
                if isinstance(ticket, str):
                    if not has_free:  # before the call leaves the machine; the CLI does not retry a 402
                        log.warning("refused a model call of %s: its budget is spent", request.folder)
                        return reply.error(BUDGET_STATUS, ticket, kind="invalid_request_error")
                    spent, ticket = True, self.spending.free_ticket(request, head)
                    metrics.MODEL_FREE_INSTEAD.labels(request.folder).inc()
                    if request.folder not in self._free_logged:
                        self._free_logged.add(request.folder)
                        log.warning("the budget of %s is spent: its calls go to the free models of its chain",
                                    request.folder)
                else:
                    self._free_logged.discard(request.folder)
        links = failover.candidates(choice, head.model, free=free, budget_spent=spent,
                                    open_upstreams=self.breaker.open_upstreams())
        if isinstance(links, failover.Refused):
            return reply.error(links.status, links.message, "invalid_request_error")
        try:
            return self._try(request, reply, found, head, links, ticket)
        finally:  # the router's mark is a file to read and remove: after the call, off the answer's path
            if found.billed and self.data_dir is not None:
                metrics.observe_first_request(self.data_dir, request.folder, arrived)

    def _models(self, found, choice: AgentModel, reply: Reply) -> int:
        listing = models_list(choice)
        if found.path == "/v1/models":
            body, status = listing, 200
        else:
            wanted = found.path.rsplit("/", 1)[1]
            body = next((m for m in listing["data"] if m["id"] == wanted), None)
            status = 200 if body else 404
            body = body or json.loads(error_body(f"model {wanted!r} is not one of this agent's", "not_found_error"))
        reply.simple(status, json.dumps(body).encode(), "application/json")
        return status

    def _try(self, request: Request, reply: Reply, found, head: estimate.Head, links: list[Link], ticket) -> int:
        """Each link in turn until one answers (or the chain is done); the answer relayed."""
        deadline = time.monotonic() + failover.FAILOVER_DEADLINE_S
        primary: tuple[int, bytes] | None = None   # the first link's failure: what the sandbox gets if all fail
        chain = len(links) > 1
        status, meter, answered = 0, None, None
        try:
            for i, link in enumerate(links):
                target = self.book.target(link.upstream)
                left = deadline - time.monotonic()
                if target is None or left <= 0:
                    continue
                body = request.body
                if head.model and link.model != head.model:
                    body = with_model(body, link.model)
                url = target.url + found.path + (f"?{request.query}" if request.query else "")
                headers = upstream_request_headers(request.headers, target.credential, oauth=target.default)
                # the meter reads the answer as it passes: ask for it uncompressed (a compressing upstream that
                # ignores this is decoded on the side, and an encoding nobody can read is charged the estimate)
                headers["accept-encoding"] = "identity"
                started = time.monotonic()
                try:
                    resp = self.book.session(target.url).request(
                        request.method, url,
                        data=body if body or request.method not in ("GET", "HEAD") else None,
                        headers=headers, stream=True, allow_redirects=False,
                        timeout=(min(CONNECT_TIMEOUT_S, max(left, 1)), max(left, 1) if chain else READ_TIMEOUT_S))
                except requests.RequestException as exc:
                    metrics.MODEL_REQUESTS.labels("unreachable").inc()
                    self.breaker.failure(link.upstream)
                    message = f"nanoclaw proxy: model API upstream {link.upstream} unreachable: {_short(exc)}"
                    primary = primary or (502, error_body(message))
                    if chain:
                        self._switch(request, link, links, i)
                    continue
                status = resp.status_code
                metrics.MODEL_REQUEST_SECONDS.observe(time.monotonic() - started)
                metrics.MODEL_REQUESTS.labels(metrics.status_class(status)).inc()
                streamed = "text/event-stream" in resp.headers.get("content-type", "")
                meter = Meter(resp.headers.get("content-type", ""), resp.headers.get("content-encoding", "")) \
                    if status == 200 and (ticket is not None or (chain and streamed)) else None
                held: list[bytes] = []
                if chain and status == 200 and streamed:
                    held = _first_event(resp, meter)  # held back until the stream says it is not an error
                if chain and (failover.failed(status) or meter is not None and meter.first == "error"):
                    self.breaker.failure(link.upstream)
                    if primary is None:
                        primary = (status, resp.raw.read(MAX_ERROR_BODY, decode_content=True)) \
                            if failover.failed(status) else \
                            (529, error_body(f"model upstream {link.upstream}: the answer began with an error",
                                             meter.error or "overloaded_error"))
                    resp.close()
                    meter = None
                    self._switch(request, link, links, i)
                    continue
                if status < 500 and status != 429:
                    self.breaker.success(link.upstream)
                answered = (link, i, target)
                try:
                    return relay(request, resp, reply, meter, held)
                finally:
                    resp.close()
            status = self._chain_failed(request, reply, links, primary)
            return status
        finally:
            if ticket is not None:
                link, i, target = answered or (links[0] if links else Link("anthropic", head.model or ""), 0, None)
                self.spending.done(request, ticket, status if answered else 0, meter, upstream=link.upstream,
                                   asked=link.model, switched=i > 0,
                                   table=target.table if target is not None else None)
            if self.outages is not None and answered is not None and status == 200:
                self.outages.ended(request.folder)

    def _switch(self, request: Request, link: Link, links: list[Link], i: int) -> None:
        following = links[i + 1].upstream if i + 1 < len(links) else "none"
        metrics.MODEL_FAILOVERS.labels(request.folder, link.upstream, following).inc()
        if i + 1 < len(links):
            log.warning("%s: %s (%s) failed a call before answering; trying %s (%s)", request.folder, link.upstream,
                        link.model, links[i + 1].upstream, links[i + 1].model)

    def _chain_failed(self, request: Request, reply: Reply, links: list[Link], primary) -> int:
        """Every link failed: the primary's answer, with a retry-after the CLI's own retries wait for."""
        status, body = primary or (502, error_body("nanoclaw proxy: no model upstream of this agent is usable"))
        wait = max(failover.BREAKER_OPEN_S, max((self.breaker.open_for(link.upstream) for link in links), default=0))
        log.error("%s: every model of its chain failed (%s); answered %d, retry after %.0f s", request.folder,
                  ", ".join(link.describe() for link in links), status, wait)
        if self.outages is not None and links:
            self.outages.started(request.folder, links[0].upstream, status, _gist(body))
        reply.simple(status, body, "application/json", headers={"retry-after": str(int(wait))})
        return status


def _gist(body: bytes) -> str:
    try:
        return str(json.loads(body).get("error", {}).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace")


def _first_event(resp: requests.Response, meter: Meter) -> list[bytes]:
    """Read the stream until its first event is known (the meter decodes what it must); the pieces read."""
    pieces = []
    while meter.first is None and not meter.unreadable:
        piece = resp.raw.read1(RELAY_PIECE, decode_content=False)
        if not piece:
            break
        pieces.append(piece)
        meter.feed(piece)
    return pieces


def relay(request: Request, resp: requests.Response, reply: Reply, meter: Meter | None = None,
          held: list[bytes] = ()) -> int:
    """Pass an upstream response on piece by piece (credential routes use it too); `meter` sees each
    piece after it went out. `held`: pieces read already (and metered), sent first."""
    status = resp.status_code
    has_body = request.method != "HEAD" and status not in (204, 304) and status >= 200
    reply.start(status, downstream_response_headers(resp.raw.headers.items()), has_body=has_body)
    if not has_body:
        return status
    raw = resp.raw
    try:
        for piece in held:
            reply.write(piece)
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
