"""PreToolUse / PostToolUse hooks: record the running tool in container_state (the host's stuck
detection reads it) and refuse a blocked tool should one slip past disallowed_tools."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .store import SessionStore

log = logging.getLogger("agent_runner.hooks")

# Interactive or self-scheduling tools of the SDK/CLI: nobody is at a terminal to answer them, and
# scheduling belongs to the host (its tasks survive the sandbox; the CLI's cron would not).
BLOCKED_TOOLS = (
    "AskUserQuestion", "EnterPlanMode", "ExitPlanMode", "EnterWorktree", "ExitWorktree",
    "CronCreate", "CronDelete", "CronList", "ScheduleWakeup", "RemoteTrigger",
)


def block_reason(tool_name: str) -> str | None:
    if tool_name in BLOCKED_TOOLS:
        return (f"{tool_name} is not available here: you are answering a chat, nobody can answer "
                "interactive prompts, and scheduling is done by the host.")
    return None


def declared_timeout_ms(tool_name: str, tool_input: dict[str, Any] | None) -> int | None:
    """The timeout the agent declared for a Bash call (ms), if any."""
    if tool_name != "Bash" or not isinstance(tool_input, dict):
        return None
    try:
        value = tool_input.get("timeout")
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def make_hooks(store: SessionStore, on_event: Callable[[], None] = lambda: None) -> dict:
    from claude_agent_sdk import HookMatcher

    async def pre(data: dict[str, Any], _tool_use_id: str | None, _ctx: Any) -> dict[str, Any]:
        on_event()
        name = data.get("tool_name", "")
        reason = block_reason(name)
        if reason:
            log.warning("hook: denied blocked tool %s", name)
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                           "permissionDecisionReason": reason}}
        store.set_tool(name, declared_timeout_ms(name, data.get("tool_input")))
        log.info("tool start %s", name)
        return {}

    async def post(data: dict[str, Any], _tool_use_id: str | None, _ctx: Any) -> dict[str, Any]:
        on_event()
        store.set_tool(None)
        log.info("tool end %s", data.get("tool_name", ""))
        return {}

    return {
        "PreToolUse": [HookMatcher(hooks=[pre])],
        "PostToolUse": [HookMatcher(hooks=[post])],
        "PostToolUseFailure": [HookMatcher(hooks=[post])],
    }
