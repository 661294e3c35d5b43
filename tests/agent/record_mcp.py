"""Record the MCP conversation the bundled CLI has with an in-process (SDK) tools server.

    .venv/bin/python tests/agent/record_mcp.py      (writes tests/fixtures/mcp/cli.json)

The real claude-agent-sdk runs its bundled CLI against the scripted fake Messages API on 127.0.0.1;
the SDK's own server (create_sdk_mcp_server, mcp's server behind the SDK's bridge) holds the same
tools as tests/agent/test_tool_server.py. The model calls each of them in turn, then one that
waits, and the turn is interrupted while it waits, as a person's /stop does: every JSON-RPC message
the CLI sends the server is kept in order, with the SDK server's answer. test_tool_server.py plays
the messages to both servers, and fails when the bundled CLI is newer than the recording: run this
again then.
"""
from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage, create_sdk_mcp_server, tool  # noqa: E402
from claude_agent_sdk._cli_version import __cli_version__  # noqa: E402
from claude_agent_sdk._internal import query as sdk_query  # noqa: E402
from fakes.model_api import FakeModel, Reply  # noqa: E402
from test_tool_server import NAME, Tools  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "mcp" / "cli.json"
# What the model asks for, one answer per request; each tool's name as the CLI shows it to the model.
SCRIPT = [
    Reply.call(f"mcp__{NAME}__echo", text="hello", times=2),
    Reply.call(f"mcp__{NAME}__echo", text="loud", tone="loud"),
    Reply.call(f"mcp__{NAME}__refuse"),
    Reply.call(f"mcp__{NAME}__explode", why="recorded"),
    Reply.call(f"mcp__{NAME}__wait"),  # interrupted while it waits
    Reply.say("after the interruption"),
    Reply.say("[script exhausted]"),
]


async def record() -> list[dict]:
    seen: list[dict] = []
    real = sdk_query.Query._handle_sdk_mcp_request

    async def recorded(self, server_name, message):
        entry = {"message": message}
        seen.append(entry)
        entry["sdk_answer"] = await real(self, server_name, message)
        return entry["sdk_answer"]

    sdk_query.Query._handle_sdk_mcp_request = recorded
    tools = Tools()
    server = create_sdk_mcp_server(NAME, tools=[tool(n, d, s)(fn) for n, d, s, fn in tools.specs()])
    with FakeModel(script=list(SCRIPT)) as model, tempfile.TemporaryDirectory() as home:
        options = ClaudeAgentOptions(
            mcp_servers={NAME: server}, allowed_tools=[f"mcp__{NAME}__*"], tools=[],
            cwd=home, env={"HOME": home, "CLAUDE_CONFIG_DIR": home, "ANTHROPIC_BASE_URL": model.url,
                           "ANTHROPIC_API_KEY": "placeholder", "CLAUDE_CODE_MAX_RETRIES": "0",
                           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "ENABLE_TOOL_SEARCH": "false"},
            stderr=lambda line: print("cli:", line, file=sys.stderr))
        async with ClaudeSDKClient(options) as client:
            async def interrupt_while_waiting():
                await tools.started.wait()
                await client.interrupt()
            interrupter = asyncio.ensure_future(interrupt_while_waiting())
            await client.query("use every tool")
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    break
            if not interrupter.done():
                raise SystemExit("the model's wait tool never ran: nothing to interrupt")
            await client.query("and now?")
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    break
    sdk_query.Query._handle_sdk_mcp_request = real
    return seen


def main() -> None:
    messages = asyncio.run(asyncio.wait_for(record(), 180))
    methods = [m["message"].get("method") for m in messages]
    for needed in ("initialize", "tools/list", "tools/call", "notifications/cancelled"):
        if needed not in methods:
            raise SystemExit(f"the CLI sent no {needed}: {methods}")
    FIXTURE.write_text(json.dumps({"cli_version": __cli_version__, "server": NAME, "conversation": messages},
                                  indent=1) + "\n")
    print(f"{len(messages)} messages from CLI {__cli_version__} -> {FIXTURE.relative_to(ROOT)}: {methods}")


if __name__ == "__main__":
    main()
