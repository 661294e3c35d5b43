"""What a model request may ask the provider to do beyond answering: the door's check of each body (pure).

A small body can make the provider fetch and bill far more than the door reserves for it: a content
block whose source is a URL (the provider fetches any URL the agent names, a `?d=SECRET` included, past
the egress allowlist) or a file of the provider's, server tools (web search, web fetch, code execution),
`mcp_servers`, `container`. The check reads the body with an *open* shape (msgspec): it names only what
it refuses and lets every other field pass unchanged, so the next CLI's new fields are not refused.
The owner may allow a feature for one agent (`model feature allow FOLDER FEATURE`; features.json in the
agent's policy folder). A refusal is a clear 400 naming the feature and the command.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import msgspec

FEATURES = ("url-source", "file-source", "web_search", "web_fetch", "code_execution", "mcp_servers", "container")
_SOURCES = {"url": "url-source", "file": "file-source"}
_SERVER_TOOLS = {"web_search": "web_search", "web_fetch": "web_fetch", "code_execution": "code_execution"}


class Source(msgspec.Struct):
    type: Optional[str] = None


class Block(msgspec.Struct):
    type: Optional[str] = None
    source: Optional[Source] = None
    content: Union[str, list["Block"], None] = None   # tool_result and search_result blocks nest blocks


class Message(msgspec.Struct):
    content: Union[str, list[Block], None] = None


class Tool(msgspec.Struct):
    type: Optional[str] = None


class Body(msgspec.Struct):
    messages: Optional[list[Message]] = None
    system: Union[str, list[Block], None] = None
    tools: Optional[list[Tool]] = None
    mcp_servers: Any = None
    container: Any = None


def _blocks(blocks) -> list[Block]:
    """Every block at any depth (a tool result's content, inside it)."""
    out, todo = [], list(blocks) if isinstance(blocks, list) else []
    while todo:
        block = todo.pop()
        if isinstance(block, Block):
            out.append(block)
            if isinstance(block.content, list):
                todo.extend(block.content)
    return out


def tool_feature(kind: str) -> str:
    """The feature a typed tool needs: web_search_20250305 -> web_search; a client tool of the provider's
    (bash_…, text_editor_…, computer_…) is its own name, which no owner can allow here."""
    base = kind.rsplit("_", 1)[0] if kind.rsplit("_", 1)[-1].isdigit() else kind
    return _SERVER_TOOLS.get(base, base)


def features_used(body: bytes) -> list[str]:
    """The features this body asks for, in a stable order; ["unreadable"] when it is not a JSON object of
    the Messages API's outline (answered 400 either way: the provider would refuse it too)."""
    try:
        parsed = msgspec.json.decode(body, type=Body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ["unreadable"]
    used: set[str] = set()
    messages = parsed.messages if isinstance(parsed.messages, list) else []
    for block in _blocks(parsed.system) + [b for m in messages for b in _blocks(m.content)]:
        if isinstance(block.source, Source) and block.source.type in _SOURCES:
            used.add(_SOURCES[block.source.type])
    for tool in parsed.tools if isinstance(parsed.tools, list) else []:
        if tool.type not in (None, "custom"):
            used.add(tool_feature(str(tool.type)))
    if parsed.mcp_servers not in (None, []):
        used.add("mcp_servers")
    if parsed.container is not None:
        used.add("container")
    return sorted(used)


def refusal(body: bytes, allowed: frozenset[str] | set[str], folder: str) -> str | None:
    """Why the door refuses this body for the agent `folder`, or None when it may go."""
    for feature in features_used(body):
        if feature in allowed:
            continue
        if feature == "unreadable":
            return "the request body is not a JSON object the Messages API reads"
        how = (f"the owner can allow it with `flask --app app nanoclaw model feature allow {folder} {feature}`"
               if feature in FEATURES else "it is not available through NanoClaw")
        return (f"{feature} is refused at NanoClaw's door: the provider would fetch or run it outside this "
                f"agent's egress allowlist and budget; {how}")
    return None
