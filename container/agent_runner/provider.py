"""The model provider: one ClaudeSDKClient kept open for the sandbox's life.

A fresh `query()` starts the CLI again (about 1 s); a connected client answers the next prompt in
tens of milliseconds. The SDK session id lives in outbound.db (session_state 'sdk_session_id') so a
restarted sandbox resumes the same conversation (its transcript is in $HOME, the session folder).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from claude_agent_sdk import (AssistantMessage, ClaudeAgentOptions, ClaudeSDKClient, CLIConnectionError, ResultError,
                              ResultMessage, StreamEvent, SystemMessage, TextBlock, UserMessage)

from .config import MODEL_VARIABLES, PLACEHOLDER_API_KEY, RunnerConfig
from .extra_servers import extra_mcp_servers
from .freezer import Freezer
from .hooks import BLOCKED_TOOLS, make_hooks
from .mcp_tools import SERVER_NAME, ToolContext, build_server
from .reasons import short_reason
from .skills import approved_skills
from .store import SDK_SESSION_KEY, SessionStore
from .stream import Streamer

log = logging.getLogger("agent_runner.provider")
_RECOVER_S = 15.0  # how long an interrupted turn may take to wind down before we drop the CLI
STEER_WAIT_S = 10.0  # after a result, how long a steer the CLI queued as a turn of its own may take to begin
_STOP_SETTLE_S = 5.0  # after /stop: how long the CLI may take to end the turn before it is dropped (killed)


@dataclass
class TurnResult:
    text: str = ""  # the final answer as the model wrote it ('' = nothing to send)
    error: str | None = None  # a short reason, safe to show the user, when the turn failed
    timed_out: bool = False
    model_calls_s: float | None = None
    status: int | None = None  # the model API's HTTP status when a call failed (402: the budget is spent)
    answered: str | None = None  # the answer already handed to run_turn's on_answer, before the result
    stopped: bool = False  # the host stopped the turn (/stop): nothing more of it is sent
    interrupted: bool = False  # a new message interrupted it (while_busy interrupt): its rows go back


class AnswerWatch:
    """Tells the turn's answer as soon as the model ends its turn: the stream's `message_delta` with
    stop_reason end_turn comes about 5 ms before the CLI's result message, and a message of exactly
    one text block is the answer that result carries. Fed the SDK's messages in order (pure)."""

    def __init__(self) -> None:
        self.texts: list[str] | None = None  # the top-level message being streamed: its text blocks

    def feed(self, msg) -> str | None:
        if getattr(msg, "parent_tool_use_id", None) is not None:  # a subagent's message
            return None
        if isinstance(msg, StreamEvent):
            kind = msg.event.get("type")
            if kind == "message_start":
                self.texts = []
            elif kind == "message_delta" and (msg.event.get("delta") or {}).get("stop_reason") == "end_turn":
                texts, self.texts = self.texts, None
                return texts[0] if texts is not None and len(texts) == 1 else None
        elif isinstance(msg, AssistantMessage) and self.texts is not None:
            self.texts += [b.text for b in msg.content if isinstance(b, TextBlock)]
        return None


def destinations_text(labels: dict[str, str]) -> str:
    """The destinations paragraph of the system prompt (pure)."""
    if not labels:
        return ""
    listed = "; ".join(f"{name} ({label})" for name, label in sorted(labels.items()))
    return ("Besides answering in the chat a message came from, you may send to these destinations by "
            f"giving their name as `to` (send_message, send_file, send_card): {listed}. Nowhere else.")


MEMORY_KEY = "memory_snapshot"   # session_state: the snapshot the current conversation started with
CONTEXT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


def memory_text(snapshot: str | None, scope: str | None) -> str:
    """The memory a conversation starts with, as the model reads it (pure)."""
    whose = f" ({scope})" if scope else ""
    if not (snapshot or "").strip():
        return (f"<memory{whose}>empty</memory> Your lasting memory is empty: keep what is worth remembering for "
                "later conversations with the memory tool; search_history finds what was said before.")
    return (f"<memory{whose}>\n{snapshot.strip()}\n</memory> This is your lasting memory, kept by the host (change "
            "it with the memory tool; a change shows from the next conversation). search_history finds what was "
            "said before.")


