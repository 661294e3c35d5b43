"""web_search end to end (issue 62): the real SDK and its CLI in a real sandbox ask the host to search;
the host's worker asks the owner's provider (fakes of SearXNG, Brave and Tavily from their API
documentation) with the key it reads by name, and answers in the envelope. Each search is priced into
the agent's spend; one that would take it over its budget is refused in plain words, with nothing
asked of the provider. The key never reaches the model or the sandbox."""
from __future__ import annotations

import re

import pytest

from nanoclaw.db import database
from nanoclaw.reading.tables import WebFetch
from tests.fakes.model_api import Reply
from tests.fakes.search_api import BRAVE_KEY, TAVILY_KEY, FakeSearch
from tests.tg_flow import message, person, sandbox_service, texts

OWNER = person(111, "Olivia")
KEYS = {"searxng": {}, "brave": {"BRAVE_API_KEY": BRAVE_KEY}, "tavily": {"TAVILY_API_KEY": TAVILY_KEY}}


def brain(req):
    prompt, done = req.current_prompt(), req.turn_tool_results()
    match = re.search(r"please search ([^<]+?)(?:<|$)", prompt)
    if match:
        if not done:
            return Reply.call("mcp__nanoclaw__web_search", query=match.group(1).strip(), count=5)
        return Reply.say("Found: " + done[-1].text[:3000])
    return Reply.say("ok")


def found(svc, words: str) -> str:
    return svc.wait(lambda: next((t for t in texts(svc.tg, 111) if t.startswith("Found:") and words in t), None),
                    timeout=120, what=f"the search for {words}")


@pytest.mark.parametrize("provider", ["searxng", "brave", "tavily"])
def test_the_agent_searches_through_the_owners_provider_within_its_budget(make_settings, sqlite_url, monkeypatch,
                                                                           provider):
    for name, value in KEYS[provider].items():
        monkeypatch.setenv(name, value)  # where the owner's .env puts it: read by the host's worker by name
    with FakeSearch() as search:
        search.results = [("Green tea - Wikipedia", "https://en.wikipedia.org/wiki/Green_tea",
                           "Green tea is a type of tea made from unoxidised leaves"),
                          ("A trap", "javascript:alert(1)", "not a web address")]
        with sandbox_service(make_settings, sqlite_url, brain, NANOCLAW_SEARCH=provider, NANOCLAW_SEARCH_URL=search.url,
                             NANOCLAW_SEARCH_PRICE="0.01") as svc:
            for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                         ("wire", "telegram", "111", "andy"), ("budget", "set", "andy", "--daily", "0.015")):
                svc.cli(*args)
            svc.post(message(111, OWNER, "please search green tea"))
            said = found(svc, "green tea")
            assert "https://en.wikipedia.org/wiki/Green_tea" in said and "unoxidised leaves" in said
            assert "javascript:" not in said and re.search(r"<<<UNTRUSTED DATA [0-9a-f]{8}: search results from", said)
            assert len(search.requests) == 1

            svc.post(message(111, OWNER, "please search oolong"))
            refused = found(svc, "budget")
            assert "Error:" in refused and "over its budget" in refused and "nothing was charged" in refused
            assert len(search.requests) == 1  # the provider was not asked

            with database.connection_context():
                row = database.execute_sql("SELECT SUM(cost_micro_usd), SUM(calls) FROM model_usage "
                                           "WHERE upstream = 'search'").fetchone()
                outcomes = [f.outcome for f in WebFetch.select().where(WebFetch.tool == "web_search")
                            .order_by(WebFetch.id)]
            assert tuple(row) == (10_000, 1)  # one search at $0.01 in the agent's spend
            assert outcomes == ["searched: 1 result(s)", "budget spent"]
            for key in KEYS[provider].values():
                assert not any(key in call.all_text() or key in str(call.headers) for call in svc.model.model_calls())
