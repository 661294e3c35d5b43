"""The runner's loop: notice new work in inbound.db, run one turn, write its outcome.

Latency: the host's commit to inbound.db is a file event in host/, which wakes the loop at once
(nudge.py); a cheap stamp (file stat + SQLite data_version) tells whether rows changed, and only
then are they queried. Without a nudge the loop still looks every `poll_interval_s` (1 s): the
safety net, and `process_after` times come due by the clock alone. Without inotify it polls every
FALLBACK_POLL_S.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from datetime import datetime
from typing import Any

from . import freezer, nudge
from .midturn import TurnWatch
from . import session_schema as schema
from .attachments import attachment_line
from .config import RunnerConfig
from .formatter import Message, format_messages, format_outbound
from .mcp_tools import ToolContext, Turn
from .media import Shown
from .provider import ClaudeProvider, TurnResult
from .reasons import failure_text
from .selection import InboundRow, TurnPlan, forget_bumped, is_due, plan_turn, reply_target
from .store import SessionStore

BUDGET_STATUS = 402  # the proxy's answer to a call the agent's budget does not allow (nanoclaw/usage)

log = logging.getLogger("agent_runner.loop")

FULL_CHECK_S = 1.0
FALLBACK_POLL_S = 0.05
# Between turns the heartbeat only tells the sweep the sandbox lives (it stops one silent for 30 min;
# a turn beats with each SDK event): once a minute is plenty, and each beat wakes the host's watchers
# (a local sandbox) or makes a push through the door (a remote one).
IDLE_HEARTBEAT_S = 60.0
STREAM_WRITE_S = 0.25  # the answer so far is written at most this often (the host edits far less often)
EVENT_HEARTBEAT_S = 0.2  # at most this often per SDK event (a stream yields hundreds)
_KIND_SENDERS = {"task": "Scheduled task", "system": "System"}


def to_message(row: InboundRow, shown: Shown | None = None) -> Message:
    """One row as the prompt shows it; with `shown`, its pictures and PDFs become content blocks."""
    c: dict[str, Any] = row.content
    text = str(c.get("text") or "")
    for a in c.get("attachments") or []:
        line = attachment_line(a, shown.note(a) if shown else None)
        if line:
            text += f"\n{line}"
    reply = c.get("reply_to") if isinstance(c.get("reply_to"), dict) else {}
    sender = c.get("sender") or c.get("sender_name") or _KIND_SENDERS.get(row.kind) or c.get("sender_id") or "unknown"
    return Message(sender_name=str(sender), content=text, timestamp=row.timestamp,
                   reply_to_message_id=_str(reply.get("id")), reply_to_message_content=_str(reply.get("text")),
                   reply_to_sender_name=_str(reply.get("sender")))


def _str(v) -> str | None:
    return None if v is None else str(v)


# Slash commands the host let through (only from admins; see nanoclaw/inbound/commands.py): the SDK runs
# them itself when they are the whole prompt.
COMMAND_DONE = {"/clear": "Conversation cleared: I start fresh from here.",
                "/compact": "Conversation compacted: I keep a summary and drop the details."}


def sdk_command(row: InboundRow) -> str | None:
    """'/compact keep the todo list' for a row the router marked as that command, else None."""
    command = row.content.get("command") if isinstance(row.content, dict) else None
    if f"/{command}" not in COMMAND_DONE:
        return None
    words = str(row.content.get("text") or "").split(None, 1)
    return f"/{command}" + (f" {words[1]}" if len(words) > 1 else "")


def build_prompt(batch: list[InboundRow], tz: str, already_sent: list[dict] | None = None,
                 shown: Shown | None = None) -> str:
    prompt = format_messages([to_message(r, shown) for r in batch], tz)
    note = already_sent_note(already_sent or [])
    return f"{note}\n{prompt}" if note else prompt


def build_turn(batch: list[InboundRow], tz: str, already_sent: list[dict], inbound_dir) -> tuple[str, list[dict]]:
    """The prompt and the image and document blocks that go with it (decoding runs in workers)."""
    shown = Shown(inbound_dir)
    prompt = build_prompt(batch, tz, already_sent, shown)
    return prompt, shown.blocks


def has_attachments(batch: list[InboundRow]) -> bool:
    return any(r.content.get("attachments") for r in batch)


def already_sent_note(sent: list[dict]) -> str:
    """A retried turn is told what already went out (seed 001 §5.2: no duplicates rather than no
    lost context), so it carries on instead of saying it again (pure)."""
    if not sent:
        return ""
    lines = []
    for i, op in enumerate(sent, 1):
        what = {"text": lambda o: f"a message: “{str(o.get('text', ''))[:300]}”",
                "file": lambda o: f"the file {o.get('path', '?')}",
                "card": lambda o: f"a card titled “{o.get('title', '')}”"}[op["op"]](op)
        lines.append(f"{i}. {what}")
    return ("<already_sent>Your previous attempt at answering these messages was interrupted after you had "
            "already sent:\n" + "\n".join(lines) + "\nDo not send those again; carry on from there.</already_sent>")


SAVE_MEMORY_PROMPT = ("<internal>The earlier part of this conversation will soon be compacted into a summary. "
                      "Before that: save what matters for later conversations with the memory tool (add, replace or "
                      "remove entries). Answer nothing: no message is sent from this turn.</internal>")


class PollLoop:
    def __init__(self, config: RunnerConfig, store: SessionStore, provider: ClaudeProvider, tool_ctx: ToolContext):
        self.config = config
        self.store = store
        self.provider = provider
        self.tool_ctx = tool_ctx
        self.released: dict[str, int] = {}  # rows we gave back after a failed turn -> their tries then
        self.owed: set[str] = set()  # rows this CLI was shown in a failed turn, not answered yet (selection.py)
        self.in_flight: list[str] = []
        self.waiting = 0  # rows seen that wait for a message that starts a turn
        self.next_due_in: float | None = None  # seconds until the next deferred row is due (none: None)
        self.budget_spent = False  # a model call was refused for the budget: stop, the host starts us again

    def next_turn(self) -> TurnPlan | None:
        now = schema.utc_now_iso()
        rows = self.settle_stopped(self.store.pending_rows())
        forget_bumped(self.released, [r for r, _ in rows])
        self.owed &= {r.id for r, _ in rows}  # answered, or no longer pending
        due = [r for r, after in rows if is_due(after, now)]
        self.next_due_in = seconds_until(min((a for _r, a in rows if not is_due(a, now)), default=None), now)
        acked = self.store.acked_ids([r.id for r in due])
        plan = plan_turn(due, acked, self.released, self.config.max_messages, self.owed)
        waiting = 0 if plan else sum(1 for r in due if r.id not in acked and r.id not in self.released)
        if waiting and waiting != self.waiting:  # said once per change: why nothing is answered yet
            log.info("%d message(s) kept as context until one is for me", waiting)
        self.waiting = waiting
        return plan

    def streaming(self, answering_id: str):
        """The turn's writer of its answer so far (None when the chat's wiring turned streaming off):
        at most every STREAM_WRITE_S, and whenever a block of text ends (a tool call may follow)."""
        if self.store.option("stream") != "on":
            return None
        last = {"at": 0.0, "text": ""}

        def on_stream(text: str, block_ended: bool) -> None:
            now = time.monotonic()
            if text == last["text"] or (now - last["at"] < STREAM_WRITE_S and not block_ended):
                return
            try:
                self.store.set_stream(answering_id, text)
            except sqlite3.Error as exc:  # a courtesy: the answer itself is a row of its own
                log.warning("could not write the answer so far: %s", exc)
                return
            last.update(at=now, text=text)
        return on_stream

    def settle_stopped(self, rows: list) -> list:
        """Rows of a turn the host stopped count as answered: completed here, never tried again (a
        runner that stopped mid-stop leaves them pending)."""
        stop = set(schema.stopped_ids(self.store.option(schema.STOP_OPTION))) if rows else set()
        done = [r.id for r, _ in rows if r.id in stop]
        if done:
            self.store.finish_turn(done, None, None, in_reply_to=None, ok=True)
            log.info("%d message(s) of a stopped turn completed without an answer", len(done))
        return [(r, a) for r, a in rows if r.id not in stop]

    async def run_command(self, command: str) -> TurnResult:
        """/clear starts a new conversation (with the memory as it is now); /compact first lets the agent
        save what matters, then the CLI compacts."""
        if command.split()[0] == "/clear":
            try:
                await self.provider.new_conversation()
            except Exception as e:  # noqa: BLE001 - the next turn connects again
                return TurnResult(error=f"could not start a new conversation ({type(e).__name__})")
            return TurnResult(text=COMMAND_DONE["/clear"])
        await self.save_memory("asked to compact the conversation")
        return await self.provider.run_turn(command)

    async def save_memory(self, why: str) -> None:
        """One silent turn: the agent may keep what matters with its memory tool; nothing it says or
        sends goes to a chat (the chat tools refuse meanwhile)."""
        log.info("memory save before compaction (%s)", why)
        self.tool_ctx.silent = True
        try:
            result = await self.provider.run_turn(SAVE_MEMORY_PROMPT)
        finally:
            self.tool_ctx.silent = False
        self.provider.memory_saved = True
        if result.error:
            log.warning("the memory save turn failed: %s", result.error)

    async def run_turn(self, plan: TurnPlan) -> TurnResult:
        batch = plan.batch
        ids = [r.id for r in batch]  # grown by a steered message (midturn.py); a good answer completes these
        self.store.claim(ids)
        self.in_flight = ids
        target = reply_target(batch, self.store.routing())
        answering = next((r for r in reversed(batch) if r.trigger), batch[-1])
        self.tool_ctx.turn = Turn(reply_to=target, in_reply_to=answering.id)
        log.info("turn start: %d message(s), seq %d..%d", len(batch), batch[0].seq, batch[-1].seq)
        started = time.monotonic()
        command = sdk_command(answering)
        try:
            if command:
                result = await self.run_command(command)
            else:
                if self.provider.memory_due(self.config.context_window):
                    await self.save_memory("the conversation is long: the model's context is nearly full")
                sent = self.store.already_sent(ids)  # the store's connection stays on this thread
                turn = (batch, self.config.timezone, sent, self.config.inbound_dir)
                # pictures and PDFs are read and encoded off the loop; text alone is formatting, with no
                # thread hop (traced: ~1 ms before the model is asked)
                prompt, blocks = (await asyncio.to_thread(build_turn, *turn) if has_attachments(batch)
                                  else build_turn(*turn))

                def answer_now(text: str) -> None:
                    """The turn's answer and its rows' outcome, as soon as the model ends its turn."""
                    self._finish_ok(ids + [r.id for r in plan.superseded], text, target, answering.id)
                watch = asyncio.ensure_future(TurnWatch(
                    self.store, self.provider, ids, mode=self.store.option("while_busy") or "queue",
                    tz=self.config.timezone, to_message=to_message).run())
                try:
                    result = await self.provider.run_turn(prompt, blocks, on_answer=answer_now,
                                                          on_stream=self.streaming(answering.id))
                finally:
                    watch.cancel()
        finally:
            self.tool_ctx.turn = Turn()
        if command and not result.error and not (result.text or "").strip():
            result.text = COMMAND_DONE[command.split()[0]]
        if result.status == BUDGET_STATUS and result.answered is None:
            # the agent's budget is spent: not a failure of this message, which waits (the host tells
            # the chat, and starts this session again once the budget allows)
            self.store.release(ids)
            self.in_flight = []
            self.store.set_tool(None)
            self.budget_spent = True
            log.warning("turn refused: the agent's budget is spent; the messages wait and this runner stops")
            return result
        if result.answered is not None:  # done when the model ended its turn (answer_now)
            if result.error:
                log.warning("the turn failed after its answer went out: %s", result.error)
        elif result.stopped:  # answered as far as anyone wants: nothing sent, never tried again
            self.store.finish_turn(ids + [r.id for r in plan.superseded], None, target, in_reply_to=answering.id,
                                   ok=True)
        elif result.interrupted:  # a new message interrupted it: the next turn takes these rows with it
            self.store.release(ids)
        elif result.error:
            self.store.finish_turn(ids, {"op": "text", "text": failure_text(result.error, result.timed_out)}, target,
                                   in_reply_to=answering.id, ok=False)
            self.released.update({r.id: r.tries for r in batch})
            self.owed.update(r.id for r in batch)
        else:
            self._finish_ok(ids + [r.id for r in plan.superseded], result.text, target, answering.id)
        self.in_flight = []
        self.store.set_tool(None)
        outcome = "stopped" if result.stopped else "interrupted" if result.interrupted else \
            "failed" if result.error else "ok"
        log.info("turn end: %s in %.0f ms", outcome, (time.monotonic() - started) * 1000)
        if target is None:
            log.warning("no routing for this session: the turn's answer had nowhere to go")
        return result

    def _finish_ok(self, ids: list[str], text: str, target, in_reply_to: str) -> None:
        text = format_outbound(text)
        self.store.finish_turn(ids, {"op": "text", "text": text, "answer": True} if text else None, target,
                               in_reply_to=in_reply_to, ok=True)
        self.in_flight = []  # completed: a stop from here on has nothing to give back

    def _watch_inbound(self, wake: asyncio.Event) -> tuple[nudge.Watcher | None, float]:
        """The inotify watch on host/ (when nudges are on and work) and how long to sleep without one."""
        if not self.config.nudges:
            return None, self.config.poll_interval_s
        try:
            watcher = nudge.Watcher((schema.INBOUND,))
            if not watcher.watch(self.store.inbound_dir):
                raise nudge.Unavailable(f"{self.store.inbound_dir} cannot be watched")
        except OSError as exc:
            log.warning("no nudges (%s): looking at inbound.db every %.0f ms", exc, FALLBACK_POLL_S * 1000)
            return None, min(FALLBACK_POLL_S, self.config.poll_interval_s)

        def readable() -> None:
            if watcher.drain():
                wake.set()
        asyncio.get_running_loop().add_reader(watcher.fileno(), readable)
        return watcher, self.config.poll_interval_s

    async def run(self, stop: asyncio.Event) -> None:
        last_stamp: tuple | None = None
        last_full = last_beat = 0.0
        idle_since = time.monotonic()
        wake = asyncio.Event()
        watcher, interval = self._watch_inbound(wake)
        try:
            while not stop.is_set():
                wake.clear()  # before looking: a commit from here on wakes the next sleep
                now = time.monotonic()
                pause = interval
                stamp = self.store.inbound_stamp()
                if stamp != last_stamp or now - last_full >= FULL_CHECK_S:
                    last_stamp, last_full = stamp, now
                    try:
                        plan = self.next_turn()
                    except sqlite3.Error as e:  # the host mid-write or mid-create: look again soon
                        log.warning("inbound.db not readable now: %s", e)
                        plan, last_stamp, pause = None, None, FALLBACK_POLL_S
                    if plan:
                        self.provider.freezer.thaw()  # first: the CLI catches up while the prompt is built
                        await self.run_turn(plan)
                        if self.budget_spent:
                            break
                        last_full = last_beat = 0.0  # look again at once: more may have come meanwhile
                        idle_since = time.monotonic()
                        continue
                if freezer.is_due(idle_since, now, self.config.freeze_idle_s, self.provider.freezer.frozen):
                    self.provider.rest()
                if now - last_beat >= IDLE_HEARTBEAT_S:
                    self.store.touch_heartbeat()
                    last_beat = now
                if watcher is not None and pause == interval:  # nothing failed: sleep until time matters
                    pause = quiet_pause(now, last_beat, self.next_due_in, freeze_ahead(
                        idle_since, now, self.config.freeze_idle_s, self.provider.freezer.frozen))
                await _first(stop, wake, pause)
        finally:
            if watcher is not None:
                asyncio.get_running_loop().remove_reader(watcher.fileno())
                watcher.close()
            if self.in_flight:  # stopped mid-turn: give the rows back for the next runner
                self.store.release(self.in_flight)
                self.in_flight = []


def quiet_pause(now: float, last_beat: float, due_in: float | None, freeze_in: float | None) -> float:
    """How long a runner with nudges may sleep: only time can make work due (a deferred row's
    moment, the next heartbeat stuck detection needs, the CLI's freeze), since every host commit
    wakes it. Pure: seconds, at least a few milliseconds."""
    until = [last_beat + IDLE_HEARTBEAT_S - now]
    until += [t for t in (due_in, freeze_in) if t is not None]
    return max(0.005, min(until))


def freeze_ahead(idle_since: float, now: float, after_s: float, frozen: bool) -> float | None:
    """Seconds until the idle CLI is to be stopped; None when that is not ahead (off, done, or
    already due: with no CLI to stop it stays due, and must not make the loop spin)."""
    left = idle_since + after_s - now
    return left if after_s > 0 and not frozen and left > 0 else None


def seconds_until(iso: str | None, now_iso: str) -> float | None:
    """From now to a UTC time of the schema's format (None for none)."""
    if iso is None:
        return None
    parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    try:
        return (parse(iso) - parse(now_iso)).total_seconds()
    except ValueError:
        return 0.0  # a time we cannot read: look now, as for any due row


async def _first(stop: asyncio.Event, wake: asyncio.Event, timeout: float) -> None:
    """Sleep until stop, a nudge, or the timeout, whichever comes first."""
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
