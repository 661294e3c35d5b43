"""Pure header decisions for the model route: what goes upstream, what comes back.

No I/O here, so the rules that keep the host's key in and the agent's
placeholder out can be tested directly.
"""
from __future__ import annotations

import json
from collections.abc import Iterable

# RFC 9110 §7.6.1 connection-specific headers, plus the ones we recompute.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "transfer-encoding", "upgrade",
})
# The caller's credentials: whatever the agent sends here is a placeholder at best.
CALLER_AUTH = frozenset({"x-api-key", "authorization"})
# Recomputed by the HTTP client for the upstream hop; ours (the session a call is for) goes no further.
RECOMPUTED = frozenset({"host", "content-length", "x-nanoclaw-session"})

OAUTH_BETA = "oauth-2025-04-20"  # Claude Code sends this beta with a subscription (OAuth) token


def credential_headers(api_key: str | None, oauth_token: str | None) -> dict[str, str]:
    """The auth the host adds. An API key wins over an OAuth token, as in Claude Code."""
    if api_key:
        return {"x-api-key": api_key}
    if oauth_token:
        return {"authorization": f"Bearer {oauth_token}"}
    return {}


def _connection_tokens(items: list[tuple[str, str]]) -> set[str]:
    """Headers the sender listed in `Connection:` are hop-by-hop too."""
    tokens: set[str] = set()
    for name, value in items:
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def _merge_beta(values: list[str], extra: str) -> str:
    betas = [b.strip() for v in values for b in v.split(",") if b.strip()]
    if extra not in betas:
        betas.append(extra)
    return ",".join(betas)


def upstream_request_headers(incoming: Iterable[tuple[str, str]], credential: dict[str, str], *,
                             oauth: bool = True) -> dict[str, str]:
    """The caller's headers minus its auth and hop-by-hop headers, plus the host's credential (a bearer
    credential on the default upstream is Claude's OAuth token: its beta is added; oauth=False for
    another upstream's bearer key)."""
    items = list(incoming)
    drop = HOP_BY_HOP | CALLER_AUTH | RECOMPUTED | _connection_tokens(items)
    out: dict[str, str] = {}
    betas: list[str] = []
    for name, value in items:
        low = name.lower()
        if low in drop:
            continue
        if low == "anthropic-beta":
            betas.append(value)
            continue
        out[low] = f"{out[low]}, {value}" if low in out else value
    if "authorization" in credential and oauth:
        betas_value = _merge_beta(betas, OAUTH_BETA)
    else:
        betas_value = ",".join(betas)
    if betas_value:
        out["anthropic-beta"] = betas_value
    out.update(credential)
    return out


def downstream_response_headers(upstream: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Upstream response headers safe to relay; framing is decided by the relay itself."""
    items = list(upstream)
    drop = HOP_BY_HOP | _connection_tokens(items)
    return [(n, v) for n, v in items if n.lower() not in drop]


def error_body(message: str, kind: str = "api_error") -> bytes:
    """An error in the Messages API's own shape, so the SDK shows it as it would Anthropic's."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
