"""An agent's spending on its page: the last 30 days as a chart (SVG drawn here, no JavaScript), its
most expensive sessions, its budget and the form to change it (routes of the admin blueprint, each
write limited to the person's scope and the owner's ceiling: operator/budgets.set_budget)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from html import escape

from flask import flash, g, redirect, request, url_for

from .. import platforms
from ..models import MessagingGroup
from ..operator.budgets import BudgetRefused, clear_budget, set_budget
from ..sessions import store
from ..usage import ledger
from ..usage.budgets import usd
from ..usage.tables import Budget, ModelUsage
from .admin import agent_for_write, bp, forbidden, settings
from .changes import clean_why

DAYS = 30
WIDTH, HEIGHT, PAD = 600, 160, 28


@dataclass(frozen=True)
class Spending:
    days: list[tuple[date, int]]        # the last 30 days, oldest first: (day, micro-dollars)
    sessions: list[tuple[str, int, int]]  # the most expensive: (the chat's name, calls, micro-dollars)
    unpriced: list[str]                 # models priced at the dearest rate (not in the table)
    budget: Budget | None
    today_micro: int
    month_micro: int

    @property
    def total(self) -> str:
        return usd(sum(v for _d, v in self.days))


def spending_of(agent) -> Spending:
    tz = settings().timezone
    today = ledger.today(tz)
    first = today - timedelta(days=DAYS - 1)
    rows = list(ModelUsage.select().where(ModelUsage.agent_folder == agent.folder,
                                          ModelUsage.day >= first.isoformat()))
    per_day: dict[str, int] = {}
    per_session: dict[str, list[int]] = {}
    for r in rows:
        per_day[r.day] = per_day.get(r.day, 0) + r.cost_micro_usd
        if r.session_id:
            s = per_session.setdefault(r.session_id, [0, 0])
            s[0] += r.calls
            s[1] += r.cost_micro_usd
    days = [(first + timedelta(days=i), per_day.get((first + timedelta(days=i)).isoformat(), 0)) for i in range(DAYS)]
    top = sorted(((chat_name(agent, sid), c, v) for sid, (c, v) in per_session.items()), key=lambda x: -x[2])[:5]
    spent = ledger.spent(agent.folder, today)
    return Spending(days, top, sorted({r.model for r in rows if r.unpriced}),
                    Budget.get_or_none(Budget.agent_folder == agent.folder), spent.day_micro, spent.month_micro)


def chat_name(agent, session_id: str) -> str:
    """What a person calls the chat a session answers ("Olivia's DM on Telegram", "Team on Slack, a
    thread"), from the host's own records; the session id only when nothing else is known."""
    target = store.routing_of(store.session_path(settings().sessions_dir, agent.folder, session_id))
    if target is None:
        return f"session {session_id}"
    chat = MessagingGroup.get_or_none(MessagingGroup.channel_type == target.channel_type,
                                      MessagingGroup.platform_id == target.platform_id)
    name = (chat.name if chat is not None and chat.name else None) or f"{target.channel_type}:{target.platform_id}"
    where = platforms.label(target.channel_type)
    kind = "DM" if chat is not None and chat.kind == "dm" else "chat"
    thread = ", a thread" if target.thread_id and not target.thread_id.startswith("task:") else \
        ", a scheduled task's run" if target.thread_id else ""
    return f"{name} ({kind} on {where}{thread})"


def chart_svg(days: list[tuple[date, int]], daily_limit_micro: int | None = None) -> str:
    """A bar per day, scaled to the dearest day (or the daily budget, drawn as a line) (pure)."""
    top = max([v for _d, v in days] + [daily_limit_micro or 0, 1])
    width = (WIDTH - 2 * PAD) / max(len(days), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'aria-label="cost per day over the last {len(days)} days">',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>']
    for i, (day, value) in enumerate(days):
        h = (HEIGHT - 2 * PAD) * value / top
        x, y = PAD + i * width, HEIGHT - PAD - h
        parts.append(f'<rect class="bar" x="{x + 1:.1f}" y="{y:.1f}" width="{max(width - 2, 1):.1f}" '
                     f'height="{h:.1f}" data-day="{day.isoformat()}" data-usd="{value / 1e6:.4f}">'
                     f'<title>{day.isoformat()}: {escape(usd(value))}</title></rect>')
    if daily_limit_micro:
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * daily_limit_micro / top
        parts.append(f'<line class="limit" x1="{PAD}" y1="{y:.1f}" x2="{WIDTH - PAD}" y2="{y:.1f}">'
                     f'<title>daily budget {escape(usd(daily_limit_micro))}</title></line>')
    parts.append(f'<text x="{PAD}" y="{HEIGHT - 8}" class="label">{days[0][0]:%b %d}</text>'
                 f'<text x="{WIDTH - PAD}" y="{HEIGHT - 8}" class="label" text-anchor="end">{days[-1][0]:%b %d}</text>'
                 f'<text x="{PAD}" y="{PAD - 8}" class="label">{escape(usd(top))}</text></svg>')
    return "".join(parts)


def _amount(field: str) -> float | None:
    raw = (request.form.get(field) or "").strip().lstrip("$")
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise BudgetRefused(f"{raw!r} is not an amount in USD") from None


@bp.post("/admin/agents/<folder>/budget")
def budget_set(folder: str):
    agent = agent_for_write(folder)
    try:
        daily, monthly = _amount("daily"), _amount("monthly")
        if daily is None and monthly is None:
            raise BudgetRefused("give a daily or a monthly amount")
        set_budget(g.user_id, agent, daily=daily, monthly=monthly, why=clean_why(request.form.get("why")))
    except BudgetRefused as exc:
        if "administer other agents" in str(exc) or "ceiling" in str(exc):
            return forbidden(str(exc))
        flash(f"Budget not changed: {exc}", "error")
    else:
        flash(f"{agent.name}'s budget is set.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#spending")


@bp.post("/admin/agents/<folder>/budget/clear")
def budget_clear(folder: str):
    agent = agent_for_write(folder)
    try:
        clear_budget(g.user_id, agent, clean_why(request.form.get("why")))
    except BudgetRefused as exc:
        return forbidden(str(exc))
    flash(f"{agent.name} has no budget now.", "ok")
    return redirect(url_for("admin.agent", folder=folder) + "#spending")
