"""The runner's own tools server (agent_runner/tool_server.py) answers the CLI as the SDK's server does.

The runner no longer loads mcp (left_out.py): its tools are served by a small JSON-RPC server of its
own. These tests put the same messages to it and to the SDK's own bridge over mcp's server (both in
this process, with the same tools) and compare the answers.

First, what the bundled CLI really sends: tests/fixtures/mcp/cli.json, recorded from the real CLI by
tests/agent/record_mcp.py (its handshake, tools/list, tools/call with its `_meta`, a call cancelled
by an interruption). The recording fails the suite when the bundled CLI is newer than it.
Then, marked HAND-WRITTEN, what the CLI never sends but a server must survive: other revisions'
handshakes, arguments that do not fit, unknown tools and methods, a response to nothing, a call
after a cancellation; then any request Hypothesis makes up. A message no peer should send still gets
an answer, never an exception."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "container"))
from agent_runner.tool_server import CANCELLED, Tool, ToolBridge, ToolServer  # noqa: E402

NAME = "nanoclaw"


class Tools:
    """The same tools for both servers: plain async handlers returning the SDK's result shape."""

    def __init__(self):
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls: list[tuple[str, dict]] = []

    async def echo(self, args):
        self.calls.append(("echo", args))
        return {"content": [{"type": "text", "text": f"{args.get('text')} x{args.get('times', 1)}"}]}

    async def refuse(self, args):
        return {"content": [{"type": "text", "text": "Error: not now"}], "is_error": True}

    async def explode(self, args):
        raise RuntimeError("the disk is full")

    async def wait(self, args):
        self.started.set()
        await self.release.wait()
        return {"content": [{"type": "text", "text": "waited"}]}

    def specs(self):
        return [
            ("echo", "Say it again.", {"type": "object", "properties": {
                "text": {"type": "string"}, "times": {"type": "integer", "minimum": 1},
                "tone": {"type": "string", "enum": ["calm", "loud"]}}, "required": ["text"]}, self.echo),
            ("refuse", "Always refuses.", {"type": "object", "properties": {}}, self.refuse),
            ("explode", "Always raises.", {"type": "object", "properties": {"why": {"type": "string"}}}, self.explode),
            ("wait", "Waits to be released.", {"type": "object", "properties": {}}, self.wait),
        ]


def ours(tools: Tools) -> ToolBridge:
    return ToolBridge(NAME, ToolServer(NAME, [Tool(n, d, s, fn) for n, d, s, fn in tools.specs()]))


def theirs(tools: Tools):
    """The SDK's own: create_sdk_mcp_server (mcp's lowlevel server) behind its SdkMcpBridge."""
    from claude_agent_sdk import create_sdk_mcp_server, tool
    from claude_agent_sdk._internal.sdk_mcp_bridge import SdkMcpBridge
    server = create_sdk_mcp_server(NAME, tools=[tool(n, d, s)(fn) for n, d, s, fn in tools.specs()])
    return SdkMcpBridge(NAME, server["instance"])


def same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def request(n, method, params=None):
    return {"jsonrpc": "2.0", "id": n, "method": method, **({} if params is None else {"params": params})}


def call(n, name, arguments=None):
    return request(n, "tools/call", {"name": name, **({} if arguments is None else {"arguments": arguments})})


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "mcp" / "cli.json"


def test_the_recording_is_of_the_bundled_cli():
    from claude_agent_sdk._cli_version import __cli_version__
    recorded = json.loads(RECORDED.read_text())["cli_version"]
    assert recorded == __cli_version__, (
        f"tests/fixtures/mcp/cli.json was recorded from CLI {recorded}; the bundled CLI is {__cli_version__}: "
        "run .venv/bin/python tests/agent/record_mcp.py and commit the new recording")


