"""`usage` and `budget …`: what the agents' model calls cost, and what they may spend.

Figures are the proxy's ledger (usage/ledger.py): each call's tokens as the model reported them,
priced by the table in the repo (nanoclaw/usage/prices.json) or the owner's own file.
"""
from __future__ import annotations

from datetime import timedelta

import click

from ..operator.budgets import BudgetRefused, clear_budget, set_budget
from ..usage import ledger
from ..usage.budgets import usd
from ..models import Session
from ..usage.tables import Budget, ModelUsage
from .base import Mistake, command, get_agent, group, print_table, require_schema, settings


@command("usage")
@click.argument("agent_folder", required=False)
@click.option("--days", type=click.IntRange(1, 3660), default=30, show_default=True, help="How many days back.")
def usage_cmd(agent_folder, days):
    """What each agent's model calls cost, per day (in your time zone), with the tokens."""
    require_schema()
    first = (ledger.today(settings().timezone) - timedelta(days=days - 1)).isoformat()
    query = ModelUsage.select().where(ModelUsage.day >= first)
    if agent_folder:
        query = query.where(ModelUsage.agent_folder == get_agent(agent_folder).folder)
    totals: dict[tuple[str, str, str], list] = {}
    flagged = set()
    # sessions an agent answers another agent in (delegation: thread link:<asker>), from the host's records
    askers = {s.id: s.thread_id.removeprefix("link:") for s in
              Session.select(Session.id, Session.thread_id).where(Session.thread_id.startswith("link:"))}
    for_others: dict[tuple[str, str], int] = {}
    for row in query:
        if row.session_id in askers:
            key = (row.agent_folder, askers[row.session_id])
            for_others[key] = for_others.get(key, 0) + row.cost_micro_usd
        key = (row.day, row.agent_folder, row.upstream)
        t = totals.setdefault(key, [0, 0, 0, 0, 0, 0, 0])
        for i, value in enumerate((row.calls, row.input_tokens, row.output_tokens, row.cache_write_tokens,
                                   row.cache_read_tokens, row.cost_micro_usd, row.switched)):
            t[i] += value
        if row.unpriced:
            flagged.add(row.model)
    if not totals:
        click.echo(f"no model calls in the last {days} day(s)")
        return
    rows = [[day, agent, upstream, calls, switched or "-", inp, out, cw, cr, usd(cost)]
            for (day, agent, upstream), (calls, inp, out, cw, cr, cost, switched) in sorted(totals.items(), reverse=True)]
    print_table(["day", "agent", "upstream", "calls", "failover", "input", "output", "cache write", "cache read",
                 "cost"], rows)
    click.echo(f"total: {usd(sum(t[5] for t in totals.values()))}")
    moved = sum(t[6] for t in totals.values())
    if moved:
        click.echo(f"{moved} call(s) answered by a fallback after the model before it failed (failover)")
    if for_others:
        click.echo("of which answering other agents: " + ", ".join(
            f"{agent} for {asker} {usd(cost)}" for (agent, asker), cost in sorted(for_others.items())))
    if flagged:
        click.echo(f"priced at the dearest known rate (not in the price table): {', '.join(sorted(flagged))}")


@group("budget")
def budget_group():
    """What an agent may spend on model calls (USD, per day and per month in your time zone)."""


@budget_group.command("set")
@click.argument("agent_folder")
@click.option("--daily", type=click.FloatRange(0, 1_000_000), help="USD per day.")
@click.option("--monthly", type=click.FloatRange(0, 1_000_000), help="USD per month.")
@click.option("--ceiling-daily", type=click.FloatRange(0, 1_000_000),
              help="The most the agent's admins may set its daily budget to.")
@click.option("--ceiling-monthly", type=click.FloatRange(0, 1_000_000),
              help="The most the agent's admins may set its monthly budget to.")
@click.option("--why", help="Why (kept in the audit log).")
def budget_set(agent_folder, daily, monthly, ceiling_daily, ceiling_monthly, why):
    """At its limit an agent's model calls are refused before they leave the machine; its messages
    wait until the budget starts afresh or is raised. At 80 % you get a card.

    \b
    Example: flask --app app nanoclaw budget set andy --daily 5 --monthly 50
    """
    require_schema()
    if all(v is None for v in (daily, monthly, ceiling_daily, ceiling_monthly)):
        raise Mistake("give --daily, --monthly or a ceiling")
    agent = get_agent(agent_folder)
    try:
        row = set_budget("cli", agent, daily=daily, monthly=monthly, ceiling_daily=ceiling_daily,
                         ceiling_monthly=ceiling_monthly, why=why)
    except BudgetRefused as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"{agent.folder}: {describe(row)}")


@budget_group.command("list")
def budget_list():
    """Every agent's budget and what it spent today and this month."""
    require_schema()
    day = ledger.today(settings().timezone)
    rows = []
    for budget in Budget.select().order_by(Budget.agent_folder):
        spent = ledger.spent(budget.agent_folder, day)
        rows.append([budget.agent_folder, describe(budget), usd(spent.day_micro), usd(spent.month_micro)])
    print_table(["agent", "budget", "today", "this month"], rows,
                empty="no budgets (set one with `budget set AGENT --daily 5`)")


@budget_group.command("clear")
@click.argument("agent_folder")
@click.option("--why", help="Why (kept in the audit log).")
def budget_clear(agent_folder, why):
    """Remove an agent's budget (it may spend without a limit)."""
    require_schema()
    agent = get_agent(agent_folder)
    if not clear_budget("cli", agent, why):
        raise Mistake(f"{agent.folder} has no budget")
    click.echo(f"{agent.folder}: no budget")


def describe(row: Budget) -> str:
    parts = [f"{label} ${value:,.2f}" for label, value in (("daily", row.daily_usd), ("monthly", row.monthly_usd))
             if value is not None]
    caps = [f"{label} ${value:,.2f}" for label, value in (("daily", row.ceiling_daily_usd),
                                                          ("monthly", row.ceiling_monthly_usd)) if value is not None]
    return ", ".join(parts) + (f" (admins up to {', '.join(caps)})" if caps else "") or "none"


