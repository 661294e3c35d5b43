"""What the agent is doing, in a few words, for the status message a long turn shows in its chat.

Made from a tool call's name and input, and cut short on purpose: a command's program, a file's
name, a web page's host; never the whole input, which can hold a secret (a token in a curl command,
a password in a file being written). The host cleans it again before it shows it."""
from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from urllib.parse import urlsplit

MAX_SUBJECT = 40

_OURS = {"ask_operator": "asking the owner", "ask_user_question": "asking a question",
         "send_message": "sending a message", "send_file": "sending a file", "send_card": "sending a card",
         "edit_message": "editing a message", "add_reaction": "reacting", "schedule_task": "scheduling a task",
         "list_tasks": "looking at its tasks", "propose_egress": "asking for network access",
         "propose_credential_route": "asking for access to an API", "install_packages": "asking to install packages",
         "add_mcp_server": "asking for a tool", "create_agent": "asking for a new agent",
         "propose_skill": "asking for a skill"}
_PLAIN = {"WebSearch": "searching the web", "Glob": "looking for files", "Grep": "searching files",
          "TodoWrite": "planning", "Task": "working on a sub-task", "Agent": "working on a sub-task",
          "LS": "looking at a folder"}
_FILE_VERBS = {"Read": "reading", "Write": "writing", "Edit": "editing", "MultiEdit": "editing",
               "NotebookEdit": "editing", "NotebookRead": "reading"}


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_SUBJECT else text[:MAX_SUBJECT - 1] + "…"


def _program(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if "=" not in w.split("/")[0]]  # VAR=value prefixes (could be a secret)
    return PurePosixPath(words[0]).name if words else ""


def describe(tool: str, tool_input) -> str:
    """'running `pytest`', 'reading `report.pdf`', 'searching the web', … (pure)."""
    data = tool_input if isinstance(tool_input, dict) else {}
    if tool.startswith("mcp__"):
        server, _, name = tool[5:].partition("__")
        if server == "nanoclaw" and name == "ask_agent":
            asked = re.sub(r"[^a-z0-9_-]", "", str(data.get("agent") or "").lower())
            return f"asking {_cut(asked)}…" if asked else "asking another agent"
        return _OURS.get(name, f"using {_cut(name)}") if server == "nanoclaw" else f"using {_cut(server)}"
    if tool in _PLAIN:
        return _PLAIN[tool]
    if tool == "Bash":
        program = _program(str(data.get("command") or ""))
        return f"running `{_cut(program)}`" if program else "running a command"
    if tool in _FILE_VERBS:
        name = PurePosixPath(str(data.get("file_path") or data.get("notebook_path") or "")).name
        return f"{_FILE_VERBS[tool]} `{_cut(name)}`" if name else f"{_FILE_VERBS[tool]} a file"
    if tool == "WebFetch":
        host = urlsplit(str(data.get("url") or "")).hostname or ""
        return f"reading a page on {_cut(host)}" if host else "reading a web page"
    return f"using {_cut(tool)}"
