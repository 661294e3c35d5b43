"""Credential routes: the proxy adds a token the sandbox never sees.

A route is keyed by a path prefix on the proxy (`/github/` -> the agent calls
`$NANOCLAW_PROXY_URL/github/user`) or by a host name (the agent calls `http://api.github.com/user`
through `http_proxy`; the proxy goes on over HTTPS). Either way the request is forwarded to the
route's https upstream with the caller's own credentials dropped and the header
`<header>: <format with {token}>` added, the token read from a host environment variable (the
process environment, then the project's .env) at the moment of the request. The file names the
variable, never its value.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import requests

from .door import Reply, Request
from .host_secrets import HostSecrets
from .headers import CALLER_AUTH, HOP_BY_HOP, RECOMPUTED, _connection_tokens
from .model_api import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, _short, make_session, relay
from .policy import CredentialRoute

def forward_headers(incoming: Iterable[tuple[str, str]], route: CredentialRoute, token: str) -> dict[str, str]:
    """The caller's headers minus hop-by-hop and any credential it sent, plus the route's token."""
    items = list(incoming)
    drop = HOP_BY_HOP | CALLER_AUTH | RECOMPUTED | _connection_tokens(items) | {route.header.lower()}
    out: dict[str, str] = {}
    for name, value in items:
        low = name.lower()
        if low not in drop:
            out[low] = f"{out[low]}, {value}" if low in out else value
    out[route.header] = route.format.replace("{token}", token)
    return out


def upstream_url(route: CredentialRoute, request: Request) -> str:
    rest = request.path[len(route.match):] if route.by_path else request.path.lstrip("/")
    return f"{route.upstream}/{rest}" + (f"?{request.query}" if request.query else "")


class CredentialRelay:
    """Forwards requests that a credential route matches; one pooled session per upstream."""

    def __init__(self, secrets: Callable[[str], str | None] | None = None):
        self.secrets = secrets or HostSecrets()
        self._sessions: dict[str, requests.Session] = {}
        self._lock = threading.Lock()

    def _session(self, upstream: str) -> requests.Session:
        with self._lock:
            if upstream not in self._sessions:
                self._sessions[upstream] = make_session(upstream)
            return self._sessions[upstream]

    def close(self) -> None:
        with self._lock:
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()

    def route(self, route: CredentialRoute) -> Callable[[Request, Reply], int]:
        return lambda request, reply: self.forward(route, request, reply)

    def forward(self, route: CredentialRoute, request: Request, reply: Reply) -> int:
        token = self.secrets(route.secret)
        if not token:
            return reply.error(503, f"nanoclaw proxy: the credential route {route.match} has no token: the host "
                                    f"environment variable {route.secret} is not set (ask the owner)")
        try:
            resp = self._session(route.upstream).request(
                request.method, upstream_url(route, request), headers=forward_headers(request.headers, route, token),
                data=request.body if request.body or request.method not in ("GET", "HEAD") else None,
                stream=True, allow_redirects=False, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        except requests.RequestException as exc:
            return reply.error(502, f"nanoclaw proxy: {route.upstream} unreachable: {_short(exc)}")
        try:
            return relay(request, resp, reply)
        finally:
            resp.close()
