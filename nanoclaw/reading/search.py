"""Web search through the provider the owner chose, each through its documented HTTP API. Worker side.

- SearXNG (self-hosted, no key): GET {url}/search?q=…&format=json. An instance answers 403 when its
  settings do not list `json` among `search.formats`; `number_of_results` is often 0 beside results,
  and a result may have no `content`.
- Brave: GET {url}/res/v1/web/search?q=…&count=N with `X-Subscription-Token` (BRAVE_API_KEY); the
  results are in `web.results` (the `web` key is absent when nothing was found), their descriptions
  carry <strong> highlights; errors are {"type": "ErrorResponse", "error": {"detail", "code", …}}.
- Tavily: POST {url}/search, `Authorization: Bearer` (TAVILY_API_KEY), {"query", "max_results"};
  results carry `content` and `score`; errors {"detail": {"error": …}}.
The key is read here, on the host, by its name; it never enters a sandbox or a log. What comes back
is the provider's words about other people's pages: the op puts it in the envelope.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass

from ..internet.envelope import neutralise

DEFAULT_URLS = {"brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}
KEYS = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
TIMEOUT = (10, 20)  # connect, read
_TAGS = re.compile(r"<[^>]{0,200}>")


class SearchFailed(RuntimeError):
    """The search could not be made; the text is for the agent."""


@dataclass(frozen=True)
class Result:
    title: str
    url: str
    snippet: str


def _plain(text) -> str:
    return " ".join(html.unescape(_TAGS.sub("", str(text or ""))).split())


def _error_text(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        detail = body.get("error") or body.get("detail") or body
        if isinstance(detail, dict):
            detail = detail.get("detail") or detail.get("error") or detail.get("message") or detail
        return str(detail)[:200]
    return str(body)[:200]


def search(provider: str, base_url: str | None, key: str | None, query: str, count: int) -> list[Result]:
    import requests
    url = (base_url or DEFAULT_URLS.get(provider) or "").rstrip("/")
    if not url:
        raise SearchFailed(f"{provider} needs NANOCLAW_SEARCH_URL (the instance's address)")
    if provider in KEYS and not key:
        raise SearchFailed(f"{provider} needs its key in {KEYS[provider]}; the owner has not set it")
    headers = {"Accept": "application/json", "User-Agent": "NanoClaw-web-search/1"}
    try:
        if provider == "searxng":
            response = requests.get(f"{url}/search", params={"q": query, "format": "json"}, headers=headers,
                                    timeout=TIMEOUT)
        elif provider == "brave":
            response = requests.get(f"{url}/res/v1/web/search", params={"q": query, "count": count},
                                    headers={**headers, "X-Subscription-Token": key}, timeout=TIMEOUT)
        elif provider == "tavily":
            response = requests.post(f"{url}/search", json={"query": query, "max_results": count},
                                     headers={**headers, "Authorization": f"Bearer {key}"}, timeout=TIMEOUT)
        else:
            raise SearchFailed(f"no search provider {provider!r}")
    except requests.RequestException as exc:
        raise SearchFailed(f"the search provider could not be reached ({type(exc).__name__})") from None
    if response.status_code == 403 and provider == "searxng":
        raise SearchFailed("the SearXNG instance refuses JSON: add json to search.formats in its settings.yml")
    if response.status_code == 429:
        raise SearchFailed("the search provider says too many searches for now; try again later")
    if response.status_code >= 400:  # the owner's provider says why (a bad key): its words, cut and neutralised
        raise SearchFailed(f"the search provider answered {response.status_code}: {neutralise(_error_text(response))}")
    try:
        body = response.json()
    except ValueError:
        raise SearchFailed("the search provider's answer was not JSON") from None
    if not isinstance(body, dict):
        raise SearchFailed("the search provider's answer had no results")
    web = body.get("web") if provider == "brave" else body
    items = web.get("results") if isinstance(web, dict) else None
    snippet = "description" if provider == "brave" else "content"
    found = [Result(_plain(i.get("title")), str(i.get("url") or ""), _plain(i.get(snippet)))
             for i in (items if isinstance(items, list) else []) if isinstance(i, dict)]
    return [r for r in found if r.url.startswith(("http://", "https://"))][:count]


def render(results: list[Result]) -> str:
    if not results:
        return "No results."
    return "\n\n".join(f"{n}. {r.title or '(no title)'}\n   {r.url}\n   {r.snippet[:400]}" for n, r in enumerate(results, 1))
