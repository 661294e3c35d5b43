"""Counting and capping what model calls cost, where every call passes: the proxy's model route.

Before a call leaves the machine: the agent's budget (usage/budgets.py) against what the ledger has
for it today and this month; spent up, the call is refused with 402 and the refusal recorded (a
`block` budget event: the web program tells the chat once and gives the owner a card). After the
response has been relayed in full (never holding it back): the usage it reported is priced and
added to the ledger, and crossing 80 % of a limit is recorded (a `warn` event).

The session a call belongs to is the one the runner names in `x-nanoclaw-session` (the header goes
no further). It is the agent's word, so it is believed only for a session of this same agent, and
only to say which of the agent's sessions spent the money: budgets are per agent, and the agent
the call is charged to is the socket's, which the caller cannot choose.
"""
from __future__ import annotations

import logging
import threading
import time

import peewee

from .. import metrics
from ..db import database
from ..models import AgentGroup, Session, new_token, utcnow
from ..usage import budgets, ledger, prices
from ..usage.meter import Meter
from ..usage.tables import BudgetEvent

log = logging.getLogger("nanoclaw.proxy.spending")

SESSION_HEADER = "x-nanoclaw-session"


def metered(request) -> bool:
    return request.method == "POST" and request.path.rstrip("/") == "/v1/messages"


class Spending:
    def __init__(self, settings):
        self.tz = settings.timezone
        self.table = prices.load(settings.prices_file)
        self.limits = budgets.LimitCache()
        self._sessions: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()
        self._logged_at = -1e9

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

    def refusal(self, request) -> str | None:
        """Why this call may not go (the agent's budget is spent), or None. Without its database the
        proxy cannot tell and lets the call go (logged): a model call is not refused for an outage."""
        try:
            _connect()
            limits = self.limits.of(request.folder)
            if limits.daily_micro is None and limits.monthly_micro is None:
                return None
            day = ledger.today(self.tz)
            verdict = budgets.verdict(limits, ledger.spent(request.folder, day), day)
        except Exception as exc:  # noqa: BLE001 - the database is away or not set up (a bare proxy)
            self._unreadable(exc)
            return None
        if not verdict.blocked:
            return None
        self._event("block", request.folder, verdict.period, self.session_of(request), verdict.spent_micro,
                    verdict.limit_micro)
        which = "daily" if verdict.period.startswith("day:") else "monthly"
        return (f"nanoclaw: the {which} budget of agent '{request.folder}' is used up "
                f"({budgets.usd(verdict.spent_micro)} of {budgets.usd(verdict.limit_micro)}); it resets "
                f"{budgets.resets_at(verdict.period, self.tz):%Y-%m-%d %H:%M %Z}. The message waits until then "
                "or until the owner raises the budget.")

    def after(self, request, meter: Meter) -> None:
        """Price and record what the response reported."""
        model, tokens = meter.result()
        if model is None and tokens == prices.Tokens():
            return  # nothing reported (an error before the message started)
        try:
            _connect()
            day = ledger.today(self.tz)
            price = prices.price_of(model or "", self.table)
            cost = ledger.record(request.folder, self.session_of(request), model or "unknown", tokens, price, day)
            for kind in prices.PARTS:
                metrics.MODEL_TOKENS.labels(request.folder, model or "unknown", kind).inc(getattr(tokens, kind))
            metrics.MODEL_COST.labels(request.folder, model or "unknown").inc(cost / 1_000_000)
            limits = self.limits.of(request.folder)
            if limits.daily_micro is not None or limits.monthly_micro is not None:
                for period, used, limit in budgets.warnings(limits, ledger.spent(request.folder, day), day):
                    self._event("warn", request.folder, period, "", used, limit)
        except Exception as exc:  # noqa: BLE001 - never what fails a call that was answered
            self._unreadable(exc)

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


def _connect() -> None:
    """The proxy's request threads keep a connection each (the calls of one CLI share a thread)."""
    database.connect(reuse_if_open=True)
