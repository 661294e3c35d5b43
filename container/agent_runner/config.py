"""The runner's settings, read once from the sandbox environment (never a secret: the proxy holds keys)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Placeholder the SDK sends as its key; the proxy drops it and injects the real one.
PLACEHOLDER_API_KEY = "sandbox-placeholder"
# What the host sets to the agent's chosen model (nanoclaw/upstreams/chains.py has the same list), and
# the SDK's effort levels.
MODEL_VARIABLES = ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                   "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL")
EFFORTS = ("low", "medium", "high", "xhigh", "max")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return max(1, int(env.get(name, "") or default))
    except ValueError:
        return default


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return max(0.01, float(env.get(name, "") or default))
    except ValueError:
        return default


def _optional_float(env: Mapping[str, str], name: str) -> float | None:
    """A positive number of seconds, or None when unset, empty, zero or not a number."""
    try:
        value = float(env.get(name, "") or 0)
    except ValueError:
        return None
    return value if value > 0 else None


@dataclass(frozen=True)
class RunnerConfig:
    session_dir: Path    # ours (read-write): outbound.db, heartbeat, outbox/, home/
    inbound_dir: Path    # the host's (read-only): inbound.db, inbox/
    group_dir: Path
    global_dir: Path
    workspace_dir: Path  # files the agent may send must resolve inside this (or the session/group dir)
    proxy_socket: str | None
    timezone: str
    max_messages: int
    assistant_name: str
    turn_timeout_s: float | None   # None: no cap (long work is allowed; the host's sweep stops a stuck turn)
    poll_interval_s: float         # the safety net: inbound.db is looked at this often without a nudge
    nudges: bool                   # wake on the host's commits (inotify); off only to test the net
    freeze_idle_s: float           # stop the idle CLI after this many quiet seconds (0: never)
    withheld_tools: frozenset[str]  # tools of ours the host does not offer this agent (it checks anyway)
    keep_messages_days: float      # delivered replies older than this go at start (the host prunes its side)
    cli_max_retries: str
    reserved_secret_prefixes: tuple[str, ...] = ()  # the host's platforms' (proposal_rules)
    session_id: str = ""  # the host's id of this session (the proxy counts a call's cost there)
    effort: str | None = None  # the SDK's effort level the owner chose for this agent
    context_window: int = 200_000  # the model's context window (tokens): a memory save runs past 80 % of it

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "RunnerConfig":
        env = os.environ if env is None else env
        workspace = Path(env.get("NANOCLAW_WORKSPACE_DIR") or "/workspace")
        return cls(
            session_dir=Path(env.get("NANOCLAW_SESSION_DIR") or workspace / "session"),
            inbound_dir=Path(env.get("NANOCLAW_INBOUND_DIR") or workspace / "inbound"),
            group_dir=Path(env.get("NANOCLAW_GROUP_DIR") or workspace / "group"),
            global_dir=Path(env.get("NANOCLAW_GLOBAL_DIR") or workspace / "global"),
            workspace_dir=workspace,
            proxy_socket=env.get("NANOCLAW_PROXY_SOCKET") or None,
            timezone=env.get("TZ") or "UTC",
            max_messages=_int(env, "NANOCLAW_MAX_MESSAGES_PER_PROMPT", 10),
            assistant_name=env.get("NANOCLAW_ASSISTANT_NAME") or "Andy",
            turn_timeout_s=_optional_float(env, "NANOCLAW_TURN_TIMEOUT_S"),
            poll_interval_s=_float(env, "NANOCLAW_POLL_INTERVAL_S", 1.0),
            nudges=env.get("NANOCLAW_NUDGES", "1") != "0",
            freeze_idle_s=_float(env, "NANOCLAW_FREEZE_IDLE_S", 2.0),
            keep_messages_days=_float(env, "NANOCLAW_KEEP_MESSAGES_DAYS", 30.0),
            withheld_tools=frozenset(t for t in (env.get("NANOCLAW_TOOLS_WITHHELD") or "").split(",") if t),
            # The CLI retries failed model calls for minutes by default; a chat user should hear
            # about a failure quickly instead (the host retries the message later).
            cli_max_retries=env.get("CLAUDE_CODE_MAX_RETRIES") or "2",
            reserved_secret_prefixes=tuple(p for p in (env.get("NANOCLAW_RESERVED_SECRET_PREFIXES") or "").split(",")
                                           if p),
            session_id=(env.get("NANOCLAW_SESSION_ID") or "")[:64],
            effort=env.get("NANOCLAW_EFFORT") if env.get("NANOCLAW_EFFORT") in EFFORTS else None,
            context_window=_int(env, "NANOCLAW_CONTEXT_WINDOW", 200_000),
        )

    @property
    def send_roots(self) -> tuple[Path, ...]:
        """Where a file the agent sends may live."""
        return (self.workspace_dir, self.session_dir, self.group_dir)
