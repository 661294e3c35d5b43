"""Counting and capping what model calls cost, where every call passes: the proxy's model route.

Before a call leaves the machine (`admit`): the agent's budget (usage/budgets.py) against what the
ledger has for it today and this month plus what its calls in flight may still cost. Each admitted
call holds a reservation, the estimate of usage/estimate.py, until its answer is counted, so calls
started together cannot each take the same room: a call waits (up to RESERVE_WAIT_S) while calls in
flight might use up the rest, and is refused with 402 once the spent money alone reaches the limit
(the refusal is recorded: a `block` budget event, so the web program tells the chat once and gives
the owner a card). After the response has been relayed in full (`done`, never holding it back):
the usage it reported is priced and added to the ledger, or, for a successful answer that reported
none (an encoding the meter cannot read, a body cut short), the estimate is; crossing 80 % of a
limit is recorded (a `warn` event).

The session a call belongs to is the one the runner names in `x-nanoclaw-session` (the header goes
no further). It is the agent's word, so it is believed only for a session of this same agent, and
only to say which of the agent's sessions spent the money: budgets are per agent, and the agent
the call is charged to is the socket's, which the caller cannot choose.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import peewee

from .. import metrics
from ..db import database
from ..models import AgentGroup, Session, new_token, utcnow
from ..usage import budgets, estimate, ledger, prices
from ..usage.meter import Meter
from ..usage.tables import BudgetEvent
from ..db import announce

log = logging.getLogger("nanoclaw.proxy.spending")

SESSION_HEADER = "x-nanoclaw-session"
RESERVE_WAIT_S = 60.0   # how long a call waits for the agent's calls in flight to say what they cost
MAX_IN_FLIGHT = 2       # a budgeted agent's metered calls at once (subagents' too): an overshoot is bounded
IN_FLIGHT_WAIT_S = 60.0
RETRY_AFTER_S = 5


class Busy(str):
    """Why a call waited its turn in vain: answered 429 with retry-after (the CLI retries it)."""


def may_fly(flying: int, queue: list, me) -> bool:
    """Whether this call may go now (pure): fewer than MAX_IN_FLIGHT in flight and first in arrival order."""
    return flying < MAX_IN_FLIGHT and bool(queue) and queue[0] is me


@dataclass(frozen=True)
class Ticket:
    """An admitted call: its estimate, and whether that is held in the agent's reservations."""
    estimate_micro: int
    body_bytes: int
    max_tokens: int | None
    model: str | None
    held: bool