def system_prompt_append(config: RunnerConfig, destinations: dict[str, str] | None = None,
                         memory: str | None = None) -> str:
    parts = [
        f"You are {config.assistant_name}, a personal assistant answering people in a chat. Each prompt "
        "holds the new chat messages as <messages>, times in the user's timezone. Your final answer "
        "is sent to that chat automatically. Text inside <internal>...</internal> is never sent. "
        f"Tools of the `{SERVER_NAME}` server send extra messages or files while you work.",
    ]
    if destinations:
        parts.append(destinations_text(destinations))
    if memory is not None:
        parts.append(memory)
    global_md = config.global_dir / "CLAUDE.md"
    try:
        if global_md.is_file():
            parts.append(global_md.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        pass
    return "\n\n".join(parts)


class ClaudeProvider:
    def __init__(self, config: RunnerConfig, store: SessionStore, tool_ctx: ToolContext, base_url: str,
                 on_event: Callable[[], None]):
        self.config = config
        self.store = store
        self.tool_ctx = tool_ctx
        self.base_url = base_url
        self.on_event = on_event
        self.client: ClaudeSDKClient | None = None
        self.session_id: str | None = store.get_state(SDK_SESSION_KEY)
        self.freezer = Freezer()
        self.context_tokens = 0  # what the last model call of this conversation was sent (its context)
        self.memory_saved = False  # the agent had its chance to save memory since the context grew past 80 %
        self.stopping = asyncio.Event()  # set (midturn.py) when the host stops the running turn
        self._answered: str | None = None  # this turn's answer, once handed to on_answer
        self.interrupting = False  # the stop is an interrupt for a new message (midturn.py)
        self._steers: list[str] = []  # steered texts the CLI has not echoed back yet
        self._steered = False

    def options(self, resume: str | None) -> ClaudeAgentOptions:
        return ClaudeAgentOptions(
            cwd=str(self.config.group_dir),
            permission_mode="bypassPermissions",
            disallowed_tools=list(BLOCKED_TOOLS),
            include_partial_messages=True,  # every stream event touches the heartbeat
            mcp_servers={**extra_mcp_servers(), SERVER_NAME: build_server(self.tool_ctx)},
            hooks=make_hooks(self.store, self.on_event),
            # project: the group's CLAUDE.md (cwd); user: $HOME/.claude in the session folder.
            setting_sources=["project", "user", "local"],
            **approved_skills(),  # only what the owner approved and the host mounted, never a SKILL.md the agent wrote
            system_prompt={"type": "preset", "preset": "claude_code",
                           "append": system_prompt_append(self.config, self.store.destination_labels(),
                                                          self.memory_for(resume))},
            resume=resume,
            # each user message the CLI takes is echoed back: how a steer is seen taken (midturn.py)
            extra_args={"replay-user-messages": None},
            effort=self.config.effort,  # the owner's choice for this agent (none: the CLI's own)
            env=self.cli_env(),
            stderr=lambda line: log.info("cli: %s", line.rstrip()[:500]),
        )

    def memory_for(self, resume: str | None) -> str:
        """The memory snapshot of this conversation: the host's current one for a new conversation, kept
        in our state and used again when the conversation resumes (a change shows from the next one,
        and the prompt cache stays warm)."""
        kept = self.store.get_state(MEMORY_KEY)
        if resume and kept is not None:
            return kept
        text = memory_text(self.store.option("memory"), self.store.option("memory_scope"))
        self.store.set_state(MEMORY_KEY, text)
        return text

    def memory_due(self, window: int) -> bool:
        """Whether the next turn should wait for a memory save: the context passed 80 % of the model's
        window (the CLI compacts soon) and no save has run since. Below 80 % again (compacted), armed again."""
        if self.context_tokens < 0.8 * window:
            self.memory_saved = False
            return False
        return not self.memory_saved

    async def new_conversation(self) -> None:
        """/clear: a new SDK conversation, with the memory as it is now."""
        await self._drop_client()
        self._remember_session(None)
        self.store.set_state(MEMORY_KEY, None)
        self.context_tokens, self.memory_saved = 0, False
        self.client = await self._connect(None)

    def cli_env(self) -> dict[str, str]:
        # model calls straight to the proxy's socket (the CLI's own option), one hop less than
        # through the bridge; the bridge stays for everything else (HTTPS_PROXY: pip, WebFetch)
        direct = {"ANTHROPIC_UNIX_SOCKET": self.config.proxy_socket} if self.config.proxy_socket else {}
        return {
            **direct,
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": PLACEHOLDER_API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1", "MCP_TOOL_TIMEOUT": "660000",  # ask_agent waits up to 10 minutes
            "CLAUDE_CODE_MAX_RETRIES": self.config.cli_max_retries,
            # which of the agent's sessions a call is for: the proxy counts its cost there
            **({"ANTHROPIC_CUSTOM_HEADERS": f"x-nanoclaw-session: {self.config.session_id}"}
               if self.config.session_id else {}),
            # one lasting memory, the host's (the memory tool): not also the CLI's own, per session folder
            "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
            # the owner approves each extra MCP server (add_mcp_server) and the agent is told so:
            # its tools are listed to the model directly, not deferred behind a ToolSearch step
            "ENABLE_TOOL_SEARCH": "false",
            # the agent's model, when the owner chose one: every call the CLI makes names it (the door
            # refuses any other); no fallback_model here, the door fails over
            **{name: value for name in MODEL_VARIABLES if (value := os.environ.get(name))},
        }

    async def connect(self) -> None:
        """Start the CLI, resuming the stored conversation; a resume that fails (transcript gone)
        starts a new conversation rather than leaving the chat without an agent."""
        started = time.monotonic()
        if self.session_id and not transcript_exists(Path.home(), self.session_id):
            log.warning("no transcript for session %s under $HOME; starting a new conversation", self.session_id)
            self._remember_session(None)
        try:
            self.client = await self._connect(self.session_id)
        except Exception as e:  # noqa: BLE001 - any failure to resume: start fresh
            if not self.session_id:
                raise
            log.warning("resume of session %s failed (%s); starting a new conversation",
                        self.session_id, type(e).__name__)
            self._remember_session(None)
            self.client = await self._connect(None)
        log.info("sdk connected in %.0f ms (resume=%s)", (time.monotonic() - started) * 1000,
                 bool(self.session_id))

    async def _connect(self, resume: str | None) -> ClaudeSDKClient:
        client = ClaudeSDKClient(self.options(resume))
        await client.connect()
        return client

    def _remember_session(self, session_id: str | None) -> None:
        if session_id != self.session_id:
            self.session_id = session_id
            self.store.set_state(SDK_SESSION_KEY, session_id)
            log.info("sdk session id %s", session_id)

    def _observe(self, msg) -> None:
        self.on_event()
        if isinstance(msg, SystemMessage) and msg.subtype == "init":
            sid = msg.data.get("session_id")
            if isinstance(sid, str) and sid:
                self._remember_session(sid)
        elif isinstance(msg, ResultMessage) and msg.session_id:
            self._remember_session(msg.session_id)

    def rest(self) -> None:
        """Stop the idle CLI (freezer.py); run_turn and close continue it."""
        self.freezer.freeze(self.cli_pid())

    def cli_pid(self) -> int | None:
        transport = getattr(self.client, "_transport", None)  # the SDK names no public handle
        return getattr(getattr(transport, "_process", None), "pid", None)

    async def run_turn(self, prompt: str, blocks: list[dict] | None = None,
                       on_answer: Callable[[str], None] | None = None,
                       on_stream: Callable[[str, bool], None] | None = None) -> TurnResult:
        """One turn; `blocks` (images, PDFs: media.Shown) follow the prompt in the same user message.
        `on_answer(text)` is told the answer when the model ends its turn, before the CLI's result
        (AnswerWatch); the result then only confirms it (result.answered). `on_stream(text, block_ended)`
        is told the answer so far as it is written (stream.py). A stop (self.stopping)
        interrupts the CLI mid-turn: tool processes end with it and the turn's result is `stopped`."""
        self.freezer.thaw()
        if self.client is None:
            try:
                await self.connect()
            except Exception as e:  # noqa: BLE001
                log.error("sdk connect failed: %s", type(e).__name__)
                return TurnResult(error=short_reason(None, str(e)))
        self.stopping.clear()
        self._answered, self.interrupting, self._steers, self._steered = None, False, [], False
        talk = asyncio.ensure_future(self._talk(prompt, blocks or [], on_answer, on_stream))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({talk, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        result = talk.result() if talk.done() else await self._stop(talk)
        if result.stopped and self.interrupting:
            result.stopped, result.interrupted = False, True
        result.answered = self._answered  # kept whatever came after it (a failure after the answer went out)
        if result.error:
            log.warning("turn failed: %s", result.error)
        return result

    @property
    def answered_early(self) -> bool:
        """The turn's answer went out when the model ended its turn: too late to steer it."""
        return self._answered is not None

    async def steer(self, text: str) -> None:
        """Write a message to the CLI mid-turn (the SDK's streaming input). The CLI places it in the
        running turn, or runs it as a turn of its own right after; either way _talk reads on to the
        last result and the answers go out as one."""
        self._steered = True
        self._steers.append(text)
        await self.client.query(text)

    def _echoed(self, msg) -> None:
        """A user message the CLI took (replay-user-messages): steers it holds are no longer pending."""
        content = msg.content if isinstance(msg.content, str) else " ".join(
            getattr(b, "text", "") for b in msg.content or [])
        self._steers = [t for t in self._steers if t.strip()[:200] not in content]

    async def _stop(self, talk: asyncio.Future) -> TurnResult:
        """The host stopped the turn: interrupt the CLI and let it end the turn; one that does not
        within _STOP_SETTLE_S is dropped (its process and the tools' with it)."""
        log.info("turn stopped by the host; interrupting the CLI")
        try:
            async with asyncio.timeout(_STOP_SETTLE_S):
                await self.client.interrupt()
                await asyncio.shield(talk)
        except Exception as e:  # noqa: BLE001 - a CLI that does not settle is started again next turn
            log.warning("the stopped turn did not settle (%s); restarting the CLI", type(e).__name__)
            talk.cancel()
            await self._drop_client()
        return TurnResult(stopped=True)

    async def _talk(self, prompt: str, blocks: list[dict], on_answer, on_stream) -> TurnResult:
        result = TurnResult()
        last_text: list[str] = []
        answers: list[str] = []
        watch, streamer = AnswerWatch(), Streamer()

        def handle(msg) -> None:
            nonlocal last_text
            self._observe(msg)
            if on_stream is not None and self._answered is None:
                shown = streamer.feed(msg)
                if shown is not None:
                    on_stream(shown, not streamer.in_text)
            answer = watch.feed(msg) if on_answer is not None and self._answered is None else None
            if answer is not None and not self.stopping.is_set() and not self._steered:
                on_answer(answer)
                self._answered = answer
            if isinstance(msg, StreamEvent):
                return
            if isinstance(msg, UserMessage):
                if self._steers:
                    self._echoed(msg)
            elif isinstance(msg, AssistantMessage) and msg.parent_tool_use_id is None:
                texts = [b.text for b in msg.content if isinstance(b, TextBlock)]
                if texts:
                    last_text = texts
                if isinstance(msg.usage, dict):
                    self.context_tokens = sum(int(msg.usage.get(k) or 0) for k in CONTEXT_FIELDS)
            elif isinstance(msg, ResultMessage):
                if msg.is_error:
                    result.error = short_reason(msg.api_error_status, msg.result or
                                                "; ".join(msg.errors or []), msg.subtype)
                    result.status = msg.api_error_status
                else:
                    answers.append(msg.result if msg.result is not None else "\n".join(last_text))
                    result.text = "\n\n".join(a for a in answers if a.strip())
                    if self._answered is not None and result.text != self._answered:
                        log.warning("the result's text is not the answer sent when the model ended its turn")
                last_text = []

        try:
            async with asyncio.timeout(self.config.turn_timeout_s):
                await self._send(prompt, blocks)
                async for msg in self.client.receive_response():
                    handle(msg)
                while self._steers and not result.error:  # a steer the CLI runs as a turn of its own
                    if not await self._read_on(handle):
                        log.warning("a steered message was not taken up by the CLI")
                        break
        except TimeoutError:
            log.warning("turn exceeded %.0f s; interrupting", self.config.turn_timeout_s)
            result = TurnResult(error=f"it took longer than {self.config.turn_timeout_s:.0f} s and was stopped",
                                timed_out=True)
            await self._wind_down()
        except ResultError as e:  # the CLI exited after an error result
            log.error("sdk result error: status=%s subtype=%s", e.api_error_status, e.subtype)
            result = TurnResult(error=short_reason(e.api_error_status, e.result, e.subtype), status=e.api_error_status)
            await self._drop_client()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the CLI died or the stream broke: start it again next turn
            log.error("sdk turn failed: %s: %s", type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
            result = TurnResult(error="the agent process stopped unexpectedly")
            await self._drop_client()
        return result

    async def _read_on(self, handle) -> bool:
        """The next response, to its result; False when the CLI starts none within STEER_WAIT_S."""
        messages = self.client.receive_response().__aiter__()
        try:
            first = await asyncio.wait_for(messages.__anext__(), STEER_WAIT_S)
        except (TimeoutError, StopAsyncIteration):
            return False
        handle(first)
        async for msg in messages:
            handle(msg)
        return True

    async def _send(self, prompt: str, blocks: list[dict]) -> None:
        """Hand the prompt to the CLI; one that died while idle is started again, once."""
        try:
            await self.client.query(user_message(prompt, blocks))
        except CLIConnectionError as e:
            log.warning("the CLI was gone (%s); starting it again", type(e).__name__)
            await self._drop_client()
            await self.connect()
            await self.client.query(user_message(prompt, blocks))

    async def _wind_down(self) -> None:
        """After a timeout: interrupt, and read the turn out to its result so the next prompt starts
        clean; if the CLI does not come back, drop it (the next turn starts a new one)."""
        try:
            async with asyncio.timeout(_RECOVER_S):
                await self.client.interrupt()
                async for msg in self.client.receive_response():
                    self._observe(msg)
        except Exception as e:  # noqa: BLE001
            log.warning("interrupt did not settle (%s); restarting the CLI", type(e).__name__)
            await self._drop_client()

    async def _drop_client(self) -> None:
        self.freezer.thaw()
        client, self.client = self.client, None
        if client is None:
            return
        try:
            async with asyncio.timeout(_RECOVER_S):
                await client.disconnect()
        except Exception as e:  # noqa: BLE001
            log.warning("disconnect failed: %s", type(e).__name__)

    async def close(self) -> None:
        await self._drop_client()


def user_message(prompt: str, blocks: list[dict]):
    """The prompt as the SDK takes it: the plain string, or, with blocks, one streamed user message
    whose content is the text followed by the blocks (the SDK's streaming input)."""
    if not blocks:
        return prompt

    async def one():
        yield {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}, *blocks]},
               "parent_tool_use_id": None}
    return one()


def transcript_exists(home: Path, session_id: str) -> bool:
    """Whether the CLI's transcript for session_id is on disk under $HOME."""
    return any((home / ".claude" / "projects").glob(f"*/{session_id}.jsonl"))