async def replay(bridge, tools: Tools, conversation: list[dict]) -> list:
    """Play the CLI's messages in the order it sent them; a call the CLI left waiting (it was cancelled
    while running) is left in flight until the tool has started, as it was when recorded."""
    answers, pending = [], []
    for entry in conversation:
        message = entry["message"]
        task = asyncio.ensure_future(bridge.handle(message))
        if message.get("method") == "tools/call" and message["params"]["name"] == "wait":
            await asyncio.wait_for(tools.started.wait(), 10)
            pending.append((len(answers), task))
            answers.append(None)
            continue
        answers.append(await asyncio.wait_for(task, 10))
    for index, task in pending:
        answers[index] = await asyncio.wait_for(task, 10)
    await bridge.aclose()
    return answers


def test_the_bundled_clis_own_conversation_is_answered_as_the_sdks_server_answers_it():
    conversation = json.loads(RECORDED.read_text())["conversation"]
    methods = {entry["message"].get("method") for entry in conversation}
    assert {"initialize", "notifications/initialized", "tools/list", "tools/call", "notifications/cancelled"} <= methods

    async def both():
        tools_a, tools_b = Tools(), Tools()
        mine = await replay(ours(tools_a), tools_a, conversation)
        sdk = await replay(theirs(tools_b), tools_b, conversation)
        return mine, sdk, tools_a.calls
    mine, sdk, calls = asyncio.run(both())
    for entry, a, b in zip(conversation, mine, sdk):
        assert same(a, b), (entry["message"], a, b)
        assert same(a, entry["sdk_answer"]), ("the SDK's server answered differently when recorded", entry, a)
    assert calls == [("echo", {"text": "hello", "times": 2}), ("echo", {"text": "loud", "tone": "loud"})]
    assert mine[-2]["error"] == CANCELLED  # the call the interruption cancelled