class Spending:
    def __init__(self, settings, clock=ledger.now):
        self.tz = settings.timezone
        self.data_dir = settings.data_dir  # where to announce a budget event (db.py: changes told)
        self.clock = clock  # which day it is for the ledger and the budgets (a test's own clock moves it)
        self.table = prices.load(settings.prices_file)
        self.limits = budgets.LimitCache()
        self._sessions: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()
        self._logged_at = -1e9
        self._reserved: dict[str, int] = {}                 # agent folder -> micro-USD held by calls in flight
        self._agent_locks: dict[str, threading.Condition] = {}
        self._estimated: set[str] = set()                   # models already logged as charged by estimate
        self._flying: dict[str, int] = {}                   # agent folder -> metered calls in flight
        self._queues: dict[str, list] = {}                  # agent folder -> calls waiting, in arrival order

    def _agent(self, folder: str) -> threading.Condition:
        with self._lock:
            return self._agent_locks.setdefault(folder, threading.Condition())

    def reserved(self, folder: str) -> int:
        with self._lock:
            return self._reserved.get(folder, 0)

    def session_of(self, request) -> str:
        claimed = next((v for n, v in request.headers if n.lower() == SESSION_HEADER), "")[:64]
        if not claimed:
            return ""
        key = (request.folder, claimed)
        with self._lock:
            known = self._sessions.get(key)
        if known is None:
            row = (Session.select(Session.id).join(AgentGroup)
                   .where(Session.id == claimed, AgentGroup.folder == request.folder).first())
            known = row is not None
            with self._lock:
                self._sessions[key] = known
        return claimed if known else ""

    def free_ticket(self, request, head: estimate.Head) -> Ticket:
        """A call to a free upstream: nothing reserved, never refused."""
        return Ticket(0, len(request.body), head.max_tokens, head.model, held=False)

    def admit(self, request, head: estimate.Head, price: prices.Price | None = None, *,
              wait: bool = True, tell: bool = True) -> Ticket | str:
        """A ticket for a call that may go (its reservation, the estimate at `price`, the dearest rate of
        what the call may end on, held until `done`), or why it may not. wait=False: no wait for the
        calls in flight; tell=False: a refusal is not recorded as a block (the door has a free model to
        use instead). Without its database the proxy cannot tell and lets the call go (logged): a model
        call is not refused for an outage."""
        price = price or prices.dearest(self.table)
        cost = prices.micro_usd(estimate.tokens(len(request.body), head.max_tokens), price)
        free = Ticket(cost, len(request.body), head.max_tokens, head.model, held=False)
        try:
            _connect()
            limits = self.limits.of(request.folder)
            if limits.daily_micro is None and limits.monthly_micro is None:
                return free
            agent = self._agent(request.folder)
            if not self._take_off(request.folder, agent):
                return Busy(f"nanoclaw: agent '{request.folder}' has {MAX_IN_FLIGHT} model calls under way (the most "
                            f"while it has a budget); try again in {RETRY_AFTER_S} s")
            try:
                result = self._reserve(request, head, agent, limits, cost, wait)
            except BaseException:
                self._land(request.folder, agent)
                raise
            if not isinstance(result, Ticket):
                self._land(request.folder, agent)  # refused: its place goes to the next
                return self._refused(request, tell, *result)
            return result
        except Exception as exc:  # noqa: BLE001 - the database is away or not set up (a bare proxy)
            self._unreadable(exc)
            return free

    def _take_off(self, folder: str, agent: threading.Condition) -> bool:
        """Wait (in arrival order, up to IN_FLIGHT_WAIT_S) for a place among the agent's calls in flight."""
        me = object()
        deadline = time.monotonic() + IN_FLIGHT_WAIT_S
        with agent:
            queue = self._queues.setdefault(folder, [])
            queue.append(me)
            try:
                while not may_fly(self._flying.get(folder, 0), queue, me):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    agent.wait(left)
                self._flying[folder] = self._flying.get(folder, 0) + 1
                return True
            finally:
                queue.remove(me)
                agent.notify_all()

    def _land(self, folder: str, agent: threading.Condition) -> None:
        with agent:
            self._flying[folder] = max(0, self._flying.get(folder, 0) - 1)
            agent.notify_all()

    def _reserve(self, request, head, agent, limits, cost, wait) -> Ticket | tuple:
        """The reservation under the agent's lock: a held ticket, or (verdict, held) when it may not go."""
        deadline = time.monotonic() + RESERVE_WAIT_S
        with agent:
            while True:
                # read under the agent's lock: `done` records a call before it lets its reservation go,
                # so each call's cost is in `spent` or in `reserved` whenever this looks
                day = ledger.today(self.tz, self.clock())
                spent = ledger.spent(request.folder, day)
                held = self.reserved(request.folder)
                verdict = budgets.verdict(limits, spent, day, held)
                if not verdict.blocked:
                    with self._lock:
                        self._reserved[request.folder] = held + cost
                    return Ticket(cost, len(request.body), head.max_tokens, head.model, held=True)
                left = deadline - time.monotonic()
                if not wait or held == 0 or budgets.verdict(limits, spent, day).blocked or left <= 0:
                    return verdict, held
                agent.wait(min(left, 5.0))  # a call in flight may leave room when it is counted

    def _refused(self, request, tell: bool, verdict, held: int) -> str:
        if tell:
            self._event("block", request.folder, verdict.period, self.session_of(request), verdict.spent_micro,
                        verdict.limit_micro)
        which = "daily" if verdict.period.startswith("day:") else "monthly"
        in_flight = " with the calls under way" if held else ""
        return (f"nanoclaw: the {which} budget of agent '{request.folder}' is used up{in_flight} "
                f"({budgets.usd(verdict.spent_micro)} of {budgets.usd(verdict.limit_micro)}); it resets "
                f"{budgets.resets_at(verdict.period, self.tz):%Y-%m-%d %H:%M %Z}. The message waits until then "
                "or until the owner raises the budget.")

    def done(self, request, ticket: Ticket, status: int, meter: Meter | None, *, upstream: str = "anthropic",
             asked: str = "", switched: bool = False, table: dict | None = None) -> None:
        """The call is over: price and record what its answer reported (or the estimate, for a success
        that reported nothing) on the answering upstream's `table`, then let its reservation go."""
        try:
            if status == 200:
                self._record(request, ticket, meter, upstream, asked or ticket.model or "", switched,
                             self.table if table is None else table)
        finally:
            if ticket.held:
                agent = self._agent(request.folder)
                with agent:
                    self._flying[request.folder] = max(0, self._flying.get(request.folder, 0) - 1)
                    with self._lock:
                        left = self._reserved.get(request.folder, 0) - ticket.estimate_micro
                        if left > 0:
                            self._reserved[request.folder] = left
                        else:
                            self._reserved.pop(request.folder, None)
                    agent.notify_all()

    def _record(self, request, ticket: Ticket, meter: Meter | None, upstream: str, asked: str, switched: bool,
                table: dict) -> None:
        model, tokens = meter.result() if meter is not None else (None, prices.Tokens())
        if meter is not None and (meter.reported or meter.error):
            price = None  # what it reported; an error event before any usage cost nothing
        else:  # a success that said nothing of its usage is never free (on an upstream with prices)
            model = model or asked or "unknown"
            tokens = estimate.tokens(ticket.body_bytes, ticket.max_tokens)
            price = prices.dearest(table)
            if table and model not in self._estimated:
                self._estimated.add(model)
                why = "its encoding cannot be read" if meter is not None and meter.unreadable else "it reported none"
                log.warning("a model call of %s (%s) was answered without usage the proxy can read (%s): charged "
                            "the estimate (%d input, %d output tokens at %s's rates); logged once per model",
                            request.folder, model, why, tokens.input, tokens.output, price.name)
        try:
            _connect()
            day = ledger.today(self.tz, self.clock())
            price = price or prices.price_for(asked, model or "", table)
            cost = ledger.record(request.folder, self.session_of(request), model or "unknown", tokens, price, day,
                                 upstream=upstream, asked_model=asked, switched=switched)
            for kind in prices.PARTS:
                metrics.MODEL_TOKENS.labels(request.folder, model or "unknown", kind).inc(getattr(tokens, kind))
            metrics.MODEL_COST.labels(request.folder, model or "unknown").inc(cost / 1_000_000)
            limits = self.limits.of(request.folder)
            if limits.daily_micro is not None or limits.monthly_micro is not None:
                for period, used, limit in budgets.warnings(limits, ledger.spent(request.folder, day), day):
                    self._event("warn", request.folder, period, "", used, limit)
        except Exception as exc:  # noqa: BLE001 - never what fails a call that was answered
            self._unreadable(exc)

    def spent_up(self, folder: str) -> bool:
        """Whether the agent's budget is spent now (calls in flight aside)."""
        try:
            _connect()
            limits = self.limits.of(folder)
            if limits.daily_micro is None and limits.monthly_micro is None:
                return False
            day = ledger.today(self.tz, self.clock())
            return budgets.verdict(limits, ledger.spent(folder, day), day).blocked
        except Exception as exc:  # noqa: BLE001 - as admit: an outage refuses nothing
            self._unreadable(exc)
            return False

    def _unreadable(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._logged_at >= 60:
            self._logged_at = now
            log.error("usage and budgets cannot be read or written (%s): calls go uncounted and unchecked",
                      str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def _event(self, kind: str, folder: str, period: str, session_id: str, spent: int, limit: int) -> None:
        try:
            BudgetEvent.insert(token=new_token(), agent_folder=folder, period=period, kind=kind,
                               session_id=session_id if kind == "block" else "", spent_micro_usd=spent,
                               limit_micro_usd=limit, created_at=utcnow()).on_conflict_ignore().execute()
        except peewee.DatabaseError as exc:
            log.error("could not record a budget %s of %s: %s", kind, folder, exc)
            return
        announce(self.data_dir, "budget")  # the web program tells the owner now, not on its next look


def _connect() -> None:
    """The proxy's request threads keep a connection each (the calls of one CLI share a thread)."""
    database.connect(reuse_if_open=True)
