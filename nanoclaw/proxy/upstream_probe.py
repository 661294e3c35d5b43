"""Does a model upstream answer: one request of one token with its credential (`upstream test`,
`doctor`). Host-side and synchronous; the answer says what to fix, never a secret."""
from __future__ import annotations

import json

import requests

from ..usage import prices
from .model_api import CONNECT_TIMEOUT_S, _short, make_session
from .upstream_book import UpstreamBook

PROBE_TIMEOUT_S = 60  # a local model server may load the model first


def probe(settings, name: str, model: str) -> tuple[bool, str]:
    book = UpstreamBook(settings, prices.load(settings.prices_file), make_session)
    try:
        target = book.target(name)
        if target is None:
            return False, f"no model upstream {name!r}"
        upstream = book.upstreams().get(name)
        if upstream is not None and upstream.secret and not book.secrets(upstream.secret):
            return False, f"${upstream.secret} is not set in the environment or .env"
        body = json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "Say ok."}]})
        headers = {"content-type": "application/json", "anthropic-version": "2023-06-01", **target.credential}
        try:
            resp = book.session(target.url).post(f"{target.url}/v1/messages", data=body, headers=headers,
                                                 timeout=(CONNECT_TIMEOUT_S, PROBE_TIMEOUT_S))
        except requests.RequestException as exc:
            return False, f"{target.url} is unreachable: {_short(exc)}"
        if resp.status_code == 200:
            try:
                answered = resp.json().get("model") or model
            except ValueError:
                answered = model
            return True, f"{model} answers (as {answered})"
        try:
            why = resp.json().get("error", {}).get("message", "")
        except (ValueError, AttributeError):
            why = resp.text[:200]
        if resp.status_code in (401, 403):
            return False, f"the credential was refused ({resp.status_code}): check the key in ${upstream.secret}" \
                if upstream is not None and upstream.secret else f"the credential was refused ({resp.status_code})"
        if resp.status_code == 404:
            return False, f"{model} was not found there ({why[:150]}); check the model's name on that upstream"
        return False, f"answered {resp.status_code}: {why[:200]}"
    finally:
        book.close()
