"""Web search through each provider's documented API (nanoclaw/reading/search.py), against fakes of
SearXNG, Brave and Tavily written from their documentation (tests/fakes/search_api.py)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanoclaw.reading.search import SearchFailed, render, search
from tests.fakes.search_api import BRAVE_KEY, TAVILY_KEY, FakeSearch

RESULTS = [("Green tea - Wikipedia", "https://en.wikipedia.org/wiki/Green_tea", "Green tea is a type of tea made from leaves"),
           ("No snippet here", "https://example.org/bare", ""),
           ("A trap", "javascript:alert(1)", "not a web address")]
KEYS = {"searxng": None, "brave": BRAVE_KEY, "tavily": TAVILY_KEY}


@pytest.fixture
def fake():
    with FakeSearch() as f:
        f.results = list(RESULTS)
        yield f


@pytest.mark.parametrize("provider", ["searxng", "brave", "tavily"])
def test_each_provider_gives_titles_urls_and_plain_snippets(fake, provider):
    found = search(provider, fake.url, KEYS[provider], "green tea", 5)
    assert [r.url for r in found] == ["https://en.wikipedia.org/wiki/Green_tea", "https://example.org/bare"]
    assert found[0].snippet == "Green tea is a type of tea made from leaves"  # Brave's <strong> highlights gone
    assert found[1].snippet == ""  # SearXNG leaves content out for some engines
    sent = fake.requests[-1]
    if provider == "brave":
        assert sent["query"] == {"q": "green tea", "count": "5"} and sent["headers"]["X-Subscription-Token"] == BRAVE_KEY
    elif provider == "tavily":
        assert sent["body"] == {"query": "green tea", "max_results": 5}
    else:
        assert sent["query"] == {"q": "green tea", "format": "json"}
    assert "1. Green tea - Wikipedia" in render(found)


def test_what_goes_wrong_is_said_plainly(fake):
    fake.json_enabled = False
    with pytest.raises(SearchFailed, match="json to search.formats"):
        search("searxng", fake.url, None, "tea", 5)
    with pytest.raises(SearchFailed, match="422.*subscription token is invalid"):
        search("brave", fake.url, "wrong", "tea", 5)
    with pytest.raises(SearchFailed, match="401.*invalid API key"):
        search("tavily", fake.url, "wrong", "tea", 5)
    with pytest.raises(SearchFailed, match="TAVILY_API_KEY"):
        search("tavily", fake.url, None, "tea", 5)
    with pytest.raises(SearchFailed, match="NANOCLAW_SEARCH_URL"):
        search("searxng", None, None, "tea", 5)
    with pytest.raises(SearchFailed, match="could not be reached"):
        search("searxng", "http://127.0.0.1:9", None, "tea", 5)


class Whatever(BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"{}")

    def _reply(self):
        status, body = Whatever.answer
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def anything():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Whatever)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                          max_leaves=10)
shaped = st.fixed_dictionaries({}, optional={"results": json_value, "web": st.fixed_dictionaries({}, optional={
    "results": st.lists(st.dictionaries(st.sampled_from(["title", "url", "description", "content"]), json_value), max_size=3)
    | json_value})})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(provider=st.sampled_from(["searxng", "brave", "tavily"]), status=st.sampled_from([200, 200, 400, 500, 503]),
       body=shaped | json_value, raw=st.none() | st.binary(max_size=40))
def test_any_answer_is_results_or_a_plain_refusal_never_a_crash(anything, provider, status, body, raw):
    Whatever.answer = (status, raw if raw is not None else json.dumps(body).encode())
    try:
        found = search(provider, anything, "k", "tea", 5)
    except SearchFailed as exc:
        assert str(exc)
        return
    assert all(r.url.startswith(("http://", "https://")) for r in found) and len(found) <= 5
