"""The runner's tools served to the CLI in-process: MCP's JSON-RPC over the SDK's control channel.

For an MCP server of type "sdk" the CLI sends each JSON-RPC message to the SDK as an `mcp_message`
control request, and the SDK hands it to a bridge it makes per server: `handle(message)` returns the
response (None for a notification), `aclose()` ends it. The SDK's own bridge runs mcp's server
library over memory streams; that library's wire types (pydantic models of several protocol
revisions) and jsonschema were most of the runner's imports, about half a second of CPU at every
sandbox start (issue 43: the cold start). What the CLI asks an in-process tools server is small:
initialize, the initialized notification, tools/list, tools/call, ping, and the cancellation of a
call. `ToolServer` answers those as mcp's server does (tests/agent/test_tool_server.py puts the same
messages to both and compares); `ToolBridge` is what the SDK makes in the runner, in place of its
own (left_out.py).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("agent_runner.tool_server")

# The revisions an initialize handshake can ask for; the tools' messages are the same in all four.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = HANDSHAKE_VERSIONS[-1]

INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32600, -32601, -32602
# What mcp's transports answer for a request the client cancelled (the CLI has stopped waiting for it).
CANCELLED = {"code": -32800, "message": "Request cancelled"}
CLOSE_GRACE_S = 5.0  # as the SDK's bridge: a tool blocked in a thread does not hold a stop longer


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]  # a JSON Schema of type object: the tool's arguments
    run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]  # -> {"content": [...], "is_error": bool}


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error = {"code": code, "message": message, **({} if data is None else {"data": data})}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _ok(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


@dataclass
class ToolServer:
    """One named server's tools; `answer` is the whole protocol, one message at a time."""
    name: str
    tools: list[Tool]
    version: str = "1.0.0"
    _by_name: dict[str, Tool] = field(init=False, repr=False)
    _checkers: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._by_name = {tool.name: tool for tool in self.tools}

    async def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The response to a request; None for a notification or a response (this server sends no
        requests). Never raises for what a peer sends: a malformed message gets a JSON-RPC error."""
        method, request_id = message.get("method"), message.get("id")
        if not isinstance(method, str):
            if method is None and ("result" in message or "error" in message):
                return None  # a response: nothing of ours is waiting for one
            return _error(request_id if _is_id(request_id) else None, INVALID_REQUEST, "Invalid request")
        if "id" not in message:
            return None  # a notification: initialized, progress, roots changed (cancellation: ToolBridge)
        if not _is_id(request_id):
            return _error(None, INVALID_REQUEST, "Invalid request")
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return _error(request_id, INVALID_PARAMS, "Invalid request parameters", "")
        params = params or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            if not isinstance(asked, str):
                return _error(request_id, INVALID_PARAMS, "Invalid request parameters", "")
            return _ok(request_id, {
                "protocolVersion": asked if asked in HANDSHAKE_VERSIONS else LATEST,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": self.version}})
        if method == "ping":
            return _ok(request_id, {})
        if method == "tools/list":
            return _ok(request_id, {"tools": [
                {"name": t.name, "description": t.description, "inputSchema": t.schema} for t in self.tools]})
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, (dict, type(None))):
                return _error(request_id, INVALID_PARAMS, "Invalid request parameters", "")
            return _ok(request_id, await self._call(name, arguments or {}))
        return _error(request_id, METHOD_NOT_FOUND, "Method not found", method)

    async def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """As the SDK's own tools server: an unknown tool, arguments that do not fit the schema and a
        tool that raises are all results the model reads (isError), never protocol errors."""
        tool = self._by_name.get(name)
        if tool is None:
            return _failed(f"Tool '{name}' not found")
        try:
            wrong = self._check(tool, arguments)
            if wrong:
                return _failed(f"Input validation error: {wrong}")
            result = await tool.run(arguments)
            return {"content": list(result.get("content", [])), "isError": bool(result.get("is_error", False))}
        except Exception as e:  # noqa: BLE001 - the model is told; the server goes on
            log.warning("tool %s failed: %s", name, type(e).__name__)
            return _failed(str(e))

    def _check(self, tool: Tool, arguments: dict[str, Any]) -> str | None:
        """The message of the best-matching schema error (jsonschema's `validate` picks the same), or None."""
        import jsonschema  # at the first call, not at every start (left_out.py loads it on first use)

        checker = self._checkers.get(tool.name)
        if checker is None:
            cls = jsonschema.validators.validator_for(tool.schema)
            cls.check_schema(tool.schema)
            checker = self._checkers[tool.name] = cls(tool.schema)
        error = jsonschema.exceptions.best_match(checker.iter_errors(arguments))
        return None if error is None else error.message


def _failed(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class ToolBridge:
    """What the SDK makes for each "sdk" server in the runner: each request runs in a task of its own,
    so the CLI's cancellation (`notifications/cancelled`) can stop it; a cancelled request is
    answered with CANCELLED, as mcp's transports answer it."""

    def __init__(self, name: str, server: ToolServer) -> None:
        if not isinstance(server, ToolServer):
            raise TypeError(f"SDK MCP server {name!r}: the runner serves only its own ToolServer")
        self.name, self.server = name, server
        self._running: dict[Any, asyncio.Task] = {}
        self._closed = False

    async def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if self._closed:
            raise RuntimeError(f"SDK MCP server {self.name!r} is closed")
        if message.get("method") == "notifications/cancelled":
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            task = self._running.get(request_id) if _is_id(request_id) else None
            if task is not None and message.get("id") is None:
                task.cancel()
            return None
        request_id = message.get("id")
        if not _is_id(request_id) or "method" not in message:
            return await self.server.answer(message)
        if request_id in self._running:
            return _error(request_id, INVALID_REQUEST, f"Request id {request_id!r} is already in flight")
        task = asyncio.ensure_future(self.server.answer(message))
        self._running[request_id] = task
        try:
            await asyncio.wait({task})  # not `await task`: a cancelled task must not cancel this caller
        except asyncio.CancelledError:  # the SDK gave up on the request (its query closing): so does the tool
            task.cancel()
            raise
        finally:
            if self._running.get(request_id) is task:
                del self._running[request_id]
        if task.cancelled():
            return _error(request_id, CANCELLED["code"], CANCELLED["message"])
        return task.result()

    async def aclose(self) -> None:
        """Stop what is in flight; a tool blocked in a thread is waited for CLOSE_GRACE_S at most."""
        self._closed = True
        running = list(self._running.values())
        for task in running:
            task.cancel()
        if running:
            _done, pending = await asyncio.wait(running, timeout=CLOSE_GRACE_S)
            if pending:
                log.warning("SDK MCP server %r: %d tool call(s) did not stop within %.0f s of the close",
                            self.name, len(pending), CLOSE_GRACE_S)
