"""The agent's in-process MCP server `nanoclaw` (tools reach the model as mcp__nanoclaw__<name>).

Each tool module exposes SPECS: (plain function, name, description, JSON schema). The plain
functions take a ToolContext and keyword arguments and raise ToolError to refuse; this module
only adapts them to the SDK. A capability adds its module to TOOL_MODULES.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from . import browser, delegation, interactive, memory, messaging, operator, scheduling, web
from .context import ToolContext, ToolError, Turn

SERVER_NAME = "nanoclaw"
TOOL_MODULES = [messaging, interactive, scheduling, memory, operator, web, browser, delegation]
log = logging.getLogger("agent_runner.tools")

__all__ = ["SERVER_NAME", "ToolContext", "ToolError", "Turn", "build_server", "tool_names", "call_tool"]


def _specs(withheld: frozenset[str] = frozenset()):
    for module in TOOL_MODULES:
        yield from (spec for spec in module.SPECS if spec[1] not in withheld)


def tool_names(withheld: frozenset[str] = frozenset()) -> list[str]:
    return [f"mcp__{SERVER_NAME}__{name}" for _fn, name, _d, _s in _specs(withheld)]


def call_tool(ctx: ToolContext, fn, args: dict[str, Any]) -> dict[str, Any]:
    """Run one plain tool function; the MCP result (an error result on refusal)."""
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in (args or {}).items() if k in params and k != "ctx"}
    if ctx.silent and fn.__module__ in (messaging.__name__, interactive.__name__):
        return {"content": [{"type": "text", "text": "Error: not now: this turn only saves your memory; nothing is "
                                                     "sent from it"}], "is_error": True}
    try:
        text = fn(ctx, **kwargs)
        log.info("tool %s ok", fn.__name__)
        if isinstance(text, list):  # content blocks of its own (a screenshot: text and an image)
            return {"content": text}
        return {"content": [{"type": "text", "text": text}]}
    except ToolError as e:
        log.info("tool %s refused: %s", fn.__name__, e)
        return {"content": [{"type": "text", "text": f"Error: {e}"}], "is_error": True}
    except TypeError as e:  # a missing required argument
        return {"content": [{"type": "text", "text": f"Error: bad arguments: {e}"}], "is_error": True}
    except OSError as e:
        log.warning("tool %s failed: %s", fn.__name__, e)
        return {"content": [{"type": "text", "text": f"Error: {e.strerror or e}"}], "is_error": True}


def build_server(ctx: ToolContext) -> dict[str, Any]:
    """The SDK's config for the server `nanoclaw` (in a process where left_out.py is installed: the
    SDK then serves it with tool_server.ToolBridge)."""
    from ..tool_server import Tool, ToolServer

    def adapt(fn, name, description, schema) -> Tool:
        async def run(args: dict[str, Any]) -> dict[str, Any]:
            if getattr(fn, "blocking", False):  # waits for a person: keep the SDK's event loop free
                return await asyncio.to_thread(call_tool, ctx, fn, args)
            return call_tool(ctx, fn, args)
        return Tool(name, description, schema, run)

    server = ToolServer(SERVER_NAME, [adapt(*spec) for spec in _specs(ctx.config.withheld_tools)])
    # Our few core tools are always in the prompt, not deferred behind the CLI's tool search: the
    # agent must know it can message the chat without searching for how.
    return {"type": "sdk", "name": SERVER_NAME, "instance": server, "alwaysLoad": True}
