"""PreToolUse / PostToolUse hooks: record the running tool in container_state (the host's stuck
detection reads it) and refuse a blocked tool should one slip past disallowed_tools."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .activity import describe
from .store import SessionStore

log = logging.getLogger("agent_runner.hooks")

_INTERACTIVE = ("you are answering a chat, nobody can answer interactive prompts, and scheduling is done "
                "by the host.")
_WHY = {
    # interactive or self-scheduling: nobody is at a terminal to answer them, and scheduling belongs
    # to the host (its tasks survive the sandbox; the CLI's cron would not)
    **dict.fromkeys(("AskUserQuestion", "EnterPlanMode", "ExitPlanMode", "EnterWorktree", "ExitWorktree",
                     "CronCreate", "CronDelete", "CronList", "ScheduleWakeup", "RemoteTrigger"), _INTERACTIVE),
    # Claude Code's agent teams: there are no teammates here, and a model that takes SendMessage for
    # the chat's send_message would answer nobody
    **dict.fromkeys(("ListAgents", "SendMessage"),
                    "there are no other agents to message here: people are reached with send_message."),
    # they report back later, outside the turn, where nothing reads the CLI (and the idle CLI is
    # stopped); a Workflow can also start dozens of agents on one keyword
    **dict.fromkeys(("Monitor", "Workflow"),
                    "background monitors and workflows report outside the turn, where nobody would see "
                    "them: run the command with Bash and check on it when asked."),
    "ReportFindings": "it is a code-review screen's tool; here the findings go in your answer.",
    # its request carries the provider's web_search server tool, which NanoClaw's door refuses: the
    # provider would search outside the agent's allowlist and budget (the web issue brings web_search)
    # the CLI's own fetch goes out through the egress allowlist and reads the page into the model without
    # the host's envelope or address checks; web_read is the host's
    "WebFetch": "pages are read with the web_read tool here: the host fetches the page and checks where it goes.",
    "WebSearch": "the provider's web search is refused at NanoClaw's door (it searches outside your egress "
                 "allowlist and budget); ask for the page you need, or the owner for a search tool.",
}
# Also left out of the request: each tool's definition costs the CLI time on every turn (these five
# are a third of a turn's 73 KB; docs/benchmarks-history.md)
BLOCKED_TOOLS = tuple(_WHY)


def block_reason(tool_name: str) -> str | None:
    why = _WHY.get(tool_name)
    return f"{tool_name} is not available here: {why}" if why else None


def declared_timeout_ms(tool_name: str, tool_input: dict[str, Any] | None) -> int | None:
    """The timeout the agent declared for a Bash call (ms), if any."""
    if tool_name != "Bash" or not isinstance(tool_input, dict):
        return None
    try:
        value = tool_input.get("timeout")
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


async def compacting(data: dict[str, Any], _tool_use_id: str | None, _ctx: Any) -> dict[str, Any]:
    log.info("the CLI compacts the conversation (%s)", data.get("trigger") or "auto")
    return {}


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
        store.set_tool(name, declared_timeout_ms(name, data.get("tool_input")), describe(name, data.get("tool_input")))
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
        # hooks cannot start a turn: the memory save runs before a long turn instead (poll_loop.py); this
        # only says when the CLI compacted anyway
        "PreCompact": [HookMatcher(hooks=[compacting])],
    }