# HAND-WRITTEN: the CLI never sends most of these (it validates arguments itself and speaks one revision).
CONVERSATION = [
    request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "claude-code", "version": "2.1.330"}}),
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    request(2, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
    request(3, "initialize", {"protocolVersion": "2031-01-01", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
    request("list", "tools/list"),
    request(4, "tools/list", {}),
    call(5, "echo", {"text": "hello", "times": 2}),
    call(6, "echo", {"text": 5}),
    call(7, "echo", {}),
    call(8, "echo", {"text": "hi", "times": 0}),
    call(9, "echo", {"text": "hi", "tone": "shouty", "extra": [1, 2]}),
    call(10, "echo"),
    call(11, "refuse"),
    call(12, "explode", {"why": "test"}),
    call(13, "nope", {}),
    request(14, "ping"),
    request(15, "resources/list"),
    request(16, "prompts/get", {"name": "x"}),
    request(17, "tools/call"),
    request(18, "tools/call", {"name": 3, "arguments": {}}),
    request(19, "tools/call", {"name": "echo", "arguments": [1]}),
    {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    {"jsonrpc": "2.0", "id": 99, "result": {}},  # a response to nothing
]


def test_the_conversation_a_cli_has_is_answered_as_the_sdks_server_answers_it():
    async def both():
        tools_a, tools_b = Tools(), Tools()
        a, b = ours(tools_a), theirs(tools_b)
        try:
            for message in CONVERSATION:
                mine, sdk = await a.handle(message), await b.handle(message)
                assert same(mine, sdk), (message, mine, sdk)
        finally:
            await a.aclose()
            await b.aclose()
        assert tools_a.calls == tools_b.calls == [("echo", {"text": "hello", "times": 2})]
    asyncio.run(both())


def test_a_cancelled_call_stops_the_tool_and_the_server_goes_on():  # HAND-WRITTEN: a call after it
    async def cancel(bridge, tools):
        await bridge.handle(CONVERSATION[0])
        task = asyncio.ensure_future(bridge.handle(call(21, "wait")))
        await asyncio.wait_for(tools.started.wait(), 10)
        assert await bridge.handle({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                    "params": {"requestId": 21, "reason": "the user pressed Esc"}}) is None
        answer = await asyncio.wait_for(task, 10)
        after = await bridge.handle(call(22, "echo", {"text": "again"}))  # the server goes on
        await bridge.aclose()
        return answer, after

    async def both():
        tools_a, tools_b = Tools(), Tools()
        mine = await cancel(ours(tools_a), tools_a)
        sdk = await cancel(theirs(tools_b), tools_b)
        assert same(mine, sdk), (mine, sdk)
        assert mine[0]["error"] == CANCELLED and mine[1]["result"]["content"][0]["text"] == "again x1"
    asyncio.run(both())


def test_closing_stops_a_call_in_flight():
    async def run():
        tools = Tools()
        bridge = ours(tools)
        await bridge.handle(CONVERSATION[0])
        task = asyncio.ensure_future(bridge.handle(call(31, "wait")))
        await asyncio.wait_for(tools.started.wait(), 10)
        await asyncio.wait_for(bridge.aclose(), 10)
        assert (await asyncio.wait_for(task, 10))["error"] == CANCELLED
        with pytest.raises(RuntimeError, match="closed"):
            await bridge.handle(request(32, "ping"))
    asyncio.run(run())


def test_the_runner_serves_only_its_own_server():
    with pytest.raises(TypeError, match="ToolServer"):
        ToolBridge(NAME, object())


# --- HAND-WRITTEN: any request ---------------------------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers(-2**31, 2**31) | st.text(max_size=8)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
arguments = st.fixed_dictionaries({}, optional={
    "text": st.text(max_size=10) | json_leaf, "times": st.integers(-3, 5) | json_leaf,
    "tone": st.sampled_from(["calm", "loud", "meh"]) | json_leaf}) | st.dictionaries(st.text(max_size=5), json_value, max_size=3)
tool_call = st.fixed_dictionaries({"name": st.sampled_from(["echo", "refuse", "explode", "nope"])},
                                  optional={"arguments": arguments})
handshake = st.fixed_dictionaries({"protocolVersion": st.sampled_from(["2024-11-05", "2025-03-26", "2025-06-18",
                                                                      "2025-11-25", "2026-07-28", "1.0"]),
                                   "capabilities": st.just({}),
                                   "clientInfo": st.just({"name": "claude-code", "version": "2"})})
requests = st.one_of(
    st.builds(lambda n, p: request(n, "tools/call", p), st.integers(0, 10**6), tool_call),
    st.builds(lambda n, p: request(n, "initialize", p), st.integers(0, 10**6) | st.text(min_size=1, max_size=6), handshake),
    st.builds(lambda n, m: request(n, m), st.integers(0, 10**6),
              st.sampled_from(["ping", "tools/list", "resources/list", "prompts/list", "vendor/unknown"])),
)


@pytest.fixture(scope="module")
def pair():
    loop = asyncio.new_event_loop()
    tools_a, tools_b = Tools(), Tools()
    a, b = ours(tools_a), theirs(tools_b)
    for bridge in (a, b):
        loop.run_until_complete(bridge.handle(CONVERSATION[0]))
    yield loop, a, b
    loop.run_until_complete(a.aclose())
    loop.run_until_complete(b.aclose())
    loop.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(message=requests)
def test_any_request_is_answered_as_the_sdks_server_answers_it(pair, message):
    loop, a, b = pair
    mine, sdk = loop.run_until_complete(a.handle(message)), loop.run_until_complete(b.handle(message))
    assert same(mine, sdk), (message, mine, sdk)


@settings(max_examples=200, deadline=None)
@given(message=st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]), json_value,
                               max_size=5))
def test_a_malformed_message_gets_an_answer_never_an_exception(message):
    async def run():
        bridge = ours(Tools())
        try:
            return await bridge.handle(message)
        finally:
            await bridge.aclose()
    answer = asyncio.run(run())
    if answer is not None:
        assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer)
        if isinstance(message.get("id"), (int, str)) and not isinstance(message.get("id"), bool):
            assert answer["id"] == message["id"]
    else:  # nothing to answer: a notification or a response, never a request
        assert not (isinstance(message.get("method"), str) and "id" in message)
